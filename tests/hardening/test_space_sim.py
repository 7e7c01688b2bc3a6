"""The simulation of a federation with spaces (scenarios/space_sim.py), small: every record reaches exactly its
hosting nodes over the real sync server, memory stores and the puller's page reading (`sync.ids_first.read_page`),
the feed alone delivers it all (the final reconciliation needs nothing), and no node receives a record of a space it
does not host; read ids first, each hosting node receives each body exactly once, read by bodies (flooding) more."""

from __future__ import annotations

import pytest

from scenarios.space_sim import main, simulate
from sync.ids_first import Policy


@pytest.mark.parametrize("policy", ["ids", "bodies", "adaptive"])
async def test_every_record_reaches_exactly_its_hosts(policy: Policy) -> None:
    result = await simulate(n=24, spaces=4, degree=2, per_space=6, public=8, seed=7, policy=policy)
    assert result.exact and result.reconcile_need == 0
    assert result.refused == 0  # nothing was served to a node that does not host it (receipt would refuse it)
    assert result.rounds >= 2  # records travel further than one hop
    assert result.space_body_bytes >= result.space_optimum_bytes > 0
    assert result.wire_bytes > result.body_bytes >= result.optimum_bytes  # every byte counted, not bodies alone
    if policy == "ids":  # each body fetched once by each hosting node: the optimum, to the byte
        assert (result.body_bytes, result.space_body_bytes) == (result.optimum_bytes, result.space_optimum_bytes)
        assert result.announced > result.deliveries and result.fetches > 0
    if policy == "bodies":  # flooding: a body comes again from every neighbour that had it first
        assert result.body_bytes > result.optimum_bytes and result.fetches == result.announced == 0


async def test_ids_first_costs_fewer_bytes_than_flooding_on_a_dense_graph() -> None:
    ids = await simulate(n=30, spaces=3, degree=3, per_space=5, public=10, seed=3, policy="ids")
    bodies = await simulate(n=30, spaces=3, degree=3, per_space=5, public=10, seed=3, policy="bodies")
    assert ids.exact and bodies.exact and ids.deliveries == bodies.deliveries
    assert ids.wire_bytes < bodies.wire_bytes


def test_the_command_prints_its_result_and_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--nodes", "12", "--spaces", "3", "--records", "3", "--public", "4"]) == 0
    out = capsys.readouterr().out
    assert '"exact": true' in out and '"policy": "ids"' in out and '"wire_ratio"' in out


async def test_compact_ids_pages_change_the_bytes_not_the_exchanges() -> None:
    """Decision 74: the same pages, announcements and fetches as ids pages in JSON, each body still once, and the
    overhead above the bodies (ids, fetch requests, framing, envelopes) less than half of what JSON spent."""
    packed = await simulate(n=30, spaces=3, degree=3, per_space=5, public=10, seed=3, compact_ids=True)
    json_ids = await simulate(n=30, spaces=3, degree=3, per_space=5, public=10, seed=3, compact_ids=False)
    assert packed.exact and json_ids.exact and packed.deliveries == json_ids.deliveries
    assert (packed.rounds, packed.announced, packed.fetches) == (json_ids.rounds, json_ids.announced, json_ids.fetches)
    assert packed.body_bytes == json_ids.body_bytes == packed.optimum_bytes
    assert packed.wire_bytes - packed.optimum_bytes < (json_ids.wire_bytes - json_ids.optimum_bytes) / 2
    assert packed.space_wire_bytes < json_ids.space_wire_bytes
