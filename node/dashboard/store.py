"""The dashboard's SQL: the reads behind the views the REST API has no route for (docs/architecture.md, "Where
SQL lives").

Every function here only reads; each runs on a reader connection (`await node.db.read(...)`).
"""

from __future__ import annotations

from typing import Any

from node.spaces.sight import Sight
from node.store.conn import POSTGRESQL, Conn, any_of, engine_of


def has_table(conn: Conn, name: str) -> bool:
    """Whether this database has the table `name` (an optional feature's, e.g. trust_scores)."""
    if engine_of(conn) == POSTGRESQL:  # no sqlite_master there: the catalogue by to_regclass (record 50)
        return bool(conn.execute("SELECT to_regclass(CAST(? AS text)) IS NOT NULL", (name,)).fetchone()[0])
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def agent_activity(conn: Conn, since_ms: int, neutral_trust: float, with_trust: bool) -> list[Any]:
    """Every agent with its activity (entries, those since `since_ms`, last entry, links), most recently active
    first, in one grouped pass over entries and links; with its trust score and signals when `with_trust`
    (`neutral_trust` for an agent without a score), else NULL trust and zero signals."""
    trust_cols = (
        f", coalesce(t.score, {neutral_trust}) AS trust,"
        " coalesce(t.confirms, 0) AS tc, coalesce(t.disconfirms, 0) AS td"
        if with_trust
        else ", NULL AS trust, 0 AS tc, 0 AS td"
    )
    trust_join = " LEFT JOIN trust_scores t ON t.agent_id = a.id" if with_trust else ""
    # a comparison counted as 0/1 is SQLite's; PostgreSQL counts the rows it filters (record 50)
    recent = (
        "count(*) FILTER (WHERE created_ms >= :since)" if engine_of(conn) == POSTGRESQL else "sum(created_ms >= :since)"
    )
    return conn.execute(
        "SELECT a.id, a.display_name, a.description, a.home_node, a.created_at, la.name AS local_name,"
        " la.key_seed IS NOT NULL AS key_kept,"
        " coalesce(s.n, 0) AS n, coalesce(s.recent, 0) AS recent, s.last_ms, coalesce(k.n, 0) AS links"
        + trust_cols
        + " FROM agents a"
        " LEFT JOIN local_agents la ON la.agent_id = a.id"
        f" LEFT JOIN (SELECT author_id, count(*) AS n, {recent} AS recent, max(created_ms) AS last_ms"
        "            FROM entries WHERE space IS NULL GROUP BY author_id) s ON s.author_id = a.id"
        " LEFT JOIN (SELECT author_id, count(*) AS n FROM links WHERE ordinal >= 0 GROUP BY author_id) k"
        "   ON k.author_id = a.id" + trust_join + " ORDER BY s.last_ms IS NULL, s.last_ms DESC, a.display_name",
        {"since": since_ms},
    ).fetchall()


def display_names(conn: Conn, ids: list[str]) -> dict[str, str]:
    """Display names of these agents (those this node knows)."""
    test, listed = any_of(conn, ids)
    rows = conn.execute(f"SELECT id, display_name FROM agents WHERE id {test}", (listed,)).fetchall()
    return {r["id"]: r["display_name"] for r in rows}


def provenance_row(conn: Conn, entry_id: int) -> Any:
    """The entry `entry_id` with its record (origin, arrival, scope, body) and its author's name and home node,
    or None when there is no such entry."""
    return conn.execute(
        "SELECT e.id, e.record_hash, e.content_fingerprint, e.author_id, e.created_at, e.signature,"
        " r.origin, r.received_ms, r.scope, r.body, a.display_name, a.home_node"
        " FROM entries e JOIN records r ON r.seq = e.id LEFT JOIN agents a ON a.id = e.author_id"
        " WHERE e.id = ?",
        (entry_id,),
    ).fetchone()


def lease_expiry(conn: Conn, ids: list[int]) -> dict[int, str | None]:
    """The lease expiry (or None) of each of these tasks, by local id (ids without a task are left out)."""
    test, listed = any_of(conn, ids)
    rows = conn.execute(f"SELECT id, lease_expires_at FROM tasks WHERE id {test}", (listed,)).fetchall()
    return {r["id"]: r["lease_expires_at"] for r in rows}


def bus_projects(conn: Conn, sight: Sight) -> list[tuple[str | None, int, int]]:
    """(project, messages, last message's created_ms) of every bus project, counting the messages `sight` sees,
    most recently active first."""
    rows = conn.execute(
        "SELECT project, count(*) AS n, max(created_ms) AS last_ms FROM messages"
        f" WHERE {sight.sql('space', engine_of(conn))}"
        " GROUP BY project ORDER BY last_ms DESC"
    ).fetchall()
    return [(r["project"], r["n"], r["last_ms"]) for r in rows]
