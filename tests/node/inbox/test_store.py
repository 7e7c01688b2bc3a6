"""node.inbox.store: the inbox's SQL (subscriptions, the fan-out statement, a poll's lease, ack and expiry) on a
real node's SQLite file, through the node's own read and write jobs.

The node posts real entries (its fan-out runs as they are stored); the tests then call the store functions as
node/inbox/notify.py and node/inbox/service.py do.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from identity import keys, records
from node.features import LOG
from node.inbox import notify, store
from node.inbox.service import envelope
from node.service import Node
from node.store import projections
from node.store.conn import Conn
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import entry_record, hash_of
from tests.node.inbox.test_notify import statuses, take
from tests.pg_fixtures import on_both_engines
from wire.api import PostEntry

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
DIMS = {"tags": ["roof", "shed"], "entry_types": ["question"], "performatives": [], "authors": [], "spaces": []}


async def post(node: Node, author: AgentCreds, content: str, **fields: Any) -> tuple[int, str]:
    body = msgspec.convert({"entry_type": "finding", "performative": "inform", "content": content, **fields}, PostEntry)
    entry, _ = await node.entries.post(author.agent_id, body, None)
    return entry.id, entry.record_hash


# ---- subscriptions -------------------------------------------------------------------------------------------


async def test_a_subscription_is_stored_with_its_terms_and_found_by_filter(node: Node, make_agent: MakeAgent) -> None:
    bob = await make_agent("bob")
    now = node.now_ms()
    assert not await node.db.read(store.any_subscriptions)
    sub_id = await node.db.write(lambda c: store.insert_subscription_txn(c, bob.agent_id, DIMS, "k1", True, now))
    assert await node.db.read(store.any_subscriptions)
    row = await node.db.read(lambda c: store.subscription(c, sub_id))
    assert (row["agent_id"], json.loads(row["tags"]), row["directed"], row["n_tags"], row["n_types"]) == (
        bob.agent_id,
        ["roof", "shed"],
        1,
        2,
        1,
    )
    terms = await node.db.read(
        lambda c: c.execute("SELECT dim, value FROM subscription_terms WHERE sub_id = ?", (sub_id,)).fetchall()
    )
    assert sorted(tuple(t) for t in terms) == [("tag", "roof"), ("tag", "shed"), ("type", "question")]
    assert (await node.db.read(lambda c: store.subscription_by_filter(c, bob.agent_id, "k1")))["id"] == sub_id
    assert await node.db.read(lambda c: store.subscription_by_filter(c, bob.agent_id, "k2")) is None
    assert await node.db.read(lambda c: store.subscription_by_filter(c, "did:key:zother", "k1")) is None


async def test_subscriptions_are_counted_listed_and_deleted_per_agent(node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    now = node.now_ms()
    ids = [
        await node.db.write(functools.partial(store.insert_subscription_txn, agent_id=bob.agent_id, dims=DIMS,
                                              filter_key=k, directed=False, now_ms=now))
        for k in ("a", "b")
    ]  # fmt: skip
    assert await node.db.read(lambda c: store.subscription_count(c, bob.agent_id)) == 2
    assert await node.db.read(lambda c: store.subscription_count(c, alice.agent_id)) == 0
    assert [r["id"] for r in await node.db.read(lambda c: store.agent_subscriptions(c, bob.agent_id))] == ids
    assert await node.db.write(lambda c: store.delete_subscription_txn(c, alice.agent_id, ids[0])) == 0  # not hers
    assert await node.db.write(lambda c: store.delete_subscription_txn(c, bob.agent_id, ids[0])) == 1
    assert await node.db.write(lambda c: store.delete_subscription_txn(c, bob.agent_id, ids[0])) == 0
    assert [r["id"] for r in await node.db.read(lambda c: store.agent_subscriptions(c, bob.agent_id))] == ids[1:]
    assert await node.db.read(lambda c: store.subscription(c, ids[0])) is None


# ---- fan-out and contradictions ------------------------------------------------------------------------------


def test_the_fan_out_statement_has_only_the_parts_it_needs() -> None:
    both = store.fan_out_sql(directed=True, subscribed=True)
    assert "d.value" in both and "subscription_terms" in both
    assert "subscription_terms" not in store.fan_out_sql(directed=True, subscribed=False)
    assert "json_each(r.directed)" not in store.fan_out_sql(directed=False, subscribed=True)


async def test_fan_out_txn_notifies_the_run_it_is_given(node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    entry, _ = await post(node, alice, "for bob", performative="request", directed_to=[bob.agent_id])
    await node.db.write(lambda c: c.execute("DELETE FROM notifications"))
    run = json.dumps([[entry, alice.agent_id, "finding", "request", [], [bob.agent_id], 0]])
    now = node.now_ms()
    await node.db.write(lambda c: store.fan_out_txn(c, run, now, now + 5, directed=True, subscribed=False))
    rows = await node.db.read(
        lambda c: c.execute("SELECT agent_id, entry_id, tier, reason, created_ms, expires_ms FROM notifications")
        .fetchall()
    )  # fmt: skip
    assert [tuple(r) for r in rows] == [(bob.agent_id, entry, 1, "directed_request", now, now + 5)]


async def test_contradicted_finds_the_authors_and_upserts_upgrade_them(node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    _, claim_hash = await post(node, alice, "the roof is sound")
    rebuttal, _ = await post(node, bob, "the roof leaks", links=[{"target": claim_hash, "link_type": "contradicts"}])
    found = await node.db.read(lambda c: store.contradicted(c, json.dumps([claim_hash])))
    assert [tuple(r) for r in found] == [(alice.agent_id, rebuttal)]
    assert await node.db.read(lambda c: store.contradicted(c, json.dumps(["0" * 64]))) == []
    await node.db.write(lambda c: c.execute("UPDATE notifications SET tier = 2, status = 'delivered'"))
    now = node.now_ms()
    await node.db.write(
        lambda c: store.upsert_notifications_txn(c, [(alice.agent_id, rebuttal, 1, "contradiction", now, now + 9)])
    )
    rows = await node.db.read(
        lambda c: c.execute("SELECT agent_id, tier, status, expires_ms FROM notifications").fetchall()
    )
    assert [tuple(r) for r in rows] == [(alice.agent_id, 1, "pending", now + 9)]  # upgraded: pending again


# ---- a poll's page, leases, acks and expiry ------------------------------------------------------------------


async def test_the_page_is_leased_or_delivered_by_id(node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    for i in range(3):
        await post(node, alice, f"n{i}", directed_to=[bob.agent_id])
    now = node.now_ms()
    assert await node.db.read(lambda c: store.has_deliverable(c, bob.agent_id, now))
    page = await node.db.read(lambda c: store.inbox_page(c, bob.agent_id, now, None, 2))
    ids = [r["notification_id"] for r in page]
    assert len(ids) == 2 and page[0]["directed_to_me"] == 1
    await node.db.write(lambda c: store.lease_txn(c, ids[:1], now + 1000))
    await node.db.write(lambda c: store.deliver_txn(c, ids[1:], now))
    await node.db.write(lambda c: store.lease_txn(c, [], now))  # an empty list changes nothing
    got = await statuses(node, bob)
    assert (got[ids[0]], got[ids[1]]) == (("leased", 1), ("delivered", 1))
    assert sorted(s for s, _ in got.values()) == ["delivered", "leased", "pending"]


async def test_lapsed_leases_fail_after_max_attempts(node: Node, make_agent: MakeAgent, clock: FakeClock) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await post(node, alice, "for bob", directed_to=[bob.agent_id])
    await take(node, bob)
    clock.advance(notify.LEASE_MS / 1000 + 1)
    now = node.now_ms()
    await node.db.write(lambda c: store.fail_lapsed_txn(c, bob.agent_id, now, 2))  # one attempt: not yet
    assert [s for s, _ in (await statuses(node, bob)).values()] == ["leased"]
    await node.db.write(lambda c: store.fail_lapsed_txn(c, bob.agent_id, now, 1))
    assert [s for s, _ in (await statuses(node, bob)).values()] == ["failed"]
    assert not await node.db.read(lambda c: store.has_deliverable(c, bob.agent_id, now))


async def test_ack_and_mark_delivered(node: Node, make_agent: MakeAgent) -> None:
    alice, bob, carol = await make_agent("alice"), await make_agent("bob"), await make_agent("carol")
    for i in range(3):
        await post(node, alice, f"n{i}", directed_to=[bob.agent_id, carol.agent_id])
    bob_ids = sorted(await statuses(node, bob))
    carol_ids = sorted(await statuses(node, carol))
    now = node.now_ms()
    assert await node.db.write(lambda c: store.ack_txn(c, bob.agent_id, carol_ids, now)) == 0  # not bob's
    assert await node.db.write(lambda c: store.ack_txn(c, bob.agent_id, bob_ids[:1], now)) == 1  # pending -> delivered
    await take(node, bob, limit=1)
    assert await node.db.write(lambda c: store.ack_txn(c, bob.agent_id, bob_ids, now)) == 2  # leased and pending
    assert await node.db.write(lambda c: store.ack_txn(c, bob.agent_id, bob_ids, now)) == 0  # delivered stays so
    assert await node.db.write(lambda c: store.ack_txn(c, bob.agent_id, [], now)) == 0
    rows = await take(node, carol, limit=2, deliver=True)
    assert len(rows) == 2
    assert sorted(status for status, _ in (await statuses(node, carol)).values()) == [
        "delivered",
        "delivered",
        "pending",
    ]


async def test_notifications_expire(node: Node, make_agent: MakeAgent, clock: FakeClock) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await post(node, alice, "for bob", directed_to=[bob.agent_id])
    assert not await node.db.read(lambda c: store.expired_waiting(c, node.now_ms()))
    clock.advance(notify.NOTIFICATION_TTL_MS / 1000 + 1)
    now = node.now_ms()
    assert await node.db.read(lambda c: store.expired_waiting(c, now))
    assert await node.db.write(lambda c: store.expire_txn(c, now)) == 1
    assert await node.db.write(lambda c: store.expire_txn(c, now)) == 0
    assert not await node.db.read(lambda c: store.expired_waiting(c, now))
    assert [status for status, _ in (await statuses(node, bob)).values()] == ["expired"]
    assert await take(node, bob) == []


# ---- the fan-out on both engines -----------------------------------------------------------------------------


DAVE = keys.SigningKey.generate().did
ODD_TAGS = ["\x00", "r\x01of"]  # PostgreSQL's text holds them escaped, the fan-out's JSON run too (record 84)


def _fan_out_story(conn: Conn, alice: keys.SigningKey, bob: str, carol: str) -> list[tuple[Any, ...]]:
    """Bob, Carol and Dave are agents of this node; Bob subscribes to questions tagged "roof", Carol to everything,
    Dave to the tag "r\\x01of". Alice's entries: a request addressed to Bob, a finding and a question tagged "roof",
    a simulation, one addressed to an agent of another node, one tagged ODD_TAGS. The notifications they leave, in
    insertion order."""
    t0 = 1_767_323_045_000
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO local_agents (name, agent_id, key_seed, created_ms) VALUES (?, ?, NULL, ?)",
        [("bob", bob, t0), ("carol", carol, t0), ("dave", DAVE, t0)],
    )
    store.insert_subscription_txn(conn, bob, DIMS, "k1", False, t0)
    store.insert_subscription_txn(conn, carol, {**DIMS, "tags": [], "entry_types": []}, "k2", False, t0)
    store.insert_subscription_txn(conn, DAVE, {**DIMS, "tags": ODD_TAGS[1:], "entry_types": []}, "k3", False, t0)
    elsewhere = keys.SigningKey.generate().did
    story = [
        entry_record(alice, "can you look?", created_ms=t0 + 1, performative="request", directed_to=[bob]),
        entry_record(alice, "the roof leaks", created_ms=t0 + 2, tags=["roof"]),
        entry_record(alice, "is the shed ok?", created_ms=t0 + 2, tags=["roof", "shed"], entry_type="question"),
        entry_record(alice, "imagined roof", created_ms=t0 + 3, tags=["roof"], truth_state="simulation"),
        entry_record(alice, "for someone else", created_ms=t0 + 4, directed_to=[elsewhere]),
        entry_record(alice, "odd tags", created_ms=t0 + 5, tags=ODD_TAGS),
    ]
    items = [projections.Incoming(r, *records.check(r)) for r in story]
    projections.append_many(conn, items[:1], origin="local", now_ms=t0)
    projections.append_many(conn, items[1:], origin="local", now_ms=t0)  # a run of several: one statement
    conn.execute("COMMIT")
    return [
        tuple(row)
        for row in conn.execute(
            "SELECT n.agent_id, e.content, n.subscription_id IS NOT NULL, n.tier, n.reason, n.status, n.expires_ms"
            " FROM notifications n JOIN entries e ON e.id = n.entry_id ORDER BY n.id"
        )
    ]


def test_the_fan_out_notifies_the_same_agents_on_either_engine(tmp_path: Path, pg_migrated_url: str) -> None:
    alice, bob, carol = keys.SigningKey.generate(), keys.SigningKey.generate().did, keys.SigningKey.generate().did
    expected, got = on_both_engines(
        tmp_path, pg_migrated_url, LOG, lambda conn: _fan_out_story(conn, alice, bob, carol)
    )
    # Bob's subscription wants questions tagged roof; Carol's everything but simulations
    assert sorted((agent, content, reason) for agent, content, _, _, reason, _, _ in expected) == sorted(
        [
            (bob, "can you look?", "directed_request"),
            (carol, "can you look?", "subscription"),
            (carol, "the roof leaks", "subscription"),
            (bob, "is the shed ok?", "subscription"),
            (carol, "is the shed ok?", "subscription"),
            (carol, "for someone else", "subscription"),
            (carol, "odd tags", "subscription"),
            (DAVE, "odd tags", "subscription"),
        ]
    )
    assert got == expected  # the same rows in the same order (PostgreSQL's true is SQLite's 1)


def _contradiction_story(conn: Conn, alice: keys.SigningKey, bob: keys.SigningKey, link_first: bool) -> list[Any]:
    """Bob (an agent of this node) posts a claim; Alice contradicts it, with the link in her entry, arriving before
    or after the claim. Bob's notifications."""
    t0 = 1_767_323_045_000
    claim = entry_record(bob, "the shed is dry", created_ms=t0)
    target = {"target": records.compute_hash(claim), "link_type": "contradicts", "annotation": ""}
    rebuttal = entry_record(alice, "it is not", created_ms=t0 + 1, links=[target])
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO local_agents (name, agent_id, key_seed, created_ms) VALUES ('bob', ?, NULL, ?)", (bob.did, t0)
    )
    for record in [rebuttal, claim] if link_first else [claim, rebuttal]:
        item = projections.Incoming(record, *records.check(record))
        projections.append_many(conn, [item], origin="local", now_ms=t0)
    conn.execute("COMMIT")
    return [
        tuple(row)
        for row in conn.execute(
            "SELECT n.agent_id, e.content, n.tier, n.reason FROM notifications n JOIN entries e ON e.id = n.entry_id"
            " ORDER BY n.id"
        )
    ]


@pytest.mark.parametrize("link_first", [True, False])
def test_a_contradiction_is_noticed_alike_on_either_engine(
    tmp_path: Path, pg_migrated_url: str, link_first: bool
) -> None:
    alice, bob = keys.SigningKey.generate(), keys.SigningKey.generate()
    expected, got = on_both_engines(
        tmp_path, pg_migrated_url, LOG, lambda conn: _contradiction_story(conn, alice, bob, link_first)
    )
    assert expected == [(bob.did, "it is not", 1, "contradiction")]  # the contradicting entry, named to its target
    assert got == expected


def _poll_story(conn: Conn, alice: keys.SigningKey, bob: keys.SigningKey) -> list[Any]:
    """Bob, an agent of this node, subscribes to everything; Alice posts a request to him, a finding, and a
    contradiction of his claim. Bob polls (leasing), acks one, polls again after the lease lapsed, and polls for
    deliveries. The envelopes and the notifications' states, as service.envelope renders them."""
    t0 = 1_767_323_045_000
    claim = entry_record(bob, "the shed is dry", created_ms=t0)
    story = [
        claim,
        entry_record(alice, "can you look?", created_ms=t0 + 1, performative="request", directed_to=[bob.did]),
        entry_record(alice, "a finding", created_ms=t0 + 2, tags=["roof"]),
        entry_record(
            alice,
            "it is not",
            created_ms=t0 + 3,
            links=[{"target": hash_of(claim), "link_type": "contradicts", "annotation": ""}],
        ),
    ]
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO local_agents (name, agent_id, key_seed, created_ms) VALUES ('bob', ?, NULL, ?)", (bob.did, t0)
    )
    store.insert_subscription_txn(conn, bob.did, {**DIMS, "tags": [], "entry_types": []}, "all", False, t0)
    for record in story:
        item = projections.Incoming(record, *records.check(record))
        projections.append_many(conn, [item], origin="local", now_ms=t0)
    conn.execute("COMMIT")

    def poll(now_ms: int, *, deliver: bool = False, since: int | None = None) -> list[Any]:
        conn.execute("BEGIN")
        rows = notify.take_inbox(conn, bob.did, limit=2, since_ms=since, mark_delivered=deliver, now_ms=now_ms)
        conn.execute("COMMIT")
        return [envelope(row) for row in rows]

    first = poll(t0 + 10)
    conn.execute("BEGIN")
    acked = store.ack_txn(conn, bob.did, [first[0].notification_id, 10_000], t0 + 11)
    conn.execute("COMMIT")
    again = poll(t0 + 10 + notify.LEASE_MS + 1)  # the second lease lapsed: deliverable again
    delivered = poll(t0 + 10 + 2 * notify.LEASE_MS + 2, deliver=True, since=t0)
    states = [tuple(r) for r in conn.execute("SELECT id, status, attempt_count FROM notifications ORDER BY id")]
    return [first, acked, again, delivered, states, hash_of(claim)]


def test_a_poll_leases_acks_and_delivers_alike_on_either_engine(tmp_path: Path, pg_migrated_url: str) -> None:
    alice, bob = keys.SigningKey.generate(), keys.SigningKey.generate()
    expected, got = on_both_engines(tmp_path, pg_migrated_url, LOG, lambda conn: _poll_story(conn, alice, bob))
    # the ids are node-local and either engine may skip one (SQLite's AUTOINCREMENT spends an id on the upsert that
    # finds an addressee's row; PostgreSQL's identity on a rolled-back insert): the same notifications in the same
    # id order is the same answer
    assert _ranked(got) == _ranked(expected)
    first, acked, again, delivered, states, claim = expected
    assert [e.reason for e in first] == ["directed_request", "contradiction"] and acked == 1  # tier 1 first
    assert first[0].directed_to_me and first[1].link_targets == [claim]
    assert [e.reason for e in again] == ["contradiction", "subscription"]
    assert [e.notification_id for e in delivered] == [e.notification_id for e in again]
    assert sorted(status for _, status, _ in states) == ["delivered"] * 3


def _ranked(answers: list[Any]) -> list[Any]:
    """`_poll_story`'s answers with each notification id replaced by its rank among the story's ids."""
    first, acked, again, delivered, states, claim = answers
    rank = {row[0]: n for n, row in enumerate(sorted(states))}

    def envelopes(page: list[Any]) -> list[Any]:
        return [msgspec.structs.replace(e, notification_id=rank[e.notification_id]) for e in page]

    return [
        envelopes(first),
        acked,
        envelopes(again),
        envelopes(delivered),
        [(rank[i], *rest) for i, *rest in states],
        claim,
    ]


def _redaction_notices_story(conn: Conn) -> list[Any]:
    """What a redaction does to the inbox (node/redaction/effects.py): who saw the dropped entries, their notices
    stored, then one redaction's notices forgotten (it became void)."""
    rows = [
        ("alice", 1, "delivered", 0),
        ("alice", 2, "leased", 0),
        ("bob", 2, "pending", 0),
        ("carol", 3, "pending", 1),
    ]
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO notifications (agent_id, entry_id, tier, reason, created_ms, expires_ms, status, attempt_count)"
        " VALUES (?, ?, 2, 'subscription', 5, 50, ?, ?)",
        rows,
    )
    seen = store.seen_by(conn, [1, 2, 3])
    conn.execute("DELETE FROM notifications")  # the dropped entries' notifications, as drop_txn deletes them
    store.insert_notices_txn(conn, seen, "r1", 10, 100)
    store.insert_notices_txn(conn, [("dave", 4)], "r2", 10, 100)
    noticed = conn.execute("SELECT agent_id, entry_id, redaction FROM notifications ORDER BY 1, 2").fetchall()
    store.forget_notices_txn(conn, ["r1", "never stored"])
    left = conn.execute("SELECT agent_id, entry_id, redaction FROM notifications ORDER BY 1, 2").fetchall()
    conn.execute("COMMIT")
    return [seen, [tuple(r) for r in noticed], [tuple(r) for r in left]]


def test_a_redactions_notices_are_told_and_forgotten_alike_on_either_engine(
    tmp_path: Path, pg_migrated_url: str
) -> None:
    """`seen_by` (the first entry per agent whose notification reached it: leased, delivered, or tried) and
    `forget_notices_txn` (a redaction's notices deleted by a list) answer the same on SQLite and PostgreSQL."""
    expected, got = on_both_engines(tmp_path, pg_migrated_url, LOG, _redaction_notices_story)
    assert got == expected
    seen, noticed, left = expected
    assert seen == [("alice", 1), ("carol", 3)]  # bob's pending, never-tried notification reached no one
    assert noticed == [("alice", 1, "r1"), ("carol", 3, "r1"), ("dave", 4, "r2")]
    assert left == [("dave", 4, "r2")]
