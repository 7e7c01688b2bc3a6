"""node.agents.store: local agents, known agents, credentials and sessions on a real node's SQLite file, through
the node's own read and write jobs (the node's migrations made the tables)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from identity import canonical, keys, records
from node.agents import service as agents
from node.agents import store
from node.agents.portable import import_identity
from node.features import LOG
from node.service import Node
from node.store import projections
from node.store.conn import Conn
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import entry_record
from tests.pg_fixtures import on_both_engines
from wire.api import PostEntry
from wire.time import format_ms

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def roamer(node: Node) -> keys.SigningKey:
    """An agent registered here whose key the node does not keep."""
    key = keys.SigningKey.generate()
    await import_identity(node, "roamer", key, agents.identity_record(key, "Roamer", "", node.node_id))
    return key


async def test_local_agents_by_name_and_did(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    assert await node.db.read(lambda c: store.agent_id_by_name(c, "alice")) == alice.agent_id
    assert await node.db.read(lambda c: store.agent_id_by_name(c, "nobody")) is None
    assert await node.db.read(lambda c: store.name_taken(c, "alice"))
    assert not await node.db.read(lambda c: store.name_taken(c, "bob"))
    assert await node.db.read(lambda c: store.did_registered(c, alice.agent_id))
    assert not await node.db.read(lambda c: store.did_registered(c, keys.SigningKey.generate().did))
    row = await node.db.read(lambda c: store.local_agent(c, alice.agent_id))
    assert (row["name"], row["agent_id"]) == ("alice", alice.agent_id)
    assert await node.db.read(lambda c: store.local_agent(c, "did:key:zunknown")) is None


async def test_a_local_agent_is_inserted_with_or_without_its_key(node: Node) -> None:
    kept, held = keys.SigningKey.generate(), keys.SigningKey.generate()
    now = node.now_ms()
    await node.db.write(lambda c: store.insert_local_agent_txn(c, "kept", kept.did, kept.seed, now))
    await node.db.write(lambda c: store.insert_local_agent_txn(c, "held", held.did, None, now))
    assert await node.db.read(lambda c: store.key_seed(c, kept.did)) == kept.seed
    assert await node.db.read(lambda c: store.key_seed(c, held.did)) is None  # registered, key not kept
    assert await node.db.read(lambda c: store.key_seed(c, "did:key:zunknown")) is None
    assert await node.db.read(lambda c: store.agent_id_by_name(c, "held")) == held.did


async def test_the_exported_identity_is_the_agents_document(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    key = await roamer(node)
    agent_id, seed, body = await node.db.read(lambda c: store.exported_identity(c, "alice"))
    assert agent_id == alice.agent_id and seed is not None
    assert keys.SigningKey.from_seed(bytes(seed)).did == alice.agent_id
    assert json.loads(body)["author_id"] == alice.agent_id and json.loads(body)["kind"] == "agent"
    assert (await node.db.read(lambda c: store.exported_identity(c, "roamer")))[1] is None
    assert (await node.db.read(lambda c: store.exported_identity(c, "roamer")))[0] == key.did
    assert await node.db.read(lambda c: store.exported_identity(c, "nobody")) is None


async def test_known_agents_with_their_entry_counts(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    key = await roamer(node)
    post = PostEntry(entry_type="finding", performative="inform", content="one")
    await node.entries.post(alice.agent_id, post, None)
    assert await node.db.read(lambda c: store.agent_known(c, alice.agent_id))
    assert not await node.db.read(lambda c: store.agent_known(c, keys.SigningKey.generate().did))
    row = await node.db.read(lambda c: store.agent(c, alice.agent_id))
    assert (row["id"], row["display_name"], row["n"]) == (alice.agent_id, "Alice", 1)
    assert await node.db.read(lambda c: store.agent(c, "did:key:zunknown")) is None
    page = await node.db.read(lambda c: store.agent_page(c, None, False, 10))
    assert sorted(r["id"] for r in page) == sorted([alice.agent_id, key.did]) == [r["id"] for r in page]
    assert {r["id"]: bool(r["key_kept"]) for r in page} == {alice.agent_id: True, key.did: False}
    first = await node.db.read(lambda c: store.agent_page(c, None, False, 1))
    rest = await node.db.read(lambda c: store.agent_page(c, first[0]["id"], False, 10))
    assert [r["id"] for r in first + rest] == [r["id"] for r in page]


async def test_the_local_filter_leaves_out_agents_arrived_by_sync(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    stranger = keys.SigningKey.generate()
    record = agents.identity_record(stranger, "Stranger", "", keys.SigningKey.generate().did)
    record_hash, decoded = records.check(dict(record))
    await node.db.write(
        lambda c: projections.append(c, dict(record), record_hash, decoded, origin="peer", now_ms=node.now_ms())
    )
    assert await node.db.read(lambda c: store.agent_known(c, stranger.did))
    rows = await node.db.read(lambda c: store.agent_page(c, None, True, 10))
    assert [r["id"] for r in rows] == [alice.agent_id]
    every = await node.db.read(lambda c: store.agent_page(c, None, False, 10))
    assert {r["id"]: r["name"] for r in every} == {alice.agent_id: "alice", stranger.did: None}


async def test_credentials_are_stored_found_and_deleted(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    epoch = await node.db.read(store.credential_epoch)
    now = node.now_ms()
    await node.db.write(lambda c: store.insert_credential_txn(c, "k" * 16, "agent", alice.agent_id, "d" * 64, now))
    row = await node.db.read(lambda c: store.credential(c, "k" * 16))
    assert (row["role"], row["agent_id"], row["secret_sha256"]) == ("agent", alice.agent_id, "d" * 64)
    assert await node.db.read(lambda c: store.credential(c, "x" * 16)) is None
    await node.db.write(lambda c: store.delete_agent_credentials_txn(c, alice.agent_id))
    assert await node.db.read(lambda c: store.credential(c, "k" * 16)) is None
    assert await node.db.read(store.credential_epoch) > epoch  # a deletion moves the epoch (trigger)


async def test_a_session_is_stored_and_the_expired_dropped(node: Node, make_agent: MakeAgent, clock: FakeClock) -> None:
    alice = await make_agent("alice")
    me, now = alice.agent_id, node.now_ms()
    await node.db.write(lambda c: store.open_session_txn(c, "a" * 16, me, me, "s" * 64, now + 10, now))
    row = await node.db.read(lambda c: store.session(c, "a" * 16))
    assert tuple(row) == (alice.agent_id, "s" * 64, now + 10, alice.agent_id)
    later = now + 10
    await node.db.write(lambda c: store.open_session_txn(c, "b" * 16, me, me, "t" * 64, later + 10, later))
    assert await node.db.read(lambda c: store.session(c, "a" * 16)) is None  # expired at `later`: dropped
    assert await node.db.read(lambda c: store.session(c, "b" * 16)) is not None


@pytest.mark.parametrize("role", ["agent", "admin"])
async def test_a_credential_is_found_by_its_key_id_only(node: Node, make_agent: MakeAgent, role: str) -> None:
    alice = await make_agent("alice")
    now = node.now_ms()
    who = alice.agent_id if role == "agent" else None
    await node.db.write(lambda c: store.insert_credential_txn(c, "0" * 16, role, who, "e" * 64, now))
    assert (await node.db.read(lambda c: store.credential(c, "0" * 16)))["agent_id"] == who
    assert await node.db.read(lambda c: store.credential(c, "0" * 15)) is None


def _agents_story(conn: Conn, alice: keys.SigningKey, bob: keys.SigningKey, home: str) -> list[Any]:
    """Alice registered here (her key kept), Bob known by his document only; a credential, a session, one public
    entry of Alice's. Every store function's answer, in order, as tuples."""
    t0 = 1_767_323_045_000
    docs = [
        records.sign(
            {
                "kind": "agent",
                "schema_version": canonical.SCHEMA_VERSION,
                "author_id": key.did,
                "created_at": format_ms(t0),
                "display_name": name,
                "description": "",
                "home_node": home,
            },
            key,
        )
        for key, name in ((alice, "Alice"), (bob, "Bob"))
    ]
    entry = entry_record(alice, "hello", created_ms=t0 + 1)
    conn.execute("BEGIN")
    for record in [*docs, entry]:
        projections.append_many(conn, [projections.Incoming(record, *records.check(record))], origin="local", now_ms=t0)
    store.insert_local_agent_txn(conn, "alice", alice.did, b"\x00seed\xff", t0)
    store.insert_credential_txn(conn, "k1", "agent", alice.did, "s" * 64, t0)
    store.insert_credential_txn(conn, "k2", "admin", None, "t" * 64, t0)
    store.open_session_txn(conn, "s1", alice.did, alice.did, "u" * 64, t0 + 100, t0)
    conn.execute("COMMIT")
    before = store.credential_epoch(conn)
    conn.execute("BEGIN")
    store.set_key_seed_txn(conn, alice.did, b"\x01seed")
    store.delete_agent_credentials_txn(conn, alice.did)  # the trigger moves the epoch
    conn.execute("COMMIT")

    def rows(value: Any) -> Any:
        if isinstance(value, list):
            return [tuple(v) for v in value]
        return None if value is None else tuple(value)

    return [
        store.agent_id_by_name(conn, "alice"),
        store.agent_id_by_name(conn, "nobody"),
        store.name_taken(conn, "alice"),
        store.did_registered(conn, bob.did),
        rows(store.local_agent(conn, alice.did)),
        store.key_seed(conn, alice.did),
        store.key_seed(conn, bob.did),
        rows(store.exported_identity(conn, "alice")),
        store.agent_known(conn, bob.did),
        rows(store.agent(conn, alice.did)),
        rows(store.agent_page(conn, None, False, 10)),
        rows(store.agent_page(conn, min(alice.did, bob.did), False, 10)),
        rows(store.agent_page(conn, None, True, 10)),
        rows(store.credential(conn, "k1")),
        rows(store.credential(conn, "k2")),
        (before, store.credential_epoch(conn)),
        rows(store.session(conn, "s1")),
    ]


def test_the_agents_store_answers_alike_on_either_engine(tmp_path: Path, pg_migrated_url: str) -> None:
    alice, bob = keys.SigningKey.generate(), keys.SigningKey.generate()
    home = keys.SigningKey.generate().did
    expected, got = on_both_engines(tmp_path, pg_migrated_url, LOG, lambda conn: _agents_story(conn, alice, bob, home))
    assert got == expected  # PostgreSQL's true is SQLite's 1
    assert expected[0] == alice.did and expected[1] is None and expected[5] == b"\x01seed" and expected[6] is None
    assert expected[9][-1] == 1 and len(expected[10]) == 2 and len(expected[11]) == 1 and len(expected[12]) == 1
    assert expected[13] is None and expected[14] == ("admin", None, "t" * 64)
    assert expected[15][1] == expected[15][0] + 1  # one credential deleted: the epoch moved once
