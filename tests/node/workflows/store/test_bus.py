"""node.workflows.store.bus: messages stored with both of their ends, read back one by one and a page at a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from node.spaces.sight import OPERATOR
from node.store import db as store_db
from node.store import pg_conn, pg_schema
from node.store.conn import Conn
from node.workflows.store import bus
from tests.node.migrated import database_before
from tests.node.workflows.store.helpers import T0, Store
from wire.time import format_ms
from wire.workflows import MessageQuery

ALICE, BOB, CAROL = "did:key:alice", "did:key:bob", "did:key:carol"


def message(
    seq: int, sender: str, to: str | None, ms: int, *, project: str | None = None, kind: str = "status"
) -> bus.MessageRow:
    return bus.MessageRow(
        id=seq,
        record_hash=f"m{seq}",
        from_agent=sender,
        to_agent=to,
        message_type=kind,
        body=f"note {seq}",
        payload=json.dumps({"n": seq}),
        dependency_ids="[]",
        project=project,
        created_at=format_ms(ms),
        created_ms=ms,
        signature=f"sig{seq}",
    )


async def store(db: Store, *rows: bus.MessageRow) -> None:
    def write(conn: Conn) -> None:
        for row in rows:
            bus.insert_message_txn(conn, row, sorted({row.from_agent} | ({row.to_agent} if row.to_agent else set())))

    await db.write(write)


async def test_a_message_is_stored_with_both_ends_and_read_back(db: Store) -> None:
    row = message(7, ALICE, BOB, T0, project="p")
    await db.write(lambda c: bus.insert_message_txn(c, row, [ALICE, BOB, ALICE]))  # a repeated end counts once
    stored = await db.read(lambda c: bus.message_row(c, 7))
    assert tuple(stored) == tuple(row)
    assert await db.read(lambda c: bus.message_id(c, "m7")) == 7
    ends = await db.read(lambda c: [tuple(r) for r in c.execute("SELECT * FROM message_agents ORDER BY agent_id")])
    assert ends == [(ALICE, T0, 7), (BOB, T0, 7)]


async def test_a_broadcast_is_indexed_under_its_sender_only(db: Store) -> None:
    await store(db, message(1, ALICE, None, T0))
    assert [
        r["id"] for r in await db.read(lambda c: bus.message_rows(c, MessageQuery(agent=ALICE), sight=OPERATOR))
    ] == [1]
    assert await db.read(lambda c: bus.message_rows(c, MessageQuery(agent=BOB), sight=OPERATOR)) == []


async def test_pages_in_each_order_with_one_row_past_the_page(db: Store) -> None:
    # ids are arrival order; created times are not: message 3 arrived last but was written first
    await store(db, message(1, ALICE, BOB, T0 + 10), message(2, BOB, ALICE, T0 + 20), message(3, CAROL, None, T0))

    async def ids(q: MessageQuery) -> list[int]:
        return [r["id"] for r in await db.read(lambda c: bus.message_rows(c, q, sight=OPERATOR))]

    assert await ids(MessageQuery()) == [2, 1, 3]  # newest first by created time
    assert await ids(MessageQuery(order="oldest")) == [3, 1, 2]
    assert await ids(MessageQuery(order="arrival")) == [1, 2, 3]
    assert await ids(MessageQuery(limit=1)) == [2, 1]  # the page and one more: the caller sees a next page
    assert await ids(MessageQuery(cursor=f"{T0 + 20}.2")) == [1, 3]  # after message 2, newest first
    assert await ids(MessageQuery(order="oldest", cursor=f"{T0 + 10}.1")) == [2]
    assert await ids(MessageQuery(order="arrival", cursor="0.1")) == [2, 3]  # arrival order reads only the id


async def test_filters_by_agent_project_and_type(db: Store) -> None:
    await store(
        db,
        message(1, ALICE, BOB, T0 + 1, project="p"),
        message(2, BOB, CAROL, T0 + 2, project="q", kind="request"),
        message(3, CAROL, ALICE, T0 + 3, project="p", kind="request"),
    )

    async def ids(q: MessageQuery) -> list[int]:
        return [r["id"] for r in await db.read(lambda c: bus.message_rows(c, q, sight=OPERATOR))]

    assert await ids(MessageQuery(agent=ALICE)) == [3, 1]  # sent or received
    assert await ids(MessageQuery(agent=BOB, order="arrival")) == [1, 2]
    assert await ids(MessageQuery(project="p")) == [3, 1]
    assert await ids(MessageQuery(message_type="request")) == [3, 2]
    assert await ids(MessageQuery(agent=CAROL, project="q", message_type="request")) == [2]
    assert await ids(MessageQuery(agent=ALICE, order="oldest", cursor=f"{T0 + 1}.1")) == [3]


async def test_the_messages_naming_an_address_are_found_by_it_until_they_leave_the_bus(db: Store) -> None:
    named, other = "a" * 64, "b" * 64
    await db.write(lambda c: bus.insert_message_txn(c, message(3, ALICE, None, T0), [ALICE], [named, other]))
    await db.write(lambda c: bus.insert_message_txn(c, message(4, BOB, None, T0), [BOB], [named]))
    found = await db.read(lambda c: bus.dependents_of(c, [named, "c" * 64]))
    assert [(d.seq, d.hash, d.author_id, d.space, d.named) for d in found] == [
        (3, "m3", ALICE, None, named),
        (4, "m4", BOB, None, named),
    ]
    await db.write(lambda c: bus.delete_message_txn(c, 3))
    assert [d.seq for d in await db.read(lambda c: bus.dependents_of(c, [named, other]))] == [4]


@pytest.mark.sqlite_only(reason="SQLite's migration 0051; PostgreSQL's is the test below")
def test_migration_0051_indexes_the_dependencies_of_messages_held_before(tmp_path: Path) -> None:
    """Messages stored before migration 0051 are found by the dependencies that may be addresses, and only those."""
    conn = database_before(tmp_path / "bbs.db", 51)
    deps = json.dumps(["a" * 64, "not an address", "A" * 64, "b" * 63])
    conn.execute(
        "INSERT INTO messages (id, record_hash, from_agent, to_agent, message_type, body, payload, dependency_ids,"
        " project, created_at, created_ms, signature) VALUES (5, 'm5', ?, NULL, 'note', '', '{}', ?, NULL, ?, ?, 's')",
        (ALICE, deps, format_ms(T0), T0),
    )
    store_db.migrate(conn)
    assert [tuple(r) for r in conn.execute("SELECT address, message_id FROM message_dependencies")] == [("a" * 64, 5)]


def test_postgresqls_migration_0051_indexes_the_dependencies_of_messages_held_before(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same story on PostgreSQL: a database at its baseline (0050) holding a message, then migrated by
    migrations_pg/0051, finds it by the dependencies that may be addresses, and only those."""
    every = pg_schema.migrations()
    conn = pg_conn.connect(pg_url)
    try:
        monkeypatch.setattr(pg_schema, "migrations", lambda: [m for m in every if m[0] < 51])
        assert pg_schema.migrate(conn) == 50
        monkeypatch.setattr(pg_schema, "migrations", lambda: every)
        deps = json.dumps(["a" * 64, "not an address", "A" * 64, "b" * 63])
        conn.execute(
            "INSERT INTO messages (id, record_hash, from_agent, to_agent, message_type, body, payload,"
            " dependency_ids, project, created_at, created_ms, signature)"
            " VALUES (5, 'm5', ?, NULL, 'note', '', '{}', ?, NULL, ?, ?, 's')",
            (ALICE, deps, format_ms(T0), T0),
        )
        assert pg_schema.migrate(conn) >= 51
        rows = [tuple(r) for r in conn.execute("SELECT address, message_id FROM message_dependencies")]
        assert rows == [("a" * 64, 5)]
    finally:
        conn.close()
