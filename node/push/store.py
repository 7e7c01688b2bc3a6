"""The SQL of push (docs/architecture.md, "Where SQL lives"): the `push_endpoints` table (node-local), the peers'
URLs endpoints may not use, and the dispatcher's scan of new notifications.

The endpoints' tiers and reasons are stored as the JSON text node/push/endpoints.py makes and reads back.
"""

from __future__ import annotations

import json
from typing import Any

from node.inbox import store as inbox_store
from node.store.conn import POSTGRESQL, Conn, engine_of

# ---- endpoints ----------------------------------------------------------------------------------------------------


def endpoint_id_at(conn: Conn, agent_id: str, url: str) -> int | None:
    """The id of the agent's endpoint at `url`, or None."""
    existing = conn.execute("SELECT id FROM push_endpoints WHERE agent_id = ? AND url = ?", (agent_id, url)).fetchone()
    return None if existing is None else int(existing[0])


def update_endpoint_txn(conn: Conn, endpoint_id: int, tiers: str, reasons: str) -> None:
    """Set an endpoint's tiers and reasons (JSON arrays)."""
    conn.execute("UPDATE push_endpoints SET tiers = ?, reasons = ? WHERE id = ?", (tiers, reasons, endpoint_id))


def count_endpoints(conn: Conn, agent_id: str) -> int:
    """How many endpoints the agent has registered."""
    return int(conn.execute("SELECT count(*) FROM push_endpoints WHERE agent_id = ?", (agent_id,)).fetchone()[0])


def insert_endpoint_txn(conn: Conn, agent_id: str, url: str, tiers: str, reasons: str, now_ms: int) -> int:
    """Store a new endpoint (tiers and reasons as JSON arrays); its id."""
    return int(
        conn.execute(
            "INSERT INTO push_endpoints (agent_id, url, tiers, reasons, created_ms) VALUES (?, ?, ?, ?, ?)"
            " RETURNING id",
            (agent_id, url, tiers, reasons, now_ms),
        ).fetchone()[0]
    )


def endpoint_row(conn: Conn, endpoint_id: int) -> Any:
    """The push_endpoints row `endpoint_id`, or None."""
    return conn.execute("SELECT * FROM push_endpoints WHERE id = ?", (endpoint_id,)).fetchone()


def endpoint_rows(conn: Conn, agent_id: str | None) -> list[Any]:
    """One agent's push_endpoints rows (every agent's when None), oldest first."""
    if engine_of(conn) == POSTGRESQL:  # a parameter only tested for NULL is typed there (record 50)
        sql = "SELECT * FROM push_endpoints WHERE CAST(? AS text) IS NULL OR agent_id = ? ORDER BY id"
        return conn.execute(sql, (agent_id, agent_id)).fetchall()
    return conn.execute(
        "SELECT * FROM push_endpoints WHERE ? IS NULL OR agent_id = ? ORDER BY id", (agent_id, agent_id)
    ).fetchall()


def delete_endpoint_txn(conn: Conn, agent_id: str, endpoint_id: int) -> bool:
    """Delete one of the agent's endpoints; whether there was one."""
    cur = conn.execute("DELETE FROM push_endpoints WHERE id = ? AND agent_id = ?", (endpoint_id, agent_id))
    return cur.rowcount > 0


def peer_urls(conn: Conn) -> list[str]:
    """The configured peers' URLs."""
    return [r[0] for r in conn.execute("SELECT url FROM peers").fetchall()]


# ---- the dispatcher's scan ----------------------------------------------------------------------------------------

NEW_SQL = (
    "SELECT n.agent_id, "
    + inbox_store.ENVELOPE_COLUMNS
    + " FROM notifications n"
    + inbox_store.ENVELOPE_JOINS
    + " WHERE n.id > :after AND n.id <= :upto AND +n.agent_id IN (SELECT value FROM json_each(:agents))"
    " AND +n.status = 'pending' AND " + inbox_store.ENVELOPE_SHOWN + " ORDER BY n.id LIMIT :limit"
)
REST_SQL = (
    "SELECT agent_id, tier, reason, count(*) FROM notifications"
    " WHERE id > :after AND id <= :upto AND +agent_id IN (SELECT value FROM json_each(:agents))"
    " AND +status = 'pending'"
    " GROUP BY agent_id, tier, reason"
)

# The two on PostgreSQL (docs/decisions.md record 50): the envelope's PostgreSQL columns, the agents as an array
# (`= ANY`), no planner hints (`+` on text is an error there).
NEW_SQL_PG = (
    "SELECT n.agent_id, "
    + inbox_store.ENVELOPE_COLUMNS_PG
    + " FROM notifications n"
    + inbox_store.ENVELOPE_JOINS
    + " WHERE n.id > :after AND n.id <= :upto AND n.agent_id = ANY(:agents)"
    " AND n.status = 'pending' AND " + inbox_store.ENVELOPE_SHOWN + " ORDER BY n.id LIMIT :limit"
)
REST_SQL_PG = (
    "SELECT agent_id, tier, reason, count(*) FROM notifications"
    " WHERE id > :after AND id <= :upto AND agent_id = ANY(:agents) AND status = 'pending'"
    " GROUP BY agent_id, tier, reason"
)


def newest_notification_id(conn: Conn) -> int:
    """The id of the newest notification (0 when there is none)."""
    return int(conn.execute("SELECT coalesce(max(id), 0) FROM notifications").fetchone()[0])


def new_notifications(conn: Conn, after: int, upto: int, agents: list[str], limit: int) -> list[Any]:
    """The first `limit` pending notifications of `agents` with ids in (after, upto], oldest first:
    each row the agent id and the envelope columns (node/inbox/store.py `ENVELOPE_COLUMNS`)."""
    if engine_of(conn) == POSTGRESQL:
        return conn.execute(NEW_SQL_PG, {"after": after, "upto": upto, "agents": agents, "limit": limit}).fetchall()
    params = {"after": after, "upto": upto, "agents": json.dumps(agents), "limit": limit}
    return conn.execute(NEW_SQL, params).fetchall()


def pending_counts(conn: Conn, after: int, upto: int, agents: list[str]) -> list[tuple[str, int, str, int]]:
    """(agent, tier, reason, count) of the pending notifications of `agents` with ids in (after, upto]."""
    if engine_of(conn) == POSTGRESQL:
        return [tuple(r) for r in conn.execute(REST_SQL_PG, {"after": after, "upto": upto, "agents": agents})]
    params = {"after": after, "upto": upto, "agents": json.dumps(agents)}
    return [tuple(r) for r in conn.execute(REST_SQL, params)]
