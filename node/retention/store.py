"""The SQL of retention (migration 0041): deleting old node-local rows in bounded batches, and the
`retention_policies` table that records each policy and what it removed (read by `bbs doctor` and /metrics).

Store functions (docs/architecture.md, "Where SQL lives"): those ending in `_txn` write and run on the writer thread.
"""

from __future__ import annotations

from typing import NamedTuple

from node.store.conn import POSTGRESQL, Conn, engine_of

DELIVERED_NOTIFICATIONS = "delivered_notifications"
REJECTED_CANDIDATES = "rejected_candidates"
POLICIES: tuple[str, ...] = (DELIVERED_NOTIFICATIONS, REJECTED_CANDIDATES)

# One batch of each policy: the oldest rows past the cutoff, at most :limit of them.
_DELETE = {
    DELIVERED_NOTIFICATIONS: (
        "DELETE FROM notifications WHERE id IN (SELECT id FROM notifications"
        " WHERE status = 'delivered' AND delivered_ms < :cutoff ORDER BY delivered_ms LIMIT :limit)"
        # never the newest: SQLite gives a new row the highest id + 1, so deleting it would hand its id to the next
        # notification, which a client keeping ids, or the push dispatcher's cursor, would take for one already seen
        " AND id < (SELECT max(id) FROM notifications)"
    ),
    # rejected when decided (a reviewer's rejection) or reviewed (the critic's); created when neither is known
    REJECTED_CANDIDATES: (
        "DELETE FROM dm_candidates WHERE id IN (SELECT id FROM dm_candidates"
        " WHERE status = 'rejected' AND coalesce(decided_ms, reviewed_ms, created_ms) < :cutoff"
        " ORDER BY id LIMIT :limit)"
    ),
}


class PolicyRow(NamedTuple):
    """A retention policy as the node last applied it."""

    policy: str
    days: int
    removed: int
    last_run_ms: int | None


def delete_batch_txn(conn: Conn, policy: str, cutoff_ms: int, limit: int) -> int:
    """Delete at most `limit` of the rows `policy` covers that are older than `cutoff_ms`; how many went."""
    return int(conn.execute(_DELETE[policy], {"cutoff": cutoff_ms, "limit": limit}).rowcount)


def record_run_txn(conn: Conn, policy: str, days: int, removed: int, now_ms: int) -> None:
    """Record that `policy` (keeping `days`; 0: off) ran at `now_ms` and removed `removed` more rows."""
    sql = (
        "INSERT INTO retention_policies (policy, days, removed, last_run_ms) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (policy) DO UPDATE SET days = excluded.days, removed = removed + excluded.removed,"
        " last_run_ms = excluded.last_run_ms"
    )
    if engine_of(conn) == POSTGRESQL:  # a bare `removed` is ambiguous there (the row's, or excluded's)
        sql = (
            "INSERT INTO retention_policies (policy, days, removed, last_run_ms) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (policy) DO UPDATE SET days = excluded.days,"
            " removed = retention_policies.removed + excluded.removed, last_run_ms = excluded.last_run_ms"
        )
    conn.execute(sql, (policy, days, removed, now_ms))


def policies(conn: Conn) -> list[PolicyRow]:
    """Every policy the node has recorded, by name."""
    rows = conn.execute("SELECT policy, days, removed, last_run_ms FROM retention_policies ORDER BY policy")
    return [PolicyRow(r[0], int(r[1]), int(r[2]), None if r[3] is None else int(r[3])) for r in rows.fetchall()]
