"""The SQL of `bbs migrate-store`: a SQLite node's database copied, table by table, into a PostgreSQL database that
holds the same schema (docs/decisions.md record 79; the steps, the checks and the switch are node/ops/migrate_store.py).

The copy is set-based: each table's rows are read from SQLite in batches and streamed into PostgreSQL with COPY, all
inside the caller's one PostgreSQL transaction. The rows are copied as they are, keys included (a record keeps its
seq, a link its id); so the triggers that derive rows on insert (the waiting counts, the listed entry spaces, the
credential epoch) are switched off for the copy, since the rows they would derive are copied too; and every identity
is set past the largest key copied, or past what SQLite's AUTOINCREMENT remembers handing out, whichever is larger
(a purged record's seq is never handed out again on either engine).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any

import psycopg

from node.store.conn import Conn
from node.store.pg_conn import PgConn
from node.store.pg_schema import MIGRATION_LOCK

BATCH_ROWS = 5000  # rows read from SQLite per fetch, streamed to PostgreSQL's COPY one after another
VERSION_TABLE = "schema_version"  # PostgreSQL's alone: SQLite keeps its version in PRAGMA user_version


def sqlite_tables(conn: sqlite3.Connection) -> list[str]:
    """The tables of the node's SQLite database (SQLite's own, `sqlite_sequence` and the like, left out), by name."""
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name"
    ).fetchall()
    return [str(row[0]) for row in rows]


def sqlite_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """The columns of SQLite table `table`, in order (`table` is a name the database listed, not input)."""
    return [str(row[1]) for row in conn.execute(f'PRAGMA table_info("{table}")')]


def sqlite_handed_out(conn: sqlite3.Connection) -> dict[str, int]:
    """The largest key SQLite's AUTOINCREMENT has handed out per table (`sqlite_sequence`; empty without one)."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'").fetchone():
        return {}
    return {str(row[0]): int(row[1]) for row in conn.execute("SELECT name, seq FROM sqlite_sequence")}


def sqlite_rows(conn: sqlite3.Connection, table: str, columns: list[str]) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of `table` (those `columns`), a batch of at most BATCH_ROWS at a time, in no particular order."""
    names = ", ".join(f'"{column}"' for column in columns)
    cursor = conn.execute(f'SELECT {names} FROM "{table}"')
    while batch := cursor.fetchmany(BATCH_ROWS):
        yield [tuple(row) for row in batch]


def take_schema_lock(conn: PgConn) -> None:
    """Take the migrations' advisory lock for the rest of the caller's transaction: a node starting on the target
    database, or a second move into it, waits until the copy is committed or rolled back."""
    conn.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))


def pg_table_count(conn: PgConn) -> int:
    """How many tables and views the connection's schema (`current_schema()`) holds: 0 for an empty database."""
    row = conn.execute(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f')"
    ).fetchone()
    return int(row[0])


def pg_tables(conn: PgConn) -> list[str]:
    """The tables of the schema, each after the tables its foreign keys name (so a copy in this order never meets a
    missing parent), else by name."""
    names = [
        str(row[0])
        for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            " AND table_type = 'BASE TABLE' ORDER BY table_name"
        )
    ]
    parents: dict[str, set[str]] = {name: set() for name in names}
    for child, parent in conn.execute(
        "SELECT c.relname, p.relname FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid"
        " JOIN pg_class p ON p.oid = k.confrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE k.contype = 'f' AND n.nspname = current_schema()"
    ):
        if child != parent and child in parents:
            parents[str(child)].add(str(parent))
    ordered: list[str] = []
    while len(ordered) < len(names):
        ready = [name for name in names if name not in ordered and parents[name] <= set(ordered)]
        ordered += ready or [name for name in names if name not in ordered]  # a cycle: left in name order
    return ordered


def pg_columns(conn: PgConn, table: str) -> list[str]:
    """The columns of PostgreSQL table `table`, in order."""
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = ? ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return [str(row[0]) for row in rows]


def pg_identities(conn: PgConn) -> list[tuple[str, str]]:
    """(table, column) of each identity column: the keys the database hands out (`records.seq`, `links.id`, ...)."""
    rows = conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND is_identity = 'YES' ORDER BY table_name"
    ).fetchall()
    return [(str(row[0]), str(row[1])) for row in rows]


def pg_triggered_tables(conn: PgConn) -> list[str]:
    """The tables that carry triggers of ours (the schema's PL/pgSQL ones)."""
    rows = conn.execute(
        "SELECT DISTINCT event_object_table FROM information_schema.triggers WHERE trigger_schema = current_schema()"
        " ORDER BY 1"
    ).fetchall()
    return [str(row[0]) for row in rows]


def set_triggers(conn: PgConn, tables: list[str], *, enabled: bool) -> None:
    """Switch the user triggers of `tables` off (for the copy) or on again, in the caller's transaction."""
    action = "ENABLE" if enabled else "DISABLE"
    for table in tables:
        conn.execute(f'ALTER TABLE "{table}" {action} TRIGGER USER')


def copy_rows(conn: PgConn, table: str, columns: list[str], batches: Iterator[list[tuple[Any, ...]]]) -> int:
    """Stream `batches` of rows into `table` with one COPY (identity values included: COPY writes them as given);
    return the rows copied. Runs in the caller's transaction."""
    names = ", ".join(f'"{column}"' for column in columns)
    copied = 0
    with conn.raw.cursor() as cursor, cursor.copy(f'COPY "{table}" ({names}) FROM STDIN') as copy:
        for batch in batches:
            for row in batch:
                copy.write_row(row)
            copied += len(batch)
    return copied


@contextlib.contextmanager
def undone(conn: PgConn) -> Iterator[None]:
    """Run the block in a savepoint rolled back at its end, whether it succeeds or not (a trial: the rebuild that
    is compared with the rows copied)."""
    with conn.raw.transaction() as trial:
        yield
        raise psycopg.Rollback(trial)


def empty_table(conn: Conn, table: str) -> None:
    """Delete the rows a fresh schema holds in `table` (the migrations' own rows), before it is copied whole; on
    either engine (the copy's target: PostgreSQL here, SQLite for node/store/to_sqlite.py's)."""
    conn.execute(f'DELETE FROM "{table}"')


def largest(conn: Conn, table: str, column: str) -> int:
    """The largest value of `column` in `table` (0 when empty); on either engine."""
    row = conn.execute(f'SELECT max("{column}") FROM "{table}"').fetchone()
    return 0 if row[0] is None else int(row[0])


def continue_identity(conn: PgConn, table: str, column: str, after: int) -> None:
    """Set the identity of `table.column` so that the next key it hands out is `after + 1` (1 when `after` is 0)."""
    conn.execute(
        "SELECT setval(CAST(pg_get_serial_sequence(?, ?) AS regclass), CAST(? AS bigint), CAST(? AS bigint) <> 0)",
        (f'"{table}"', column, max(after, 1), 1 if after > 0 else 0),  # the Conn binds a bool as 0/1
    )


def next_key(conn: PgConn, table: str, column: str) -> int:
    """The key the identity of `table.column` would hand out next (read without using it up)."""
    sequence = conn.execute("SELECT pg_get_serial_sequence(?, ?)", (f'"{table}"', column)).fetchone()[0]
    row = conn.execute(f"SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM {sequence}")
    return int(row.fetchone()[0])


def row_count(conn: Conn, table: str) -> int:
    """How many rows `table` holds; on either engine."""
    return int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])


def spaces_held(conn: Conn) -> list[str]:
    """The spaces the log holds records of (each has a digest of its own), in order; on either engine."""
    return [
        str(row[0]) for row in conn.execute("SELECT DISTINCT space FROM records WHERE space IS NOT NULL ORDER BY 1")
    ]
