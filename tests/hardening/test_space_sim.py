"""The simulation of a federation with spaces (scenarios/space_sim.py), small: every record reaches exactly its
hosting nodes over the real sync server and memory stores, the feed alone delivers it all (the final reconciliation
needs nothing), and no node receives a record of a space it does not host."""

from __future__ import annotations

import pytest

from scenarios.space_sim import main, simulate


async def test_every_record_reaches_exactly_its_hosts() -> None:
    result = await simulate(n=24, spaces=4, degree=2, per_space=6, public=8, seed=7)
    assert result.exact and result.reconcile_need == 0
    assert result.refused == 0  # nothing was served to a node that does not host it (receipt would refuse it)
    assert result.rounds >= 2  # records travel further than one hop
    assert result.space_body_bytes >= result.space_optimum_bytes > 0
    assert result.body_bytes >= result.optimum_bytes


def test_the_command_prints_its_result_and_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--nodes", "12", "--spaces", "3", "--records", "3", "--public", "4"]) == 0
    assert '"exact": true' in capsys.readouterr().out
