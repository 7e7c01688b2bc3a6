"""The CI form of scenarios/space_fed.py: five real `bbs serve` nodes, three spaces with different hosts, a host
stopped for a while, a host named late and one removed; every check it names must hold (about 20 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scenarios import space_fed


@pytest.mark.slow
async def test_the_space_federation_drill_holds_every_check(tmp_path: Path) -> None:
    report = await space_fed.run(tmp_path)
    print(report.text)
    assert set(report.results) == set(space_fed.CHECKS)
    assert not report.failed, report.text
    assert "space federation drill wall time" in report.text


def test_a_failed_check_stays_failed(tmp_path: Path) -> None:
    w = space_fed.World(tmp_path, session=None)  # type: ignore[arg-type]
    w.check("no_leak", True, "alpha on c: log 0")
    w.check("no_leak", False, "alpha on e: log 3")
    w.check("no_leak", True, "beta on a: log 0")
    assert w.results["no_leak"] == space_fed.Check(False, "alpha on e: log 3")
    with pytest.raises(AssertionError):
        w.check("no_such_check", True, "")


def test_the_nodes_that_never_hosted_follow_the_layout(tmp_path: Path) -> None:
    w = space_fed.World(tmp_path, session=None)  # type: ignore[arg-type]
    w.hosts = {"alpha": {"a", "b", "d"}, "beta": {"b", "c"}, "gamma": {"a", "c"}}
    assert w.never_hosted("alpha") == ["c", "e"]
    assert w.never_hosted("beta") == ["a", "d"]  # e hosted beta until its removal: it holds the earlier records
    assert w.never_hosted("gamma") == ["b", "d", "e"]
