"""The SQL of the feed: entries in arrival order (their local id) after a cursor, and the newest id.

Store functions (docs/architecture.md, "Where SQL lives"); both only read. node/feed/service.py pages and waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from node.entries import queries
from node.spaces.sight import Sight
from node.store.conn import Conn, any_of


def newest_id(conn: Conn) -> int:
    """The newest entry id on this node (0 when there is none)."""
    return int(conn.execute("SELECT coalesce(max(id), 0) FROM entries").fetchone()[0])


def entry_rows(
    conn: Conn, after: int, limit: int, include_synthetic: bool, sight: Sight, spaces: Sequence[str] = ()
) -> list[Any]:
    """Up to `limit` entries (`queries.ENTRY_COLUMNS`) with an id above `after` that `sight` sees (of `spaces` only,
    when given), in id order; simulations only with `include_synthetic`."""
    in_spaces, listed = any_of(conn, spaces)
    sql = (
        f"SELECT {queries.entry_columns(conn)} FROM entries e"
        f" WHERE e.id > ? AND {queries.seen_by(conn, sight, 'e.space')}"
        + ("" if include_synthetic else " AND e.truth_state != 'simulation'")
        + (f" AND e.space {in_spaces}" if spaces else "")
        + " ORDER BY e.id LIMIT ?"
    )
    params = (after, listed, limit) if spaces else (after, limit)
    return conn.execute(sql, params).fetchall()
