"""The SQL of `bbs migrate-store` (node/store/to_postgresql.py) on a real SQLite file and a real PostgreSQL database:
the table lists of both schemas, the foreign-key order, COPY of every kind of value with keys as given, identities
set past a copied key (and past what SQLite's AUTOINCREMENT handed out), the triggers switched off and on, and the
trial savepoint that undoes a rebuild."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from node.store import db, pg_conn
from node.store import to_postgresql as copy
from node.store.pg_conn import PgConn


@pytest.fixture
def sqlite_store(tmp_path: Path) -> sqlite3.Connection:
    conn = db.connect(tmp_path / "bbs.db")
    db.migrate(conn)
    return conn


@pytest.fixture
def pg(pg_migrated_url: str) -> PgConn:
    return pg_conn.connect(pg_migrated_url)


RECORD = "INSERT INTO records (seq, hash, version, kind, author_id, created_at, created_ms, origin, received_ms, body)"


def test_both_schemas_list_the_same_tables_and_parents_come_before_children(
    sqlite_store: sqlite3.Connection, pg: PgConn
) -> None:
    ordered = copy.pg_tables(pg)
    assert sorted(set(ordered) - {copy.VERSION_TABLE}) == copy.sqlite_tables(sqlite_store)
    assert ordered.index("subscriptions") < ordered.index("subscription_terms")
    assert ordered.index("waiting") < ordered.index("waiting_deps")
    for table in ("records", "links", "waiting"):
        assert set(copy.pg_columns(pg, table)) == set(copy.sqlite_columns(sqlite_store, table))
    assert ("records", "seq") in copy.pg_identities(pg) and ("notifications", "id") in copy.pg_identities(pg)
    assert ("links", "id") not in copy.pg_identities(pg)  # numbered max + 1 by a trigger, as SQLite does (record 81)
    assert {"records", "waiting", "entries", "credentials", "links"} <= set(copy.pg_triggered_tables(pg))


def test_an_empty_database_has_no_table_and_a_migrated_one_has(pg_url: str, pg: PgConn) -> None:
    empty = pg_conn.connect(pg_url)
    try:
        assert copy.pg_table_count(empty) == 0
    finally:
        empty.close()
    assert copy.pg_table_count(pg) > 40


def test_copy_streams_every_kind_of_value_with_its_key_in_batches(
    sqlite_store: sqlite3.Connection, pg: PgConn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(copy, "BATCH_ROWS", 2)  # five rows: three batches
    for seq in (1, 2, 3, 7, 9):
        body = b"\x00\xff{}" + bytes([seq])
        sqlite_store.execute(
            RECORD + " VALUES (?, ?, ?, 'entry', 'did:key:zé', '2026-12-06T00:00:00Z', ?, 'local', ?, ?)",
            (seq, f"h{seq}", f"v{seq}", -seq, seq * 10, body),
        )
    sqlite_store.execute("INSERT INTO entry_confidence VALUES ('h1', 0.1235, 1, 0)")
    columns = copy.pg_columns(pg, "records")
    with pg.raw.transaction():
        copy.empty_table(pg, "records")
        assert copy.copy_rows(pg, "records", columns, copy.sqlite_rows(sqlite_store, "records", columns)) == 5
        scores = copy.pg_columns(pg, "entry_confidence")
        copy.copy_rows(pg, "entry_confidence", scores, copy.sqlite_rows(sqlite_store, "entry_confidence", scores))
    sql = "SELECT * FROM records ORDER BY seq"
    assert [tuple(r) for r in pg.execute(sql)] == [tuple(r) for r in sqlite_store.execute(sql)]
    sql = "SELECT community_confidence, confirms, disconfirms FROM entry_confidence"
    assert tuple(pg.execute(sql).fetchone()) == (0.1235, 1, 0)
    assert copy.row_count(pg, "records") == copy.row_count(sqlite_store, "records") == 5
    assert copy.largest(pg, "records", "seq") == 9


def test_an_identity_goes_on_past_the_key_given_even_one_sqlite_handed_out_and_forgot(
    sqlite_store: sqlite3.Connection, pg: PgConn
) -> None:
    for seq in (1, 2, 3):
        sqlite_store.execute(
            RECORD + " VALUES (?, ?, ?, 'entry', 'a', '2026-12-06T00:00:00Z', 0, 'local', 0, ?)",
            (seq, f"h{seq}", f"v{seq}", b"\x00"),
        )
    sqlite_store.execute("DELETE FROM records WHERE seq = 3")  # a purge: 3 is never handed out again
    handed_out = copy.sqlite_handed_out(sqlite_store)
    assert handed_out["records"] == 3 and copy.largest(sqlite_store, "records", "seq") == 2
    assert copy.next_key(pg, "notifications", "id") == 1
    copy.continue_identity(pg, "records", "seq", max(2, handed_out["records"]))
    copy.continue_identity(pg, "notifications", "id", 0)  # an empty table starts at 1
    assert copy.next_key(pg, "records", "seq") == 4 and copy.next_key(pg, "notifications", "id") == 1
    inserted = pg.execute(
        "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, origin, received_ms, body)"
        " VALUES ('h', 'v', 'entry', 'a', '2026-12-06T00:00:00Z', 0, 'local', 0, ?) RETURNING seq",
        (b"\x00",),
    )
    assert inserted.fetchone()[0] == 4


COUNTED = "SELECT coalesce(sum(count), 0) FROM waiting_counts WHERE scope <> 'all'"


def test_triggers_are_off_for_the_copy_and_on_after(pg: PgConn) -> None:
    waiting = (
        "INSERT INTO waiting (peer_id, hash, version, kind, author_id, body, arrived_ms, size)"
        " VALUES ('peer', ?, ?, 'entry', 'a', ?, 0, 1)"
    )
    with pg.raw.transaction():
        copy.set_triggers(pg, ["waiting"], enabled=False)
        pg.execute(waiting, ("h1", "v1", b"\x00"))
        assert pg.execute(COUNTED).fetchone()[0] == 0
        copy.set_triggers(pg, ["waiting"], enabled=True)
    pg.execute(waiting, ("h2", "v2", b"\x00"))
    assert pg.execute(COUNTED).fetchone()[0] == 2  # the author's and the peer's count of the second; 'all' too


def test_a_trial_is_undone_whether_it_succeeds_or_fails(pg: PgConn) -> None:
    with pg.raw.transaction():
        pg.execute("INSERT INTO node_meta (key, value) VALUES ('kept', '1')")
        with copy.undone(pg):
            pg.execute("INSERT INTO node_meta (key, value) VALUES ('trial', '1')")
        with pytest.raises(ValueError), copy.undone(pg):
            pg.execute("INSERT INTO node_meta (key, value) VALUES ('failed', '1')")
            raise ValueError("the trial failed")
    assert [r[0] for r in pg.execute("SELECT key FROM node_meta ORDER BY key")] == ["kept"]


def test_the_schema_lock_is_the_migrations_lock(pg: PgConn, pg_migrated_url: str) -> None:
    with pg.raw.transaction():
        copy.take_schema_lock(pg)
        with psycopg.connect(pg_migrated_url, autocommit=True) as other:
            row = other.execute("SELECT pg_try_advisory_xact_lock(%s)", (copy.MIGRATION_LOCK,)).fetchone()
    assert row == (False,)


def test_the_spaces_held_are_those_of_the_log(sqlite_store: sqlite3.Connection, pg: PgConn) -> None:
    for conn in (sqlite_store, pg):
        for seq, space in ((1, "s-b"), (2, None), (3, "s-a"), (4, "s-b")):
            conn.execute(
                "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, origin, received_ms,"
                " body, space) VALUES (?, ?, 'entry', 'a', '2026-12-06T00:00:00Z', 0, 'local', 0, ?, ?)",
                (f"h{seq}", f"v{seq}", b"\x00", space),
            )
        assert copy.spaces_held(conn) == ["s-a", "s-b"]
