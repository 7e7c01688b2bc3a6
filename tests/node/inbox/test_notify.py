"""node.inbox.notify: fan-out of new entries to addressees and subscribers, and the inbox's state machine.

The node posts real entries (its own fan-out runs as they are stored); the tests then call notify's functions
on the node's SQLite file through the writer, as the service does.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from identity import keys
from identity.schema import EntryRecord
from node.inbox import notify, store
from node.service import Node
from tests.conftest import AgentCreds, FakeClock
from wire.api import PostEntry, SubscriptionIn

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def post(node: Node, author: AgentCreds, content: str, **fields: Any) -> tuple[int, str]:
    body = msgspec.convert({"entry_type": "finding", "performative": "inform", "content": content, **fields}, PostEntry)
    entry, _ = await node.entries.post(author.agent_id, body, None)
    return entry.id, entry.record_hash


async def subscribe(node: Node, who: AgentCreds, **dims: Any) -> int:
    sub, _ = await node.inbox.subscribe(who.agent_id, msgspec.convert(dims, SubscriptionIn))
    return sub.id


async def notifications(node: Node) -> set[tuple[str, int, int, str, int | None]]:
    rows = await node.db.read(
        lambda c: c.execute("SELECT agent_id, entry_id, tier, reason, subscription_id FROM notifications").fetchall()
    )
    return {tuple(r) for r in rows}


async def statuses(node: Node, agent: AgentCreds) -> dict[int, tuple[str, int]]:
    rows = await node.db.read(
        lambda c: c.execute(
            "SELECT id, status, attempt_count FROM notifications WHERE agent_id = ?", (agent.agent_id,)
        ).fetchall()
    )
    return {r[0]: (r[1], r[2]) for r in rows}


async def take(
    node: Node, agent: AgentCreds, *, limit: int = 50, since_ms: int | None = None, deliver: bool = False
) -> list[sqlite3.Row]:
    now = node.now_ms()
    return await node.db.write(
        lambda c: notify.take_inbox(
            c, agent.agent_id, limit=limit, since_ms=since_ms, mark_delivered=deliver, now_ms=now
        )
    )


async def test_addressees_and_subscribers_are_notified_by_tier(node: Node, make_agent: MakeAgent) -> None:
    alice, bob, carol = await make_agent("alice"), await make_agent("bob"), await make_agent("carol")
    assert not await node.db.read(store.any_subscriptions)
    shed = await subscribe(node, carol, tags=["shed"])
    await subscribe(node, alice, tags=["shed"])  # the author is never notified of its own entries
    assert await node.db.read(store.any_subscriptions)
    request, _ = await post(node, alice, "please help", performative="request", directed_to=[bob.agent_id])
    note, _ = await post(node, alice, "fyi", directed_to=[bob.agent_id])
    tagged, _ = await post(node, alice, "the shed", tags=["shed"])
    both, _ = await post(node, alice, "both", tags=["shed"], directed_to=[carol.agent_id])
    await post(node, alice, "nobody", tags=["garden"])
    assert await notifications(node) == {
        (bob.agent_id, request, 1, "directed_request", None),
        (bob.agent_id, note, 2, "directed", None),
        (carol.agent_id, tagged, 2, "subscription", shed),
        (carol.agent_id, both, 2, "directed", None),  # addressed and subscribed: notified as an addressee
    }


async def test_only_agents_of_this_node_are_notified(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    stranger = keys.SigningKey.generate().did
    await post(node, alice, "to someone elsewhere", performative="request", directed_to=[stranger])
    assert await notifications(node) == set()


async def test_subscription_dimensions_are_anded(node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    sub = await subscribe(node, bob, tags=["shed", "roof"], entry_types=["question"], authors=[alice.agent_id])
    question, _ = await post(node, alice, "which paint?", entry_type="question", performative="query", tags=["roof"])
    await post(node, alice, "a finding about the roof", tags=["roof"])  # wrong type
    await post(node, alice, "a question elsewhere", entry_type="question", performative="query", tags=["garden"])
    assert await notifications(node) == {(bob.agent_id, question, 2, "subscription", sub)}


async def test_fan_out_rebuilds_what_storing_the_entries_made(node: Node, make_agent: MakeAgent) -> None:
    """fan_out over a run of stored entries notifies exactly as the node did while storing them, in one statement."""
    alice, bob, carol = await make_agent("alice"), await make_agent("bob"), await make_agent("carol")
    await subscribe(node, carol, performatives=["propose"])
    await subscribe(node, bob, directed=True)
    for i in range(5):
        await post(node, alice, f"p{i}", performative="propose", directed_to=[bob.agent_id] if i % 2 else [])
    made = await notifications(node)
    assert len(made) == 7

    def again(conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM notifications")
        rows = conn.execute("SELECT r.seq, r.body FROM records r JOIN entries e ON e.id = r.seq ORDER BY seq")
        run = [(seq, msgspec.json.decode(body, type=EntryRecord)) for seq, body in rows]
        notify.fan_out(conn, run, node.now_ms())

    await node.db.write(again)
    assert await notifications(node) == made


async def test_a_contradiction_notifies_the_contradicted_author_first(node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    sub = await subscribe(node, alice, tags=["roof"])
    claim, claim_hash = await post(node, alice, "the roof is sound")
    rebuttal, _ = await post(
        node, bob, "the roof leaks", tags=["roof"], links=[{"target": str(claim), "link_type": "contradicts"}]
    )
    # the subscription's tier-2 notification was upgraded in place: tier 1, and the subscription still named
    assert await notifications(node) == {(alice.agent_id, rebuttal, 1, "contradiction", sub)}

    def again(conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM notifications")
        notify.contradictions(conn, json.dumps([claim_hash]), node.now_ms())  # decidable from either end

    await node.db.write(again)
    assert await notifications(node) == {(alice.agent_id, rebuttal, 1, "contradiction", None)}
    await node.db.write(lambda c: c.execute("DELETE FROM notifications"))
    await node.db.write(lambda c: notify.contradictions(c, json.dumps(["0" * 64]), node.now_ms()))
    assert await notifications(node) == set()


async def test_a_poll_leases_and_a_lapsed_lease_delivers_again(
    node: Node, make_agent: MakeAgent, clock: FakeClock
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await post(node, alice, "for bob", directed_to=[bob.agent_id])
    urgent, _ = await post(node, alice, "urgent", performative="request", directed_to=[bob.agent_id])
    assert await node.db.read(lambda c: store.has_deliverable(c, bob.agent_id, node.now_ms()))
    rows = await take(node, bob)
    assert rows[0]["entry_id"] == urgent  # tier 1 first
    assert {status for status, _ in (await statuses(node, bob)).values()} == {"leased"}
    assert not await node.db.read(lambda c: store.has_deliverable(c, bob.agent_id, node.now_ms()))
    assert await take(node, bob) == []  # leased: not offered again while the lease runs
    clock.advance(notify.LEASE_MS / 1000 + 1)
    again = await take(node, bob)
    assert [r["attempt_count"] for r in again] == [1, 1]  # the attempt of this poll is counted after the read
    assert {count for _, count in (await statuses(node, bob)).values()} == {2}


async def test_after_max_attempts_a_notification_fails(node: Node, make_agent: MakeAgent, clock: FakeClock) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await post(node, alice, "for bob", directed_to=[bob.agent_id])
    for _ in range(notify.MAX_ATTEMPTS):
        assert len(await take(node, bob)) == 1
        clock.advance(notify.LEASE_MS / 1000 + 1)
    assert await take(node, bob) == []
    assert [status for status, _ in (await statuses(node, bob)).values()] == ["failed"]


async def test_since_and_limit_choose_the_page(node: Node, make_agent: MakeAgent, clock: FakeClock) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await post(node, alice, "old", directed_to=[bob.agent_id])
    clock.advance(10)
    cut = node.now_ms()
    new, _ = await post(node, alice, "new", directed_to=[bob.agent_id])
    assert [r["entry_id"] for r in await take(node, bob, since_ms=cut)] == [new]
    assert len(await take(node, bob, limit=1)) == 1
