"""node.push.store: the push_endpoints rows, the peers' URLs and the dispatcher's notification scan, on a real
node's database."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from identity import keys, records
from node.agents import store as agents_store
from node.features import LOG
from node.inbox.service import envelope
from node.push import store
from node.service import Node
from node.store import projections
from node.store.conn import Conn
from tests.conftest import AgentCreds
from tests.node.api_helpers import entry_record
from tests.pg_fixtures import on_both_engines
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


def _push_story(conn: Conn, alice: keys.SigningKey, bob: keys.SigningKey, carol: keys.SigningKey) -> list[Any]:
    """Bob registered here, five requests of Alice's directed to him, endpoints of Bob's and Carol's, a peer. Every
    store function's answer, in order."""
    t0 = 1_767_323_045_000
    conn.execute("BEGIN")
    agents_store.insert_local_agent_txn(conn, "bob", bob.did, b"seed", t0)
    agents_store.insert_local_agent_txn(conn, "carol", carol.did, b"seed", t0)
    for i in range(5):
        record = entry_record(
            alice, f"q{i}", created_ms=t0 + i, entry_type="question", performative="request", directed_to=[bob.did]
        )
        projections.append_many(conn, [projections.Incoming(record, *records.check(record))], origin="local", now_ms=t0)
    first = store.insert_endpoint_txn(conn, bob.did, "http://bob:1/hook", '["1"]', '["r"]', t0)
    store.insert_endpoint_txn(conn, carol.did, "http://carol:1/hook", '["1", "2"]', "[]", t0)
    store.update_endpoint_txn(conn, first, '["2"]', '["s"]')
    conn.execute("INSERT INTO peers (node_id, url, added_ms) VALUES ('did:key:zPeer', 'http://peer:1', 1)")
    conn.execute("COMMIT")
    upto = store.newest_notification_id(conn)
    rows = [
        store.endpoint_id_at(conn, bob.did, "http://bob:1/hook"),
        store.endpoint_id_at(conn, bob.did, "http://nowhere"),
        store.count_endpoints(conn, bob.did),
        tuple(store.endpoint_row(conn, first)),
        [tuple(r) for r in store.endpoint_rows(conn, None)],
        [tuple(r) for r in store.endpoint_rows(conn, carol.did)],
        store.peer_urls(conn),
        upto,
        # as the dispatcher reads them (PostgreSQL's link_targets is NULL where SQLite's is [], read alike)
        [(r["agent_id"], envelope(r)) for r in store.new_notifications(conn, 0, upto, [bob.did, carol.did], 3)],
        [(r["agent_id"], envelope(r)) for r in store.new_notifications(conn, 2, 4, [bob.did], 10)],
        store.new_notifications(conn, 0, upto, [carol.did], 3),
        store.pending_counts(conn, 3, upto, [bob.did]),
        store.pending_counts(conn, 0, upto, [carol.did]),
    ]
    conn.execute("BEGIN")
    rows.append(store.delete_endpoint_txn(conn, carol.did, first))  # not Carol's
    rows.append(store.delete_endpoint_txn(conn, bob.did, first))
    conn.execute("COMMIT")
    rows.append(store.count_endpoints(conn, bob.did))
    return rows


def test_the_push_store_answers_alike_on_either_engine(tmp_path: Path, pg_migrated_url: str) -> None:
    alice, bob, carol = (keys.SigningKey.generate() for _ in range(3))
    expected, got = on_both_engines(tmp_path, pg_migrated_url, LOG, lambda conn: _push_story(conn, alice, bob, carol))
    assert got == expected  # PostgreSQL's true is SQLite's 1
    assert expected[1] is None and expected[2] == 1 and expected[3][3:5] == ('["2"]', '["s"]')
    assert len(expected[4]) == 2 and len(expected[5]) == 1 and expected[6] == ["http://peer:1"] and expected[7] == 5
    assert [r[0] for r in expected[8]] == [bob.did] * 3
    assert [e.notification_id for _, e in expected[9]] == [3, 4] and expected[8][0][1].directed_to_me
    assert expected[10] == [] and expected[11] == [(bob.did, 1, "directed_request", 2)] and expected[12] == []
    assert expected[13:] == [False, True, 0]
