"""node.push.store: the push_endpoints rows, the peers' URLs and the dispatcher's notification scan, on a real
node's database."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable

import pytest

from node.push import store
from node.service import Node
from tests.conftest import AgentCreds
from wire.api import PostEntry, SignedSubmission

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def test_endpoint_rows(node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    url = "http://127.0.0.1:9/p"
    assert await node.db.read(lambda c: store.endpoint_id_at(c, alice.agent_id, url)) is None
    first = await node.db.write(lambda c: store.insert_endpoint_txn(c, alice.agent_id, url, "[1]", "[]", 7))
    second = await node.db.write(lambda c: store.insert_endpoint_txn(c, bob.agent_id, url, "[1, 2]", '["x"]', 8))
    assert second > first
    assert await node.db.read(lambda c: store.endpoint_id_at(c, alice.agent_id, url)) == first
    assert await node.db.read(lambda c: store.count_endpoints(c, alice.agent_id)) == 1
    await node.db.write(lambda c: store.update_endpoint_txn(c, first, "[2]", '["y"]'))
    row = await node.db.read(lambda c: store.endpoint_row(c, first))
    assert (row["agent_id"], row["url"], row["tiers"], row["reasons"], row["created_ms"]) == (
        alice.agent_id,
        url,
        "[2]",
        '["y"]',
        7,
    )
    assert await node.db.read(lambda c: store.endpoint_row(c, second + 1)) is None
    assert [r["id"] for r in await node.db.read(lambda c: store.endpoint_rows(c, None))] == [first, second]
    assert [r["id"] for r in await node.db.read(lambda c: store.endpoint_rows(c, bob.agent_id))] == [second]
    assert not await node.db.write(lambda c: store.delete_endpoint_txn(c, alice.agent_id, second))  # not hers
    assert await node.db.write(lambda c: store.delete_endpoint_txn(c, bob.agent_id, second))
    assert [r["id"] for r in await node.db.read(lambda c: store.endpoint_rows(c, None))] == [first]


async def test_one_url_per_agent(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await node.db.write(lambda c: store.insert_endpoint_txn(c, alice.agent_id, "http://h/p", "[1]", "[]", 1))
    with pytest.raises(sqlite3.IntegrityError):
        await node.db.write(lambda c: store.insert_endpoint_txn(c, alice.agent_id, "http://h/p", "[1]", "[]", 2))


async def test_peer_urls(node: Node) -> None:
    assert await node.db.read(store.peer_urls) == []
    await node.db.write(
        lambda c: c.execute("INSERT INTO peers (node_id, url, added_ms) VALUES ('did:key:zPeer', 'http://peer:1', 1)")
    )
    assert await node.db.read(store.peer_urls) == ["http://peer:1"]


async def test_the_notification_scan(node: Node, make_agent: MakeAgent) -> None:
    alice, bob, carol = await make_agent("alice"), await make_agent("bob"), await make_agent("carol")
    assert await node.db.read(store.newest_notification_id) == 0
    entries: list[PostEntry | SignedSubmission] = [
        PostEntry("question", "request", f"q{i}", directed_to=[bob.agent_id]) for i in range(5)
    ]
    await node.entries.post_batch(alice.agent_id, entries)
    upto = await node.db.read(store.newest_notification_id)
    assert upto == 5
    rows = await node.db.read(lambda c: store.new_notifications(c, 0, upto, [bob.agent_id, carol.agent_id], 3))
    assert [r["agent_id"] for r in rows] == [bob.agent_id] * 3
    assert [r["notification_id"] for r in rows] == [1, 2, 3]  # oldest first, at most the limit
    assert (rows[0]["entry_type"], rows[0]["directed_to_me"], json.loads(rows[0]["tags"])) == ("question", 1, [])
    assert await node.db.read(lambda c: store.new_notifications(c, 0, upto, [carol.agent_id], 3)) == []
    after_3 = await node.db.read(lambda c: store.new_notifications(c, 2, 4, [bob.agent_id], 10))
    assert [r["notification_id"] for r in after_3] == [3, 4]  # ids in (after, upto]
    counts = await node.db.read(lambda c: store.pending_counts(c, 3, upto, [bob.agent_id]))
    assert counts == [(bob.agent_id, 1, "directed_request", 2)]
    assert await node.db.read(lambda c: store.pending_counts(c, 0, upto, [carol.agent_id])) == []
