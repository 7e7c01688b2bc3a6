"""Read-only queries behind the dashboard's few views that the REST API has no route for.

Each function runs on a reader connection (`await node.db.read(fn)`); nothing here writes. The SQL is in
node/dashboard/store.py.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from identity import records
from node.dashboard import store
from node.entries import store as entries_store
from node.spaces.sight import Sight
from node.store import void
from node.store.conn import Conn
from wire.api import KeyHistory
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


class AgentKeys(msgspec.Struct):
    """An agent's key history (the same `KeyHistory` as GET /v1/agents/{agent_id}) and, for the admin, how many
    of its stored records a later key event made void (null for an agent's key: GET /v1/admin/void-records is
    admin-only)."""

    agent_id: str
    display_name: str
    key_history: KeyHistory
    void_records: int | None


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


def agents(conn: Conn, now_ms: int) -> AgentList:
    """Every agent this node knows, most recently active first (one grouped pass over entries and links)."""
    rows = store.agent_activity(
        conn, now_ms - ACTIVITY_WINDOW_MS, NEUTRAL_TRUST, with_trust=store.has_table(conn, "trust_scores")
    )
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


def void_count(conn: Conn, agent_id: str) -> int:
    """How many stored records of `agent_id` are flagged void (`node.store.void.flagged_of`)."""
    return len(void.flagged_of(conn, [agent_id]))


def provenance(conn: Conn, ref: str, sight: Sight) -> Provenance | None:
    """The provenance of one entry (local id or record hash), or None when this node does not hold it or `sight`
    does not see it."""
    _, entry_id = entries_store.resolve_ref(conn, ref, sight)
    if entry_id is None:
        return None
    row = store.provenance_row(conn, entry_id)
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
