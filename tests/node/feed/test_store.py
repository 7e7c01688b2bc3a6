"""node.feed.store: the feed's reads (entries after a cursor in id order, the newest id) on a real node's SQLite
file, through the node's read jobs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from node.entries import queries
from node.feed import store
from node.service import Node
from node.spaces.sight import OPERATOR
from tests.conftest import AgentCreds
from wire.api import PostEntry

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def post(node: Node, who: AgentCreds, content: str, truth_state: str = "fact") -> int:
    body = PostEntry(entry_type="finding", performative="inform", content=content, truth_state=truth_state)  # type: ignore[arg-type]
    entry, _ = await node.entries.post(who.agent_id, body, None)
    return entry.id


async def test_the_newest_id_follows_the_entries(node: Node, make_agent: MakeAgent) -> None:
    assert await node.db.read(store.newest_id) == 0
    alice = await make_agent("alice")
    first = await post(node, alice, "one")
    assert await node.db.read(store.newest_id) == first
    second = await post(node, alice, "two", truth_state="simulation")  # a simulation is an entry too
    assert await node.db.read(store.newest_id) == second > first


async def test_entry_rows_after_a_cursor_in_id_order(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    ids = [await post(node, alice, f"entry {i}") for i in range(4)]
    rows = await node.db.read(lambda c: store.entry_rows(c, 0, 10, False, sight=OPERATOR))
    assert [queries.entry_out(r).id for r in rows] == ids
    assert [queries.entry_out(r).content for r in rows] == [f"entry {i}" for i in range(4)]
    rows = await node.db.read(lambda c: store.entry_rows(c, ids[0], 2, False, sight=OPERATOR))
    assert [queries.entry_out(r).id for r in rows] == ids[1:3]
    assert await node.db.read(lambda c: store.entry_rows(c, ids[-1], 10, False, sight=OPERATOR)) == []


async def test_simulations_only_when_asked_for(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    fact = await post(node, alice, "real")
    simulated = await post(node, alice, "imagined", truth_state="simulation")
    plain = await node.db.read(lambda c: store.entry_rows(c, 0, 10, False, sight=OPERATOR))
    assert [queries.entry_out(r).id for r in plain] == [fact]
    every = await node.db.read(lambda c: store.entry_rows(c, 0, 10, True, sight=OPERATOR))
    assert [queries.entry_out(r).id for r in every] == [fact, simulated]
