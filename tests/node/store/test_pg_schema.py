"""The PostgreSQL schema is SQLite's: the baseline against a SQLite database migrated to the head, numbered alike.

The comparison reads both catalogues (SQLite's pragmas, PostgreSQL's pg_catalog and information_schema) and
compares what store code relies on: the tables, each one's columns in order with their types and nullability, the
primary keys, the unique constraints, the named indexes (columns, uniqueness, partial or not), the triggers, and the
rows a fresh database holds. A migration added on one engine only, or a column changed on one, fails here.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from node.features import LOG
from node.store import db, pg_conn, pg_schema
from node.store.conn import Conn
from node.store.pg_conn import PgConn
from tests.pg_fixtures import on_both_engines

# SQLite's declared types and the PostgreSQL types the baseline gives them (docs/decisions.md record 50).
PG_TYPE = {"INTEGER": "bigint", "TEXT": "text", "REAL": "double precision", "BLOB": "bytea"}
# Tables of one engine's own machinery: SQLite's AUTOINCREMENT counters; the PostgreSQL schema version.
OWN_TABLES = {"sqlite": {"sqlite_sequence"}, "postgresql": {"schema_version"}}
# Triggers doing what SQLite's rowid does itself: a link's id, max + 1 at its insert (migration 0052, record 81).
OWN_TRIGGERS = {"postgresql": {("links", "links_numbered")}}

Columns = list[tuple[str, str, bool]]  # (name, PostgreSQL type, nullable) in table order


class Schema:
    """One engine's schema, as the comparison sees it."""

    def __init__(self) -> None:
        self.columns: dict[str, Columns] = {}
        self.primary_keys: dict[str, tuple[str, ...]] = {}
        self.unique: dict[str, set[tuple[str, ...]]] = {}  # every unique index's columns, constraints included
        self.indexes: dict[str, tuple[str, tuple[str, ...], bool, bool]] = {}  # name: (table, columns, unique, partial)
        self.triggers: set[tuple[str, str]] = set()  # (table, trigger)
        self.rows: dict[str, list[tuple[Any, ...]]] = {}


def sqlite_schema(path: Path) -> Schema:
    conn = db.connect(path)
    try:
        db.migrate(conn)
        schema = Schema()
        tables = [
            row[0]
            for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            if row[0] not in OWN_TABLES["sqlite"]
        ]
        for table in tables:
            info = conn.execute(f"PRAGMA table_info({table})").fetchall()
            pk = tuple(row["name"] for row in sorted((r for r in info if r["pk"]), key=lambda r: r["pk"]))
            # a primary key column is never NULL in use (a rowid alias cannot be; the node never writes NULL keys),
            # and PostgreSQL makes it NOT NULL: compare it as such
            schema.columns[table] = [
                (r["name"], PG_TYPE[r["type"].upper()], not r["notnull"] and r["name"] not in pk) for r in info
            ]
            schema.primary_keys[table] = pk
            schema.unique[table] = set()
            for index in conn.execute(f"PRAGMA index_list({table})").fetchall():
                columns = tuple(r["name"] for r in conn.execute(f"PRAGMA index_info({index['name']})"))
                if index["unique"] and index["origin"] != "pk" and not index["partial"]:
                    schema.unique[table].add(columns)
                if index["origin"] == "c":
                    schema.indexes[index["name"]] = (table, columns, bool(index["unique"]), bool(index["partial"]))
            schema.rows[table] = [tuple(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1")]
        schema.triggers = {
            (row[1], row[0]) for row in conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'")
        }
        return schema
    finally:
        conn.close()


PG_INDEXES = """
SELECT t.relname, i.relname, x.indisunique, x.indisprimary, x.indpred IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid) AS backs_constraint,
       ARRAY(SELECT a.attname::text FROM unnest(x.indkey::int2[]) WITH ORDINALITY k(attnum, n)
             JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum ORDER BY k.n) AS columns
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace s ON s.oid = t.relnamespace WHERE s.nspname = 'public'
"""


def pg_schema_of(conn: PgConn) -> Schema:
    schema = Schema()
    tables = [
        row[0]
        for row in conn.execute(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1"
        )
        if row[0] not in OWN_TABLES["postgresql"]
    ]
    for table in tables:
        schema.columns[table] = [
            (row[0], row[1], row[2] == "YES")
            for row in conn.execute(
                "SELECT column_name::text, data_type::text, is_nullable::text FROM information_schema.columns"
                " WHERE table_schema = 'public' AND table_name = ? ORDER BY ordinal_position",
                (table,),
            )
        ]
        schema.unique[table] = set()
        schema.rows[table] = [tuple(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1")]
    for table, name, unique, primary, partial, backs_constraint, columns in conn.execute(PG_INDEXES):
        if table in OWN_TABLES["postgresql"]:
            continue
        if primary:
            schema.primary_keys[table] = tuple(columns)
        elif unique and not partial:
            schema.unique[table].add(tuple(columns))
        if not backs_constraint:
            schema.indexes[name] = (table, tuple(columns), unique, partial)
    for table in tables:
        schema.primary_keys.setdefault(table, ())
    schema.triggers = {
        (row[0], row[1])
        for row in conn.execute(
            "SELECT c.relname::text, t.tgname::text FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
            " WHERE NOT t.tgisinternal"
        )
    } - OWN_TRIGGERS["postgresql"]
    return schema


@pytest.fixture(scope="module")
def sqlite_head(tmp_path_factory: pytest.TempPathFactory) -> Schema:
    """A SQLite database migrated to the head, read once for the module."""
    return sqlite_schema(tmp_path_factory.mktemp("sqlite") / "head.db")


@pytest.fixture
def both(sqlite_head: Schema, pg_migrated_url: str) -> tuple[Schema, Schema]:
    conn = pg_conn.connect(pg_migrated_url)
    try:
        return sqlite_head, pg_schema_of(conn)
    finally:
        conn.close()


def test_the_baseline_has_sqlites_tables_and_columns(both: tuple[Schema, Schema]) -> None:
    sqlite, postgres = both
    assert sorted(postgres.columns) == sorted(sqlite.columns)
    for table, columns in sqlite.columns.items():
        assert postgres.columns[table] == columns, table


def test_the_baseline_has_sqlites_keys_unique_constraints_and_indexes(both: tuple[Schema, Schema]) -> None:
    sqlite, postgres = both
    assert postgres.primary_keys == sqlite.primary_keys
    assert postgres.unique == sqlite.unique
    assert postgres.indexes == sqlite.indexes
    assert postgres.triggers == sqlite.triggers


def test_a_fresh_database_holds_the_same_rows_on_both_engines(both: tuple[Schema, Schema]) -> None:
    sqlite, postgres = both
    assert postgres.rows == sqlite.rows
    assert sqlite.rows["credential_epoch"] == [(1, 0)]  # the seed rows are there, not merely equal


def test_every_text_column_compares_bytewise(pg_migrated_url: str) -> None:
    """SQLite compares text by its bytes; digests and hash cursors order by text, so PostgreSQL must too, whatever
    the database's locale."""
    conn = pg_conn.connect(pg_migrated_url)
    try:
        collations = conn.execute(
            "SELECT table_name::text, column_name::text, collation_name::text FROM information_schema.columns"
            " WHERE table_schema = 'public' AND data_type = 'text'"
        ).fetchall()
        assert collations
        assert [tuple(row) for row in collations if row[2] != "C"] == []
        # and it orders so: uppercase before lowercase, '_' between them, as Python sorts str (bytes of UTF-8)
        words = ["b", "B", "_x", "a", "Z", "é", "e"]
        for word in words:
            conn.execute("INSERT INTO node_meta (key, value) VALUES (?, '')", (word,))
        assert [row[0] for row in conn.execute("SELECT key FROM node_meta ORDER BY key")] == sorted(words)
    finally:
        conn.close()


def test_every_sqlite_migration_after_the_baseline_has_a_postgresql_file_of_its_number() -> None:
    sqlite_numbers = {number for number, _name, _sql in db.migrations()}
    pg_numbers = {number for number, _name, _sql in pg_schema.migrations()}
    assert min(pg_numbers) == pg_schema.BASELINE
    assert pg_schema.BASELINE in sqlite_numbers  # the baseline is a SQLite migration's schema
    assert {n for n in sqlite_numbers if n > pg_schema.BASELINE} == pg_numbers - {pg_schema.BASELINE}
    assert max(pg_numbers) == max(sqlite_numbers)


def test_migrate_applies_the_baseline_once_and_records_it(pg_url: str) -> None:
    conn = pg_conn.connect(pg_url)
    try:
        assert pg_schema.schema_version(conn) == 0
        head = max(number for number, _name, _sql in pg_schema.migrations())
        assert pg_schema.migrate(conn) == head
        assert pg_schema.schema_version(conn) == head
        assert pg_schema.migrate(conn) == head  # nothing pending: nothing runs again (CREATE TABLE would fail)
        assert conn.execute("SELECT count(*) FROM schema_version").fetchone()[0] == 1
        assert not conn.in_transaction
    finally:
        conn.close()


def test_a_database_from_newer_software_is_refused(pg_migrated_url: str) -> None:
    conn = pg_conn.connect(pg_migrated_url)
    try:
        conn.execute("UPDATE schema_version SET version = version + 1")
        with pytest.raises(db.SchemaTooNew):
            pg_schema.migrate(conn)
    finally:
        conn.close()


def test_a_failing_migration_leaves_the_database_as_it_was(pg_url: str) -> None:
    """Each migration is one transaction: a script that fails half-way keeps nothing, and no version."""
    conn = pg_conn.connect(pg_url)
    try:
        conn.execute("CREATE TABLE credentials (x bigint)")  # the baseline's CREATE TABLE credentials fails
        with pytest.raises(sqlite3.OperationalError):
            pg_schema.migrate(conn)
        assert pg_schema.schema_version(conn) == 0
        assert conn.execute("SELECT to_regclass('node_meta')").fetchone()[0] is None
    finally:
        conn.close()


TRIGGERED = [
    (
        "INSERT INTO credentials (key_id, role, agent_id, secret_sha256, created_ms) VALUES (?, ?, ?, ?, ?)",
        ("k1", "agent", "did:key:a", "s", 1),
    ),
    (
        "INSERT INTO credentials (key_id, role, agent_id, secret_sha256, created_ms) VALUES (?, ?, ?, ?, ?)",
        ("k2", "admin", None, "s", 1),
    ),
    ("UPDATE credentials SET secret_sha256 = ? WHERE key_id = ?", ("t", "k1")),
    ("DELETE FROM credentials WHERE key_id = ?", ("k2",)),
    (
        "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, scope, origin, received_ms, body)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        ("h1", "v1", "key_event", "did:key:a", "t", 1, "federation", "local", 1, b"{}"),
    ),
    (
        "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, scope, origin, received_ms, body)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        ("h2", "v2", "entry", "did:key:a", "t", 1, "federation", "local", 1, b"{}"),
    ),
    (
        "INSERT INTO waiting (version, hash, kind, author_id, peer_id, arrived_ms, size, body)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        ("w1", "h3", "entry", "did:key:a", "did:key:p", 1, 10, b"x" * 10),
    ),
    (
        "INSERT INTO waiting (version, hash, kind, author_id, peer_id, arrived_ms, size, body)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        ("w2", "h4", "entry", "did:key:b", "did:key:p", 1, 7, b"y" * 7),
    ),
    ("DELETE FROM waiting WHERE version = ?", ("w1",)),
    (
        "INSERT INTO entries (id, record_hash, content_fingerprint, author_id, created_at, created_ms, entry_type,"
        " performative, content, confidence, signature, space) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (2, "h2", "f", "did:key:a", "t", 1, "finding", "inform", "c", 0.5, "sig", "space-1"),
    ),
]
TRIGGER_RESULTS = [
    "SELECT n FROM credential_epoch",
    "SELECT scope, key, count, bytes FROM waiting_counts ORDER BY scope, key",
    "SELECT space FROM entry_spaces",
]


def _triggered(conn: Conn) -> list[list[tuple[Any, ...]]]:
    for sql, parameters in TRIGGERED:
        conn.execute(sql, parameters)
    return [[tuple(row) for row in conn.execute(sql)] for sql in TRIGGER_RESULTS]


def test_the_triggers_do_on_postgresql_what_they_do_on_sqlite(tmp_path: Path, pg_migrated_url: str) -> None:
    sqlite = db.connect(tmp_path / "t.db")
    postgres = pg_conn.connect(pg_migrated_url)
    try:
        db.migrate(sqlite)
        expected = _triggered(sqlite)
        assert expected[0] == [(3,)]  # an update, a delete and a key event moved the epoch
        assert _triggered(postgres) == expected
    finally:
        sqlite.close()
        postgres.close()


def test_a_link_is_numbered_max_plus_one_on_postgresql_as_sqlites_rowid_numbers_it(
    tmp_path: Path, pg_migrated_url: str
) -> None:
    """No identity spends a link id on PostgreSQL (record 81): an insert rolled back, the largest link deleted, a
    conflict skipped, the next link takes max + 1 as on SQLite; an id given is kept (the copy from SQLite)."""
    insert = (
        "INSERT INTO links (origin_hash, ordinal, source_hash, target_hash, link_type, author_id, created_at,"
        " annotation) VALUES (?, 0, 's', 't', 'supports', 'a', 'c', '')"
    )

    def story(conn: Conn) -> list[tuple[Any, ...]]:
        for origin in ("h1", "h2", "h3"):
            conn.execute(insert, (origin,))
        conn.execute("BEGIN")
        conn.execute(insert, ("rolled back",))
        conn.execute("ROLLBACK")
        conn.execute("DELETE FROM links WHERE origin_hash = 'h3'")
        conn.execute(insert, ("h4",))
        conn.execute(
            "INSERT INTO links (id, origin_hash, ordinal, source_hash, target_hash, link_type, author_id, created_at,"
            " annotation) VALUES (10, 'given', 0, 's', 't', 'supports', 'a', 'c', '')"
        )
        conn.execute(insert, ("h5",))
        return [tuple(row) for row in conn.execute("SELECT id, origin_hash FROM links ORDER BY id")]

    sqlite, postgres = on_both_engines(tmp_path, pg_migrated_url, LOG, story)
    assert sqlite == [(1, "h1"), (2, "h2"), (3, "h4"), (10, "given"), (11, "h5")]
    assert postgres == sqlite
