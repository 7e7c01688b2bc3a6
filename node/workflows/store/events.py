"""Task events: the `task_events` table (one row per task_event record, the history every task is folded from),
and whether a record is in the log at all.

node/workflows/records.py writes events with `insert_event_txn` and folds them; the services read a task's
newest event time (to date their own events after it) and which task a stored event belongs to.
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

from node.store.conn import POSTGRESQL, Conn, engine_of

# A release or complete by the holder, already stored, that ends a grant: by the lease_ref index (the + keeps
# SQLite off the task_key index, which would walk every event of the task).
ENDED_SQL = (
    "SELECT 1 FROM task_events WHERE +task_key = ? AND lease_ref = ? AND author_id = ?"
    " AND event IN ('release', 'complete') LIMIT 1"
)
# ENDED_SQL on PostgreSQL: no `+` hint there (an error on text: record 50); its planner picks the index by statistics.
ENDED_SQL_PG = (
    "SELECT 1 FROM task_events WHERE task_key = ? AND lease_ref = ? AND author_id = ?"
    " AND event IN ('release', 'complete') LIMIT 1"
)


class EventRow(NamedTuple):
    """A `task_events` row, in column order (depends_on and checkpoint as JSON text)."""

    seq: int
    hash: str
    task_key: str
    event: str
    author_id: str
    created_at: str
    created_ms: int
    node_id: str | None
    title: str | None
    depends_on: str | None
    status: str | None
    checkpoint: str | None
    holder: str | None
    expires_at: str | None
    expires_ms: int | None
    lease_ref: str | None
    space: str | None = None  # the task's space; None: public (task_key is the scoped key: node/workflows/scope.py)


def insert_event_txn(conn: Conn, row: EventRow) -> None:
    """Store one task event."""
    conn.execute(
        "INSERT INTO task_events (seq, hash, task_key, event, author_id, created_at, created_ms, node_id, title,"
        " depends_on, status, checkpoint, holder, expires_at, expires_ms, lease_ref, space)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        row,
    )


def event_at(conn: Conn, seq: int) -> sqlite3.Row:
    """The stored event of the record at `seq` (the caller knows it is stored)."""
    row: sqlite3.Row = conn.execute("SELECT * FROM task_events WHERE seq = ?", (seq,)).fetchone()
    return row


def events_of(conn: Conn, key: str) -> list[sqlite3.Row]:
    """Every event of a task, in the fold's order: (created_ms, hash)."""
    return conn.execute("SELECT * FROM task_events WHERE task_key = ? ORDER BY created_ms, hash", (key,)).fetchall()


def lease_ended(conn: Conn, key: str, lease_hash: str, holder: str) -> bool:
    """Whether a stored release or complete by `holder` names the grant `lease_hash` of task `key` (ENDED_SQL)."""
    sql = ENDED_SQL_PG if engine_of(conn) == POSTGRESQL else ENDED_SQL
    return conn.execute(sql, (key, lease_hash, holder)).fetchone() is not None


def newest_event_ms(conn: Conn, key: str) -> int | None:
    """The created time of the newest event held for a task (None when it has none)."""
    row = conn.execute("SELECT max(created_ms) FROM task_events WHERE task_key = ?", (key,)).fetchone()
    return None if row[0] is None else int(row[0])


def event_task_key(conn: Conn, record_hash: str) -> str:
    """The task a stored event belongs to (the caller knows `record_hash` is a stored task event)."""
    row = conn.execute("SELECT task_key FROM task_events WHERE hash = ?", (record_hash,)).fetchone()
    return str(row[0])


def record_stored(conn: Conn, record_hash: str) -> bool:
    """Whether the log holds a record at `record_hash`."""
    return conn.execute("SELECT 1 FROM records WHERE hash = ?", (record_hash,)).fetchone() is not None


def delete_event_txn(conn: Conn, seq: int) -> None:
    """Take one task event out of `task_events` (its record was flagged void: node/store/void.py)."""
    conn.execute("DELETE FROM task_events WHERE seq = ?", (seq,))
