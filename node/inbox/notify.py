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

NOTIFICATION_TTL_MS = 7 * 24 * 3600 * 1000
LEASE_MS = 60_000
MAX_ATTEMPTS = 5

# an upgrade (a lower tier) makes the notification pending again with a fresh attempt count, whatever its
# state, a lease included: a tier-1 reason must not wait for a lapsing tier-2 lease
_ON_CONFLICT = (
    " ON CONFLICT (agent_id, entry_id) DO UPDATE SET tier = excluded.tier, reason = excluded.reason,"
    "   attempt_count = 0, status = 'pending', expires_ms = excluded.expires_ms"
    " WHERE excluded.tier < notifications.tier"
)
_UPSERT = (
    "INSERT INTO notifications (agent_id, entry_id, subscription_id, tier, reason, created_ms, expires_ms)"
    " VALUES (?, ?, NULL, ?, ?, ?, ?)" + _ON_CONFLICT
)


def any_subscriptions(conn: sqlite3.Connection) -> bool:
    """Whether the node holds any subscription at all (when none, fan-out has no subscribers to look for)."""
    return bool(conn.execute("SELECT EXISTS (SELECT 1 FROM subscriptions)").fetchone()[0])


# The entries just stored, one row each: :run is a JSON array of [entry_id, author, type, performative, tags,
# directed_to, simulation (0/1)], in log order.
_RUN = (
    "WITH r AS (SELECT value ->> 0 AS eid, value ->> 1 AS author, value ->> 2 AS type, value ->> 3 AS perf,"
    " value -> 4 AS tags, value -> 5 AS directed, value ->> 6 AS sim FROM json_each(:run))"
)
# Addressees registered here (tier 1 for a request), part 0.
_DIRECTED = (
    "SELECT d.value AS agent_id, r.eid AS eid, NULL AS sub, CASE WHEN r.perf = 'request' THEN 1 ELSE 2 END AS tier,"
    " CASE WHEN r.perf = 'request' THEN 'directed_request' ELSE 'directed' END AS reason, 0 AS part"
    " FROM r CROSS JOIN json_each(r.directed) d JOIN local_agents a ON a.agent_id = d.value"
    " WHERE d.value != r.author"
)
# Subscribers (tier 2), part 1: one notification per agent and entry, naming its first matching subscription.
_SUBSCRIBED = (
    "SELECT s.agent_id AS agent_id, r.eid AS eid, MIN(s.id) AS sub, 2 AS tier, 'subscription' AS reason, 1 AS part"
    " FROM r CROSS JOIN subscriptions s"
    # Candidates by index: a term equal to one of the entry's values, or no terms at all. Every subscription
    # that can match is among them (a subscription with terms in a dimension needs one of them to match).
    " WHERE s.id IN (SELECT sub_id FROM subscription_terms WHERE dim = 'type' AND value = r.type"
    "   UNION ALL SELECT sub_id FROM subscription_terms WHERE dim = 'perf' AND value = r.perf"
    "   UNION ALL SELECT sub_id FROM subscription_terms WHERE dim = 'author' AND value = r.author"
    "   UNION ALL SELECT t.sub_id FROM json_each(r.tags) j CROSS JOIN subscription_terms t"
    "     ON t.dim = 'tag' AND t.value = j.value"
    "   UNION ALL SELECT id FROM subscriptions WHERE n_tags + n_types + n_perfs + n_authors = 0)"
    "   AND s.agent_id != r.author AND r.sim = 0"  # a simulation is hidden unless asked for: no subscription asks
    "   AND (s.n_types = 0 OR EXISTS (SELECT 1 FROM subscription_terms t"
    "        WHERE t.dim = 'type' AND t.value = r.type AND t.sub_id = s.id))"
    "   AND (s.n_perfs = 0 OR EXISTS (SELECT 1 FROM subscription_terms t"
    "        WHERE t.dim = 'perf' AND t.value = r.perf AND t.sub_id = s.id))"
    "   AND (s.n_authors = 0 OR EXISTS (SELECT 1 FROM subscription_terms t"
    "        WHERE t.dim = 'author' AND t.value = r.author AND t.sub_id = s.id))"
    "   AND (s.n_tags = 0 OR EXISTS (SELECT 1 FROM subscription_terms t JOIN entry_tags et"
    "        ON et.entry_id = r.eid AND et.tag = t.value WHERE t.dim = 'tag' AND t.sub_id = s.id))"
    "   AND (s.directed = 0 OR EXISTS (SELECT 1 FROM entry_directed d"
    "        WHERE d.entry_id = r.eid AND d.agent_id = s.agent_id))"
    " GROUP BY r.eid, s.agent_id"
)


def fan_out_sql(*, directed: bool, subscribed: bool) -> str:
    """The one statement that notifies a run of new entries' addressees and subscribers, entry by entry in log
    order (addressees first: an agent both addressed and subscribed is notified as an addressee)."""
    parts = [sql for sql, wanted in ((_DIRECTED, directed), (_SUBSCRIBED, subscribed)) if wanted]
    return (
        f"{_RUN} INSERT INTO notifications (agent_id, entry_id, subscription_id, tier, reason, created_ms, expires_ms)"
        f" SELECT agent_id, eid, sub, tier, reason, :now, :exp FROM ({' UNION ALL '.join(parts)})"
        " WHERE true ORDER BY eid, part, agent_id" + _ON_CONFLICT
    )


def fan_out(
    conn: sqlite3.Connection, run: list[tuple[int, Any]], now_ms: int, *, subscribed: bool | None = None
) -> None:
    """Notify addressees (tier 1 for requests) then subscribers (tier 2) of newly stored entries (entry id,
    record) in one statement, whatever the run's length: its tags and addressees must be stored already.
    `subscribed` is `any_subscriptions`, when the caller read it in this transaction already."""
    directed = any(rec.directed_to for _, rec in run)
    if subscribed is None:
        subscribed = any_subscriptions(conn)
    if not (directed or subscribed):
        return
    rows = [
        [eid, rec.author_id, rec.entry_type, rec.performative, rec.tags, rec.directed_to,
         int(rec.truth_state == "simulation")]
        for eid, rec in run
    ]  # fmt: skip
    conn.execute(
        fan_out_sql(directed=directed, subscribed=subscribed),
        {"run": json.dumps(rows), "now": now_ms, "exp": now_ms + NOTIFICATION_TTL_MS},
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
    "   AND +l.link_type = 'contradicts' AND t.author_id != l.author_id AND s.truth_state != 'simulation'"
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


# The state changes a poll makes before it picks its page: notifications past their expiry, any agent's (found
# by notifications_expiry, so only those are visited), and the agent's leases lapsed MAX_ATTEMPTS times (an
# agent's leased notifications are few).
EXPIRE_SQL = "UPDATE notifications SET status = 'expired' WHERE status IN ('pending', 'leased') AND expires_ms <= :now"
EXPIRED_WAITING_SQL = (
    "SELECT EXISTS (SELECT 1 FROM notifications WHERE status IN ('pending', 'leased') AND expires_ms <= :now)"
)


def expire(conn: sqlite3.Connection, now_ms: int) -> int:
    """Mark every agent's notifications past their expiry `expired`; how many."""
    return conn.execute(EXPIRE_SQL, {"now": now_ms}).rowcount


def expired_waiting(conn: sqlite3.Connection, now_ms: int) -> bool:
    """Whether some pending or leased notification is past its expiry (a seek on the partial expiry index)."""
    return bool(conn.execute(EXPIRED_WAITING_SQL, {"now": now_ms}).fetchone()[0])


FAIL_SQL = (
    "UPDATE notifications SET status = 'failed'"
    " WHERE agent_id = :agent AND status = 'leased' AND next_attempt_ms <= :now AND attempt_count >= :attempts"
)
# The envelope of a notification `n` of entry `e`, as columns (INBOX_SQL's page, and node/push's scan).
ENVELOPE_COLUMNS = (
    "n.id AS notification_id, n.tier, n.reason, n.attempt_count, e.id AS entry_id, e.record_hash,"
    "   e.author_id, e.created_at, e.entry_type, e.performative, e.tags, e.confidence,"
    "   EXISTS (SELECT 1 FROM entry_directed d WHERE d.entry_id = e.id AND d.agent_id = n.agent_id)"
    "     AS directed_to_me,"
    # the entry's own links in order; for a contradiction then the recipient's entries that someone else's
    # link record says it contradicts (what notified it), so the envelope alone tells which are meant
    "   (SELECT json_group_array(h) FROM ("
    "     SELECT l.target_hash AS h, 0 AS part, l.ordinal AS o FROM links l"
    "     WHERE l.origin_hash = e.record_hash AND l.ordinal >= 0"
    "     UNION ALL SELECT l.target_hash, 1, min(l.id) FROM links l JOIN entries t ON t.record_hash = l.target_hash"
    # + on link_type: found by the entry's hash (links_source), not among every contradicts link of the node
    "     WHERE n.reason = 'contradiction' AND l.source_hash = e.record_hash AND +l.link_type = 'contradicts'"
    "       AND l.origin_hash != e.record_hash AND t.author_id = n.agent_id AND l.author_id != n.agent_id"
    "       AND l.target_hash NOT IN (SELECT x.target_hash FROM links x"
    "         WHERE x.origin_hash = e.record_hash AND x.ordinal >= 0)"
    "     GROUP BY l.target_hash"
    "     ORDER BY part, o LIMIT 100)) AS link_targets"
)
# One page of an agent's deliverable notifications with their envelopes. The page is chosen first, from
# notifications_agent_status in (tier, id) order (a pending and a lapsed-lease branch, merged), so a poll reads
# `limit` rows whatever the agent's backlog; the envelope columns, with their subqueries, are computed for the
# page only (selected with the filter, SQLite computed them for every deliverable row before sorting).
INBOX_SQL = (
    "SELECT " + ENVELOPE_COLUMNS + " FROM ("
    "   SELECT id, tier FROM (SELECT id, tier FROM notifications"
    "     WHERE agent_id = :agent AND status = 'pending' AND (:since IS NULL OR created_ms >= :since)"
    "     ORDER BY tier, id LIMIT :limit)"
    "   UNION ALL"
    "   SELECT id, tier FROM (SELECT id, tier FROM notifications"
    "     WHERE agent_id = :agent AND status = 'leased' AND next_attempt_ms <= :now"
    "       AND (:since IS NULL OR created_ms >= :since)"
    "     ORDER BY tier, id LIMIT :limit)"
    "   ORDER BY tier, id LIMIT :limit) p"
    " JOIN notifications n ON n.id = p.id JOIN entries e ON e.id = n.entry_id"
    " ORDER BY p.tier, p.id"
)


# Whether the agent has anything a poll would lease or fail: a pending notification, or a leased one whose lease
# has lapsed. Both are seeks on notifications_agent_status; an empty inbox is answered from this read alone.
DELIVERABLE_SQL = (
    "SELECT EXISTS (SELECT 1 FROM notifications WHERE agent_id = :agent AND status = 'pending')"
    " OR EXISTS (SELECT 1 FROM notifications WHERE agent_id = :agent AND status = 'leased' AND next_attempt_ms <= :now)"
)


def has_deliverable(conn: sqlite3.Connection, agent_id: str, now_ms: int) -> bool:
    """Whether `take_inbox` would lease, deliver or fail any of the agent's notifications now."""
    return bool(conn.execute(DELIVERABLE_SQL, {"agent": agent_id, "now": now_ms}).fetchone()[0])


def take_inbox(
    conn: sqlite3.Connection, agent_id: str, *, limit: int, since_ms: int | None, mark_delivered: bool, now_ms: int
) -> list[sqlite3.Row]:
    """Advance the state machine and lease (or deliver) up to `limit` of the agent's notifications.

    pending -> leased (attempt counted, lease until now + LEASE_MS) -> delivered by ack;
    a lease that lapses makes the notification deliverable again; after MAX_ATTEMPTS lapses it is
    failed; past its expiry it is expired (any agent's: the expired are found by index, not per agent).
    """
    expire(conn, now_ms)
    conn.execute(FAIL_SQL, {"agent": agent_id, "now": now_ms, "attempts": MAX_ATTEMPTS})
    rows = conn.execute(INBOX_SQL, {"agent": agent_id, "now": now_ms, "since": since_ms, "limit": limit}).fetchall()
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
