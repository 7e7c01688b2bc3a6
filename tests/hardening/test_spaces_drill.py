"""The CI form of scenarios/spaces.py: one real `bbs serve` node, three spaces, agents over REST, MCP and the CLI;
every check it names must hold (about 30 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scenarios import spaces


@pytest.mark.slow
async def test_the_spaces_drill_holds_every_check(tmp_path: Path) -> None:
    report = await spaces.run(tmp_path)
    print(report.text)
    assert set(report.results) == set(spaces.CHECKS)
    assert not report.failed, report.text
    assert "spaces drill wall time" in report.text


def test_a_failed_check_stays_failed_and_the_table_says_so(tmp_path: Path) -> None:
    w = spaces.World(tmp_path, session=None)  # type: ignore[arg-type]
    w.check("no_leak", True, "mom ok")
    w.check("no_leak", False, "eve: {'REST': ['famword']}")
    w.check("no_leak", True, "dad ok")
    assert w.results["no_leak"] == spaces.Check(False, "eve: {'REST': ['famword']}")
    with pytest.raises(AssertionError):
        w.check("no_such_check", True, "")
    table = spaces.table({name: spaces.Check(name != "no_leak", "x") for name in spaces.CHECKS})
    assert table.count("| FAILED |") == 1 and table.count("| held |") == len(spaces.CHECKS) - 1


def test_who_reads_what_follows_the_layout(tmp_path: Path) -> None:
    w = spaces.World(tmp_path, session=None)  # type: ignore[arg-type]
    assert w.reads("kid2") == {None, "family", "kids"} and w.reads("outsider") == {None}
    w.layout["family"][1].pop("kid2")
    assert w.reads("kid2") == {None, "kids"} and "kid2" in spaces.SPACES["family"][1]  # the layout is a copy
