"""The CI form of scenarios/redaction.py: three real `bbs serve` nodes with a grace of 0 and a hostile fourth; a secret
posted, searched, linked, notified and backed up, then redacted while one node is stopped; every check it names must
hold (about 25 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scenarios import redaction
from scenarios.checks import Check


@pytest.mark.slow
async def test_the_redaction_drill_holds_every_check(tmp_path: Path) -> None:
    report = await redaction.run(tmp_path)
    print(report.text)
    assert set(report.results) == set(redaction.CHECKS)
    assert not report.failed, report.text
    assert "redaction drill wall time" in report.text
    # the drill's byte search is not blind: the backup taken before the redaction holds the secret, by design
    assert report.results["pre_backup_holds_secret"].ok
    assert "a-before-redaction.tar" in report.results["only_expected_copies"].detail


def test_the_byte_search_finds_the_needle_in_files_and_folders(tmp_path: Path) -> None:
    (tmp_path / "data" / "index").mkdir(parents=True)
    (tmp_path / "data" / "index" / "seg").write_bytes(b"\x00\x01zqsecret\x02")
    (tmp_path / "data" / "bbs.db").write_bytes(b"nothing here")
    (tmp_path / "a.log").write_bytes(b"GET /v1/entries 200 zqsecret")
    found = redaction.files_holding([tmp_path / "data", tmp_path / "a.log", tmp_path / "absent"], b"zqsecret")
    assert found == [str(tmp_path / "data" / "index" / "seg"), str(tmp_path / "a.log")]
    assert redaction.files_holding([tmp_path / "data"], b"elsewhere") == []


def test_a_failed_check_stays_failed(tmp_path: Path) -> None:
    w = redaction.World(tmp_path, session=None)  # type: ignore[arg-type]
    w.check("gone_from_disk", True, "a: in no file")
    w.check("gone_from_disk", False, "b: still in bbs.db-wal")
    w.check("gone_from_disk", True, "c: in no file")
    assert w.results["gone_from_disk"] == Check(False, "b: still in bbs.db-wal")
    with pytest.raises(AssertionError):
        w.check("no_such_check", True, "")
    assert w.secret.startswith("zq") and w.secret != redaction.World(tmp_path, session=None).secret  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.postgresql
async def test_the_redaction_drill_with_a_node_on_postgresql_holds_every_check(tmp_path: Path) -> None:
    report = await redaction.run(tmp_path, postgresql=True)
    print(report.text)
    assert set(report.results) == set(redaction.CHECKS)
    assert not report.failed, report.text
    assert "(b on PostgreSQL)" in report.text
    # b's cluster held the secret before the redaction (its WAL at least): the search of its folder is not blind
    assert "'data/pg_wal/" in report.results["pre_backup_holds_secret"].detail
    assert "b: on PostgreSQL" in report.results["later_backup_clean"].detail
