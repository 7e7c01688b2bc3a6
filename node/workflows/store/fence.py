"""What the lease fence (node/workflows/fence.py) compares its file with: the lease grants a node made, as this
database holds them (in `task_events`), and the fence's own keys in `node_meta`.
"""

from __future__ import annotations

from node.store.conn import Conn


def meta(conn: Conn, key: str) -> str | None:
    """The `node_meta` value of `key`, or None."""
    row = conn.execute("SELECT value FROM node_meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def set_meta_txn(conn: Conn, key: str, value: str) -> None:
    """Set the `node_meta` value of `key`."""
    conn.execute(
        "INSERT INTO node_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def latest_grant_ms(conn: Conn, node_id: str) -> int:
    """The latest expiry of any lease grant by `node_id` that this database holds (0 when none)."""
    row = conn.execute(
        "SELECT max(expires_ms) FROM task_events WHERE author_id = ? AND event = 'lease'", (node_id,)
    ).fetchone()
    return int(row[0] or 0)


def grants_since(conn: Conn, node_id: str, since_ms: int) -> int:
    """How many lease grants by `node_id` expiring after `since_ms` this database holds (one index range)."""
    row = conn.execute(
        "SELECT count(*) FROM task_events WHERE author_id = ? AND event = 'lease' AND expires_ms > ?",
        (node_id, since_ms),
    ).fetchone()
    return int(row[0])
