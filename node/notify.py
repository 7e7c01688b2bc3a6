"""Notifications: fan-out of new entries to subscriptions and addressees, and the inbox state machine.

Tier 1 (immediate): a request directed to the agent; a contradiction of one of its entries.
Tier 2 (batched): anything else directed to it, and subscription matches.
Only agents registered on this node (local_agents) receive notifications here.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

NOTIFICATION_TTL_MS = 7 * 24 * 3600 * 1000
LEASE_MS = 60_000
MAX_ATTEMPTS = 5

_UPSERT = (
    "INSERT INTO notifications (agent_id, entry_id, subscription_id, tier, reason, created_ms, expires_ms)"
    " VALUES (?, ?, NULL, ?, ?, ?, ?)"
    # an upgrade (a lower tier) makes the notification pending again with a fresh attempt count, whatever its
    # state, a lease included: a tier-1 reason must not wait for a lapsing tier-2 lease
    " ON CONFLICT (agent_id, entry_id) DO UPDATE SET tier = excluded.tier, reason = excluded.reason,"
    "   attempt_count = 0, status = 'pending', expires_ms = excluded.expires_ms"
    " WHERE excluded.tier < notifications.tier"
)


def any_subscriptions(conn: sqlite3.Connection) -> bool:
    """Whether the node holds any subscription at all (when none, fan-out has no subscribers to look for)."""
    return bool(conn.execute("SELECT EXISTS (SELECT 1 FROM subscriptions)").fetchone()[0])


def fan_out_entry(
    conn: sqlite3.Connection, entry_id: int, rec: Any, now_ms: int, *, subscriptions: bool = True
) -> None:
    """Notify addressees (tier 1 for requests) then subscribers (tier 2) of a newly stored entry.

    `subscriptions` false skips the subscriber query (the caller knows the node has none)."""
    expires = now_ms + NOTIFICATION_TTL_MS
    if rec.directed_to:
        tier, reason = (1, "directed_request") if rec.performative == "request" else (2, "directed")
        local = conn.execute(
            "SELECT agent_id FROM local_agents WHERE agent_id IN (SELECT value FROM json_each(?)) AND agent_id != ?",
            (_json_list(rec.directed_to), rec.author_id),
        ).fetchall()
        conn.executemany(_UPSERT, [(r[0], entry_id, tier, reason, now_ms, expires) for r in local])
    if not subscriptions:
        return
    conn.execute(
        "INSERT INTO notifications (agent_id, entry_id, subscription_id, tier, reason, created_ms, expires_ms)"
        " SELECT s.agent_id, :eid, MIN(s.id), 2, 'subscription', :now, :exp"
        " FROM subscriptions s"
        # Candidates by index: a term equal to one of the entry's values, or no terms at all. Every subscription
        # that can match is among them (a subscription with terms in a dimension needs one of them to match).
        " WHERE s.id IN (SELECT sub_id FROM subscription_terms WHERE dim = 'type' AND value = :type"
        "   UNION ALL SELECT sub_id FROM subscription_terms WHERE dim = 'perf' AND value = :perf"
        "   UNION ALL SELECT sub_id FROM subscription_terms WHERE dim = 'author' AND value = :author"
        "   UNION ALL SELECT t.sub_id FROM json_each(:tags) j CROSS JOIN subscription_terms t"
        "     ON t.dim = 'tag' AND t.value = j.value"
        "   UNION ALL SELECT id FROM subscriptions WHERE n_tags + n_types + n_perfs + n_authors = 0)"
        "   AND s.agent_id != :author"
        "   AND (s.n_types = 0 OR EXISTS (SELECT 1 FROM subscription_terms t"
        "        WHERE t.dim = 'type' AND t.value = :type AND t.sub_id = s.id))"
        "   AND (s.n_perfs = 0 OR EXISTS (SELECT 1 FROM subscription_terms t"
        "        WHERE t.dim = 'perf' AND t.value = :perf AND t.sub_id = s.id))"
        "   AND (s.n_authors = 0 OR EXISTS (SELECT 1 FROM subscription_terms t"
        "        WHERE t.dim = 'author' AND t.value = :author AND t.sub_id = s.id))"
        "   AND (s.n_tags = 0 OR EXISTS (SELECT 1 FROM subscription_terms t JOIN entry_tags et"
        "        ON et.entry_id = :eid AND et.tag = t.value WHERE t.dim = 'tag' AND t.sub_id = s.id))"
        "   AND (s.directed = 0 OR EXISTS (SELECT 1 FROM entry_directed d"
        "        WHERE d.entry_id = :eid AND d.agent_id = s.agent_id))"
        " GROUP BY s.agent_id"
        " ON CONFLICT (agent_id, entry_id) DO NOTHING",
        {
            "eid": entry_id,
            "now": now_ms,
            "exp": expires,
            "author": rec.author_id,
            "type": rec.entry_type,
            "perf": rec.performative,
            "tags": _json_list(rec.tags),
        },
    )


# Authors to notify, and the contradicting entry, for contradicts links that the records :h complete.
CONTRADICTIONS_SQL = (
    "SELECT t.author_id, s.id FROM links l"
    " JOIN entries t ON t.record_hash = l.target_hash"
    " JOIN entries s ON s.record_hash = l.source_hash"
    " JOIN local_agents a ON a.agent_id = t.author_id"
    # json_each joined inside the UNION: `x.hash IN (SELECT value FROM json_each(:h))` there cost 30x as much
    " WHERE l.id IN (SELECT x.id FROM json_each(:h) a JOIN links x ON x.origin_hash = a.value"
    "                UNION SELECT x.id FROM json_each(:h) a JOIN links x ON x.source_hash = a.value"
    "                UNION SELECT x.id FROM json_each(:h) a JOIN links x ON x.target_hash = a.value)"
    # + on link_type: start from the arrived records' links, not from every contradicts link (index on type)
    "   AND +l.link_type = 'contradicts' AND t.author_id != l.author_id"
)


def contradictions(conn: sqlite3.Connection, arrived_hashes: str, now_ms: int) -> None:
    """Tier-1 notify the authors of entries contradicted by links that the records just stored complete.

    `arrived_hashes` is a JSON array of their record hashes. The links are those they assert, and, for
    entries, links already stored whose source or target they are: records arrive in any order, so a
    contradiction becomes decidable when its last entry arrives. The notification points at the
    contradicting (source) entry.
    """
    rows = conn.execute(CONTRADICTIONS_SQL, {"h": arrived_hashes}).fetchall()
    if rows:
        expires = now_ms + NOTIFICATION_TTL_MS
        conn.executemany(
            _UPSERT, [(author, entry_id, 1, "contradiction", now_ms, expires) for author, entry_id in rows]
        )


def take_inbox(
    conn: sqlite3.Connection, agent_id: str, *, limit: int, since_ms: int | None, mark_delivered: bool, now_ms: int
) -> list[sqlite3.Row]:
    """Advance the state machine for one agent and lease (or deliver) up to `limit` notifications.

    pending -> leased (attempt counted, lease until now + LEASE_MS) -> delivered by ack;
    a lease that lapses makes the notification deliverable again; after MAX_ATTEMPTS lapses it is
    failed; past its expiry it is expired.
    """
    conn.execute(
        "UPDATE notifications SET status = 'expired'"
        " WHERE agent_id = ? AND status IN ('pending', 'leased') AND expires_ms <= ?",
        (agent_id, now_ms),
    )
    conn.execute(
        "UPDATE notifications SET status = 'failed'"
        " WHERE agent_id = ? AND status = 'leased' AND next_attempt_ms <= ? AND attempt_count >= ?",
        (agent_id, now_ms, MAX_ATTEMPTS),
    )
    rows = conn.execute(
        "SELECT n.id AS notification_id, n.tier, n.reason, n.attempt_count, e.id AS entry_id, e.record_hash,"
        "   e.author_id, e.created_at, e.entry_type, e.performative, e.tags, e.confidence,"
        "   EXISTS (SELECT 1 FROM entry_directed d WHERE d.entry_id = e.id AND d.agent_id = n.agent_id)"
        "     AS directed_to_me,"
        # the entry's own links in order; for a contradiction then the recipient's entries that someone else's
        # link record says it contradicts (what notified it), so the envelope alone tells which are meant
        "   (SELECT json_group_array(h) FROM ("
        "     SELECT l.target_hash AS h, 0 AS part, l.ordinal AS o FROM links l"
        "     WHERE l.origin_hash = e.record_hash AND l.ordinal >= 0"
        "     UNION ALL SELECT l.target_hash, 1, min(l.id) FROM links l JOIN entries t ON t.record_hash = l.target_hash"
        "     WHERE n.reason = 'contradiction' AND l.source_hash = e.record_hash AND l.link_type = 'contradicts'"
        "       AND l.origin_hash != e.record_hash AND t.author_id = n.agent_id AND l.author_id != n.agent_id"
        "       AND l.target_hash NOT IN (SELECT x.target_hash FROM links x"
        "         WHERE x.origin_hash = e.record_hash AND x.ordinal >= 0)"
        "     GROUP BY l.target_hash"
        "     ORDER BY part, o LIMIT 100)) AS link_targets"
        " FROM notifications n JOIN entries e ON e.id = n.entry_id"
        " WHERE n.agent_id = :agent"
        "   AND (n.status = 'pending' OR (n.status = 'leased' AND n.next_attempt_ms <= :now))"
        "   AND (:since IS NULL OR n.created_ms >= :since)"
        " ORDER BY n.tier, n.id LIMIT :limit",
        {"agent": agent_id, "now": now_ms, "since": since_ms, "limit": limit},
    ).fetchall()
    if rows:
        ids = _json_list([r["notification_id"] for r in rows])
        if mark_delivered:
            conn.execute(
                "UPDATE notifications SET status = 'delivered', delivered_ms = ?, attempt_count = attempt_count + 1"
                " WHERE id IN (SELECT value FROM json_each(?))",
                (now_ms, ids),
            )
        else:
            conn.execute(
                "UPDATE notifications SET status = 'leased', next_attempt_ms = ?, attempt_count = attempt_count + 1"
                " WHERE id IN (SELECT value FROM json_each(?))",
                (now_ms + LEASE_MS, ids),
            )
    return rows


def ack(conn: sqlite3.Connection, agent_id: str, ids: list[int], now_ms: int) -> int:
    """Mark the agent's own pending or leased notifications delivered; return how many changed."""
    cur = conn.execute(
        "UPDATE notifications SET status = 'delivered', delivered_ms = ?"
        " WHERE agent_id = ? AND status IN ('pending', 'leased') AND id IN (SELECT value FROM json_each(?))",
        (now_ms, agent_id, _json_list(ids)),
    )
    return cur.rowcount


def _json_list(values: list[Any]) -> str:
    return json.dumps(values) if values else "[]"
