"""The SQL of the feed: entries in arrival order (their local id) after a cursor, and the newest id.

Store functions (docs/architecture.md, "Where SQL lives"); both only read. node/feed/service.py pages and waits.
"""

from __future__ import annotations

from typing import Any

from node.entries import queries
from node.store.conn import Conn


def newest_id(conn: Conn) -> int:
    """The newest entry id on this node (0 when there is none)."""
    return int(conn.execute("SELECT coalesce(max(id), 0) FROM entries").fetchone()[0])


def entry_rows(conn: Conn, after: int, limit: int, include_synthetic: bool) -> list[Any]:
    """Up to `limit` entries (`queries.ENTRY_COLUMNS`) with an id above `after`, in id order; simulations only
    with `include_synthetic`."""
    sql = (
        f"SELECT {queries.ENTRY_COLUMNS} FROM entries e WHERE e.id > ?"
        + ("" if include_synthetic else " AND e.truth_state != 'simulation'")
        + " ORDER BY e.id LIMIT ?"
    )
    return conn.execute(sql, (after, limit)).fetchall()
