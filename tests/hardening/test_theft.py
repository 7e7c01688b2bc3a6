"""The CI form of scenarios/theft.py: the three-node theft drill on real `bbs serve` processes, and its table.

The drill runs whole (about 10 s); every check it names must hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from identity import key_history, keys
from scenarios import theft
from scenarios.checks import Check


@pytest.mark.slow
async def test_the_theft_drill_holds_every_check(tmp_path: Path) -> None:
    report = await theft.run(tmp_path)
    print(report.text)
    assert set(report.results) == set(theft.CHECKS)
    assert not report.failed, report.text
    assert "theft drill wall time" in report.text


def test_a_check_failing_once_stays_failed_and_unknown_checks_are_refused(tmp_path: Path) -> None:
    w = theft.World(tmp_path, session=None)  # type: ignore[arg-type]
    w.check("revocation_stored", True, "a")
    w.check("revocation_stored", False, "b never showed K2")
    w.check("revocation_stored", True, "c")
    assert w.results["revocation_stored"] == Check(False, "b never showed K2")
    w.check("owner_lease_honoured", True, "a")
    w.check("owner_lease_honoured", True, "b")
    assert w.results["owner_lease_honoured"] == Check(True, "a; b")
    with pytest.raises(AssertionError):
        w.check("no_such_check", True, "")
    table = theft.table({name: Check(name != "revocation_stored", "x") for name in theft.CHECKS})
    assert table.count("| FAILED |") == 1 and table.count("| held |") == len(theft.CHECKS) - 1


def test_key_events_the_drill_signs_follow_the_chain_rules() -> None:
    owner, k1, k2, recovery = (keys.SigningKey.generate() for _ in range(4))
    first, pages = theft.key_event(
        owner.did, owner, "rotate", 1, prior=None, installs=k1, subject=owner, vouched=["0" * 64],
        commits=k2, recovery=recovery,
    )  # fmt: skip
    revoke, _ = theft.key_event(
        owner.did, recovery, "revoke", 2, prior=first.address, installs=k2, subject=k1, vouched=[]
    )
    history = key_history.resolve(owner.did, [(first.address, first.record), (revoke.address, revoke.record)])
    assert history.chain == (first.address, revoke.address) and history.state.key == k2.did
    assert len(pages) == 1 and "signing_key" not in pages[0]  # signed by the first key: no signing_key
    assert key_history.key_verdict(history, k1.did, "1" * 64, {}) == "void"  # vouched for nothing
