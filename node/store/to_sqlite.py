"""The SQL of `bbs migrate-store --to sqlite`: a PostgreSQL node's database copied, table by table, into a new SQLite
file that holds the same schema; the reverse of node/store/to_postgresql.py (docs/decisions.md record 95; the steps,
the checks and the switch are node/ops/migrate_back.py).

The rows are read from PostgreSQL through a server-side cursor, a batch at a time (a node of a million records is
not held in memory), inside the caller's one PostgreSQL transaction, and written into SQLite with multi-row inserts
inside the caller's one SQLite transaction. They are copied as they are, keys included, so SQLite's triggers that
derive rows on insert are dropped for the copy and made again from their own SQL after it, and SQLite's
AUTOINCREMENT is set past the largest key PostgreSQL's identity ever handed out (a purged record's seq is never handed
out again). The PostgreSQL database is then marked as moved (`db.MOVED_KEY` in node_meta, JSON: when, and into which
folder): no command or `bbs serve` opens it again, and a process still serving it writes nothing (db.PG_BEGIN_WRITE).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any

from node.store.db import MOVED_KEY, WRITER_LOCK, insert_rows
from node.store.pg_conn import PgConn

BATCH_ROWS = 2000  # rows per fetch from PostgreSQL's cursor, and per multi-row insert into SQLite (under its limits)


def other_clients(conn: PgConn) -> int:
    """How many client connections to this database there are besides this one: processes of the node, `bbs`
    commands, anyone's psql. The server's own workers are not counted (no role). Another role's session shows no
    backend type to a role without pg_read_all_stats, so a session of a role with no type shown counts too (an
    extension's background worker of another role, pg_cron's, counts then: the move needs it stopped too)."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        " AND usesysid IS NOT NULL AND (backend_type = 'client backend' OR backend_type IS NULL)"
    ).fetchone()
    return int(row[0])


LOCK_WAIT = "10s"  # how long the move waits for the node's writer lock before it refuses


def take_writer_lock(conn: PgConn) -> None:
    """Take the node's writer lock for the rest of the caller's transaction, waiting at most LOCK_WAIT (a session
    left holding it, idle in a transaction, would stall the move for as long as it lives): a write of any process
    of the node waits until the move commits or rolls back. Raises DatabaseError (55P03) when it waited too long."""
    conn.execute(f"SET LOCAL lock_timeout = '{LOCK_WAIT}'")
    conn.execute("SELECT pg_advisory_xact_lock(?)", (WRITER_LOCK,))
    conn.execute("SET LOCAL lock_timeout = 0")


def checkpoint(conn: sqlite3.Connection) -> bool:
    """Fold the SQLite file's WAL into it and empty the WAL (TRUNCATE): whether it was done whole."""
    busy, _frames, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return int(busy) == 0


def bump_write_clock(conn: PgConn) -> None:
    """Move the node's write clock in the caller's transaction: a writer of the node whose transaction began before
    the move committed (at REPEATABLE READ, if a role's default makes it so) then fails on the clock's row instead
    of writing past the mark."""
    conn.execute("UPDATE write_clock SET n = n + 1 WHERE id = 1")


def mark_moved(conn: PgConn, value: str) -> None:
    """Record in node_meta that the node moved to SQLite (`value`: JSON, when and where), in the caller's
    transaction."""
    conn.execute("INSERT INTO node_meta (key, value) VALUES (?, ?)", (MOVED_KEY, value))


def forget_mark(conn: sqlite3.Connection) -> None:
    """Delete a copied mark of the move from SQLite's node_meta (a copy made again of a database marked already)."""
    conn.execute("DELETE FROM node_meta WHERE key = ?", (MOVED_KEY,))


def pg_rows(conn: PgConn, table: str, columns: list[str]) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of `table` (those `columns`), a batch of at most BATCH_ROWS at a time, in no particular order, read
    through a server-side cursor in the caller's transaction (texts unescaped as every read of the node's)."""
    names = ", ".join(f'"{column}"' for column in columns)
    with conn.raw.cursor(name=f"copy_{table}") as cursor:
        cursor.execute(f'SELECT {names} FROM "{table}"')
        while batch := cursor.fetchmany(BATCH_ROWS):
            yield [tuple(row) for row in batch]


def sqlite_triggers(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(name, the SQL that made it) of each trigger of the SQLite database."""
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name").fetchall()
    return [(str(row[0]), str(row[1])) for row in rows]


def drop_triggers(conn: sqlite3.Connection, triggers: list[tuple[str, str]]) -> None:
    """Drop `triggers` (for the copy: the rows they would derive are copied too). In the caller's transaction."""
    for name, _sql in triggers:
        conn.execute(f'DROP TRIGGER "{name}"')


def create_triggers(conn: sqlite3.Connection, triggers: list[tuple[str, str]]) -> None:
    """Make `triggers` again from their own SQL. In the caller's transaction."""
    for _name, sql in triggers:
        conn.execute(sql)


Batches = Iterator[list[tuple[Any, ...]]]


def copy_rows(conn: sqlite3.Connection, table: str, columns: list[str], batches: Batches) -> int:
    """Insert `batches` of rows into SQLite's `table`, keys included; return the rows copied. In the caller's
    transaction."""
    names = ", ".join(f'"{column}"' for column in columns)
    head = f'INSERT INTO "{table}" ({names})'
    copied = 0
    for batch in batches:
        insert_rows(conn, head, batch)
        copied += len(batch)
    return copied


def autoincrement_tables(conn: sqlite3.Connection) -> list[str]:
    """The tables whose keys SQLite's AUTOINCREMENT hands out (`sqlite_sequence`), by name."""
    return [str(row[0]) for row in conn.execute("SELECT name FROM sqlite_sequence ORDER BY name")]


def continue_autoincrement(conn: sqlite3.Connection, table: str, after: int) -> None:
    """Make SQLite's AUTOINCREMENT of `table` hand out `after + 1` next (or past its largest key, if larger)."""
    conn.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (after, table))


@contextlib.contextmanager
def undone(conn: sqlite3.Connection) -> Iterator[None]:
    """Run the block in a savepoint rolled back at its end, whether it succeeds or not, keeping the enclosing
    transaction (a trial: the rebuild that is compared with the rows copied)."""
    conn.execute("SAVEPOINT trial")
    try:
        yield
    finally:
        conn.execute("ROLLBACK TO trial")
        conn.execute("RELEASE trial")
