"""Notifications: fan-out of new entries to subscriptions and addressees, and the inbox state machine.

Tier 1 (immediate): a request directed to the agent; a contradiction of one of its entries.
Tier 2 (batched): anything else directed to it, and subscription matches.
Only agents registered on this node (local_agents) receive notifications here. A simulation (truth_state
simulation) notifies only the agents it is directed to: subscriptions and contradictions leave it out, as
ordinary reads do.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from identity.schema_v3 import space_of
from node.inbox import store
from node.store.conn import Conn

NOTIFICATION_TTL_MS = 7 * 24 * 3600 * 1000
LEASE_MS = 60_000
MAX_ATTEMPTS = 5


def fan_out(conn: Conn, run: list[tuple[int, Any]], now_ms: int, *, subscribed: bool | None = None) -> None:
    """Notify addressees (tier 1 for requests) then subscribers (tier 2) of newly stored entries (entry id,
    record) in one statement, whatever the run's length: its tags and addressees must be stored already.
    `subscribed` is `store.any_subscriptions`, when the caller read it in this transaction already."""
    directed = any(rec.directed_to for _, rec in run)
    if subscribed is None:
        subscribed = store.any_subscriptions(conn)
    if not (directed or subscribed):
        return
    rows = [
        [eid, rec.author_id, rec.entry_type, rec.performative, rec.tags, rec.directed_to,
         int(rec.truth_state == "simulation"), space_of(rec)]
        for eid, rec in run
    ]  # fmt: skip
    store.fan_out_txn(
        conn, json.dumps(rows), now_ms, now_ms + NOTIFICATION_TTL_MS, directed=directed, subscribed=subscribed
    )


def contradictions(conn: Conn, arrived_hashes: str, now_ms: int) -> None:
    """Tier-1 notify the authors of entries contradicted by links that the records just stored complete.

    `arrived_hashes` is a JSON array of their record hashes. The links are those they assert, and, for
    entries, links already stored whose source or target they are: records arrive in any order, so a
    contradiction becomes decidable when its last entry arrives. The notification points at the
    contradicting (source) entry.
    """
    rows = store.contradicted(conn, arrived_hashes)
    if rows:
        expires = now_ms + NOTIFICATION_TTL_MS
        store.upsert_notifications_txn(
            conn, [(author, entry_id, 1, "contradiction", now_ms, expires) for author, entry_id in rows]
        )


def take_inbox(
    conn: Conn,
    agent_id: str,
    *,
    limit: int,
    since_ms: int | None,
    mark_delivered: bool,
    now_ms: int,
    space: str | None = None,
) -> list[sqlite3.Row]:
    """Advance the state machine and lease (or deliver) up to `limit` of the agent's notifications.

    pending -> leased (attempt counted, lease until now + LEASE_MS) -> delivered by ack;
    a lease that lapses makes the notification deliverable again; after MAX_ATTEMPTS lapses it is
    failed; past its expiry it is expired (any agent's: the expired are found by index, not per agent).
    With `space`, only notifications of that space's entries are leased.
    """
    store.expire_txn(conn, now_ms)
    store.fail_lapsed_txn(conn, agent_id, now_ms, MAX_ATTEMPTS)
    rows = store.inbox_page(conn, agent_id, now_ms, since_ms, limit, space)
    if rows:
        ids = [r["notification_id"] for r in rows]
        if mark_delivered:
            store.deliver_txn(conn, ids, now_ms)
        else:
            store.lease_txn(conn, ids, now_ms + LEASE_MS)
    return rows
