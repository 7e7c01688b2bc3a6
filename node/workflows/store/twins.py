"""Twin tasks' queries: declarations and grants of one key by node (over `task_events`), and `task_home_moves`,
the node-local queue of keys whose home node moved (docs/workflows.md, Twin tasks).

node/workflows/twins.py decides from these what a key resolves to and which twins it has, and which notices
this node signs; node/workflows/records.py queues a moved key with `note_home_move_txn`.
"""

from __future__ import annotations

import sqlite3

from node.store.conn import POSTGRESQL, Conn, engine_of


def first_declaration(conn: Conn, key: str) -> str | None:
    """The hash of the key's earliest declaration (by created time, then hash), or None."""
    row = conn.execute(
        "SELECT hash FROM task_events WHERE task_key = ? AND event = 'declare' ORDER BY created_ms, hash LIMIT 1",
        (key,),
    ).fetchone()
    return None if row is None else str(row[0])


def lease_granters(conn: Conn, key: str, home_node: str) -> list[str]:
    """The nodes other than `home_node` that signed a lease grant on the key."""
    rows = conn.execute(
        "SELECT DISTINCT author_id FROM task_events WHERE task_key = ? AND event = 'lease' AND author_id != ?",
        (key, home_node),
    ).fetchall()
    return [str(r[0]) for r in rows]


def first_declaration_by(conn: Conn, key: str, node_id: str) -> sqlite3.Row | None:
    """The earliest declaration of the key naming `node_id` (hash, author_id, created_at), or None."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT hash, author_id, created_at FROM task_events WHERE task_key = ? AND event = 'declare'"
        " AND node_id = ? ORDER BY created_ms, hash LIMIT 1",
        (key, node_id),
    ).fetchone()
    return row


def grants_by(conn: Conn, key: str, node_id: str) -> list[sqlite3.Row]:
    """The lease grants `node_id` signed on the key (hash, holder, expires_at, expires_ms), oldest first."""
    return conn.execute(
        "SELECT hash, holder, expires_at, expires_ms FROM task_events WHERE task_key = ? AND event = 'lease'"
        " AND author_id = ? ORDER BY created_ms, hash",
        (key, node_id),
    ).fetchall()


def grant_ended(conn: Conn, lease_hash: str, holder: str) -> bool:
    """Whether an event by `holder` names the grant `lease_hash` (its release or completion)."""
    row = conn.execute(
        "SELECT 1 FROM task_events WHERE lease_ref = ? AND author_id = ? LIMIT 1", (lease_hash, holder)
    ).fetchone()
    return row is not None


def first_projected_declaration(conn: Conn, key: str) -> sqlite3.Row | None:
    """The key's declaration this node projected first (lowest seq): hash, author_id, created_at, node_id and
    the record's origin; None when it holds none."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT t.hash, t.author_id, t.created_at, t.node_id, r.origin FROM task_events t"
        " JOIN records r ON r.seq = t.seq WHERE t.task_key = ? AND t.event = 'declare' ORDER BY t.seq LIMIT 1",
        (key,),
    ).fetchone()
    return row


def newest_of(conn: Conn, key: str, hashes: tuple[str, str], granter: str) -> int:
    """The created time of the newest of the key's events that are one of `hashes` or a grant by `granter`
    (the caller knows at least one is stored)."""
    newest = conn.execute(
        "SELECT max(created_ms) FROM task_events"
        " WHERE task_key = ? AND (hash IN (?, ?) OR author_id = ? AND event = 'lease')",
        (key, *hashes, granter),
    ).fetchone()[0]
    return int(newest)


def pending_moves(conn: Conn, limit: int) -> list[str]:
    """Up to `limit` keys of the home-move queue, in key order (SQLite reads its WITHOUT ROWID table in key order;
    PostgreSQL's heap has no order, so it is asked for)."""
    if engine_of(conn) == POSTGRESQL:
        rows = conn.execute("SELECT task_key FROM task_home_moves ORDER BY task_key LIMIT ?", (limit,)).fetchall()
    else:
        rows = conn.execute("SELECT task_key FROM task_home_moves LIMIT ?", (limit,)).fetchall()
    return [str(r[0]) for r in rows]


def note_home_move_txn(conn: Conn, key: str) -> None:
    """Queue a key whose home node moved (a key already queued is queued once)."""
    if engine_of(conn) == POSTGRESQL:  # record 50: ON CONFLICT DO NOTHING for OR IGNORE (the key is never NULL)
        conn.execute("INSERT INTO task_home_moves (task_key) VALUES (?) ON CONFLICT DO NOTHING", (key,))
    else:
        conn.execute("INSERT OR IGNORE INTO task_home_moves (task_key) VALUES (?)", (key,))


def clear_move_txn(conn: Conn, key: str) -> None:
    """Take a key off the home-move queue."""
    conn.execute("DELETE FROM task_home_moves WHERE task_key = ?", (key,))
