"""node.dashboard.data: the dashboard's own reads (agents with activity, display names, provenance)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable

from node.dashboard import data
from node.service import Node
from node.spaces.sight import OPERATOR
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import self_signer
from wire.api import PostEntry

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def post(node: Node, who: AgentCreds, content: str) -> tuple[int, str]:
    entry, _ = await node.entries.post(who.agent_id, PostEntry(entry_type="finding", performative="inform",
                                                              content=content), None)  # fmt: skip
    return entry.id, entry.record_hash


async def test_agents_most_recently_active_first(node: Node, make_agent: MakeAgent, clock: FakeClock) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    idle = await self_signer(node, "idle")
    await post(node, alice, "long ago")
    clock.advance(8 * 24 * 3600)  # past the 7-day activity window
    await post(node, bob, "recent")
    await post(node, alice, "recent too")
    now = node.now_ms()
    listed = (await node.db.read(lambda c: data.agents(c, now))).agents
    names = [a.local_name for a in listed]
    assert names[:2] == ["alice", "bob"] and names[-1] == "idle"  # never active: last
    by_name = {a.local_name: a for a in listed}
    assert (by_name["alice"].entry_count, by_name["alice"].entries_last_7_days) == (2, 1)
    assert by_name["alice"].key_kept and not by_name["idle"].key_kept
    assert by_name["idle"].last_active is None and by_name["idle"].entry_count == 0
    assert by_name["bob"].trust == data.NEUTRAL_TRUST  # no signals yet
    assert by_name["alice"].home_node == node.node_id and idle.agent_id == by_name["idle"].agent_id


async def test_provenance_checks_the_stored_record_again(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    entry_id, record_hash = await post(node, alice, "a claim")
    found = await node.db.read(lambda c: data.provenance(c, str(entry_id), sight=OPERATOR))
    assert found is not None and found.signature_valid and found.record_hash == record_hash
    assert (found.origin, found.scope, found.author_display_name) == ("local", "federation", "Alice")
    assert found.record["content"] == "a claim" and found.received_at.endswith("Z")
    assert await node.db.read(lambda c: data.provenance(c, record_hash, sight=OPERATOR)) == found
    assert await node.db.read(lambda c: data.provenance(c, "424242", sight=OPERATOR)) is None
    assert await node.db.read(lambda c: data.provenance(c, "0" * 64, sight=OPERATOR)) is None

    def tamper(conn: sqlite3.Connection) -> None:  # a stored body changed behind the node's back
        body = json.loads(conn.execute("SELECT body FROM records WHERE hash = ?", (record_hash,)).fetchone()[0])
        body["content"] = "a different claim"
        conn.execute("UPDATE records SET body = ? WHERE hash = ?", (json.dumps(body), record_hash))

    await node.db.write(tamper)
    tampered = await node.db.read(lambda c: data.provenance(c, record_hash, sight=OPERATOR))
    assert tampered is not None and not tampered.signature_valid
