"""Read-only queries behind the dashboard's few views that the REST API has no route for.

Each function runs on a reader connection (`await node.db.read(fn)`); nothing here writes.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import msgspec

from identity import records
from node.entries import store
from wire.time import format_ms

ACTIVITY_WINDOW_MS = 7 * 24 * 3600 * 1000


class AgentRow(msgspec.Struct):
    """An agent as the dashboard lists it: identity, whether this node keeps it, and its activity."""

    agent_id: str
    display_name: str
    description: str
    home_node: str
    created_at: str
    local_name: str | None
    entry_count: int
    entries_last_7_days: int
    link_count: int
    last_active: str | None
    trust: float | None = None  # None when this node computes no trust scores
    confirms: int = 0
    disconfirms: int = 0
    key_kept: bool = False  # this node keeps the agent's key (so it can sign for it, e.g. an admin's promote)


class AgentList(msgspec.Struct):
    agents: list[AgentRow]


class Provenance(msgspec.Struct):
    """Where an entry came from: its signed record, how it reached this node, and whether it still verifies."""

    entry_id: int
    record_hash: str
    content_fingerprint: str
    author_id: str
    author_display_name: str | None
    author_home_node: str | None
    created_at: str
    signature: str
    signature_valid: bool
    origin: str
    received_at: str
    scope: str
    record: dict[str, Any]


NEUTRAL_TRUST = 0.5  # an agent without counted signals (docs/trust.md)


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def agents(conn: sqlite3.Connection, now_ms: int) -> AgentList:
    """Every agent this node knows, most recently active first (one grouped pass over entries and links)."""
    trust = _has_table(conn, "trust_scores")
    trust_cols = (
        f", coalesce(t.score, {NEUTRAL_TRUST}) AS trust,"
        " coalesce(t.confirms, 0) AS tc, coalesce(t.disconfirms, 0) AS td"
        if trust
        else ", NULL AS trust, 0 AS tc, 0 AS td"
    )
    trust_join = " LEFT JOIN trust_scores t ON t.agent_id = a.id" if trust else ""
    rows = conn.execute(
        "SELECT a.id, a.display_name, a.description, a.home_node, a.created_at, la.name AS local_name,"
        " la.key_seed IS NOT NULL AS key_kept,"
        " coalesce(s.n, 0) AS n, coalesce(s.recent, 0) AS recent, s.last_ms, coalesce(k.n, 0) AS links"
        + trust_cols
        + " FROM agents a"
        " LEFT JOIN local_agents la ON la.agent_id = a.id"
        " LEFT JOIN (SELECT author_id, count(*) AS n, sum(created_ms >= :since) AS recent, max(created_ms) AS last_ms"
        "            FROM entries GROUP BY author_id) s ON s.author_id = a.id"
        " LEFT JOIN (SELECT author_id, count(*) AS n FROM links WHERE ordinal >= 0 GROUP BY author_id) k"
        "   ON k.author_id = a.id" + trust_join + " ORDER BY s.last_ms IS NULL, s.last_ms DESC, a.display_name",
        {"since": now_ms - ACTIVITY_WINDOW_MS},
    ).fetchall()
    return AgentList(
        [
            AgentRow(
                agent_id=r["id"],
                display_name=r["display_name"],
                description=r["description"],
                home_node=r["home_node"],
                created_at=r["created_at"],
                local_name=r["local_name"],
                entry_count=r["n"],
                entries_last_7_days=r["recent"],
                link_count=r["links"],
                last_active=format_ms(r["last_ms"]) if r["last_ms"] is not None else None,
                trust=r["trust"],
                confirms=r["tc"],
                disconfirms=r["td"],
                key_kept=bool(r["key_kept"]),
            )
            for r in rows
        ]
    )


def display_names(conn: sqlite3.Connection, ids: list[str]) -> dict[str, str]:
    """Display names of these agents (those this node knows)."""
    rows = conn.execute(
        "SELECT id, display_name FROM agents WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(ids),)
    ).fetchall()
    return {r["id"]: r["display_name"] for r in rows}


def provenance(conn: sqlite3.Connection, ref: str) -> Provenance | None:
    """The provenance of one entry (local id or record hash), or None when this node does not hold it."""
    _, entry_id = store.resolve_ref(conn, ref)
    if entry_id is None:
        return None
    row = conn.execute(
        "SELECT e.id, e.record_hash, e.content_fingerprint, e.author_id, e.created_at, e.signature,"
        " r.origin, r.received_ms, r.scope, r.body, a.display_name, a.home_node"
        " FROM entries e JOIN records r ON r.seq = e.id LEFT JOIN agents a ON a.id = e.author_id"
        " WHERE e.id = ?",
        (entry_id,),
    ).fetchone()
    body = json.loads(row["body"])
    try:
        checked_hash, _ = records.check(body)
        valid = checked_hash == row["record_hash"]
    except records.RecordError:
        valid = False
    return Provenance(
        entry_id=row["id"],
        record_hash=row["record_hash"],
        content_fingerprint=row["content_fingerprint"],
        author_id=row["author_id"],
        author_display_name=row["display_name"],
        author_home_node=row["home_node"],
        created_at=row["created_at"],
        signature=row["signature"],
        signature_valid=valid,
        origin=row["origin"],
        received_at=format_ms(row["received_ms"]),
        scope=row["scope"],
        record=body,
    )
