"""The SQL of the inbox: subscriptions (`subscriptions`, `subscription_terms`) and notifications, from the fan-out
of new entries (run inside every append's write transaction) to a poll's lease and an ack.

Store functions (docs/architecture.md, "Where SQL lives"): those ending in `_txn` write and run on the writer
thread, inside a `db.write` or `db.write_merged` job; the others only read. node/inbox/notify.py decides which
statements a run of new entries needs and drives the state machine; node/inbox/service.py is the agent's side.
"""

from __future__ import annotations

import json
from typing import Any

from node.spaces.store import may_read_sql
from node.store.conn import POSTGRESQL, SQLITE, Conn, any_of, engine_of
from node.store.pg_text import escape_json_strings

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


def any_subscriptions(conn: Conn) -> bool:
    """Whether the node holds any subscription at all (when none, fan-out has no subscribers to look for)."""
    return bool(conn.execute("SELECT EXISTS (SELECT 1 FROM subscriptions)").fetchone()[0])


# The entries just stored, one row each: :run is a JSON array of [entry_id, author, type, performative, tags,
# directed_to, simulation (0/1), space (null: public)], in log order.
_RUN = (
    "WITH r AS (SELECT value ->> 0 AS eid, value ->> 1 AS author, value ->> 2 AS type, value ->> 3 AS perf,"
    " value -> 4 AS tags, value -> 5 AS directed, value ->> 6 AS sim, value ->> 7 AS space FROM json_each(:run))"
)
# Addressees registered here (tier 1 for a request), part 0.
_DIRECTED = (
    "SELECT d.value AS agent_id, r.eid AS eid, NULL AS sub, CASE WHEN r.perf = 'request' THEN 1 ELSE 2 END AS tier,"
    " CASE WHEN r.perf = 'request' THEN 'directed_request' ELSE 'directed' END AS reason, 0 AS part"
    " FROM r CROSS JOIN json_each(r.directed) d JOIN local_agents a ON a.agent_id = d.value"
    f" WHERE d.value != r.author AND {may_read_sql('r.space', 'd.value')}"  # an entry of a space: its readers only
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
    f"  AND {may_read_sql('r.space', 's.agent_id')}"
    "   AND (s.n_types = 0 OR EXISTS (SELECT 1 FROM subscription_terms t"
    "        WHERE t.dim = 'type' AND t.value = r.type AND t.sub_id = s.id))"
    "   AND (s.n_perfs = 0 OR EXISTS (SELECT 1 FROM subscription_terms t"
    "        WHERE t.dim = 'perf' AND t.value = r.perf AND t.sub_id = s.id))"
    "   AND (s.n_spaces = 0 OR EXISTS (SELECT 1 FROM json_each(s.spaces) j WHERE j.value = r.space))"
    "   AND (s.n_authors = 0 OR EXISTS (SELECT 1 FROM subscription_terms t"
    "        WHERE t.dim = 'author' AND t.value = r.author AND t.sub_id = s.id))"
    "   AND (s.n_tags = 0 OR EXISTS (SELECT 1 FROM subscription_terms t JOIN entry_tags et"
    "        ON et.entry_id = r.eid AND et.tag = t.value WHERE t.dim = 'tag' AND t.sub_id = s.id))"
    "   AND (s.directed = 0 OR EXISTS (SELECT 1 FROM entry_directed d"
    "        WHERE d.entry_id = r.eid AND d.agent_id = s.agent_id))"
    " GROUP BY r.eid, s.agent_id"
)


# The same three on PostgreSQL (docs/decisions.md records 50 and 76): jsonb_array_elements for json_each, `->>`
# yields text there (cast where a number is meant), a NULL subscription typed for the UNION. Kept in step with the
# SQLite statements above: tests/node/inbox/test_store.py runs one story on both engines and compares the rows.
_RUN_PG = (
    "WITH r AS (SELECT (v ->> 0)::bigint AS eid, v ->> 1 AS author, v ->> 2 AS type, v ->> 3 AS perf,"
    " v -> 4 AS tags, v -> 5 AS directed, (v ->> 6)::bigint AS sim, v ->> 7 AS space"
    " FROM jsonb_array_elements(CAST(:run AS jsonb)) AS j(v))"
)
_DIRECTED_PG = (
    "SELECT d.value AS agent_id, r.eid AS eid, NULL::bigint AS sub,"
    " CASE WHEN r.perf = 'request' THEN 1 ELSE 2 END AS tier,"
    " CASE WHEN r.perf = 'request' THEN 'directed_request' ELSE 'directed' END AS reason, 0 AS part"
    " FROM r CROSS JOIN jsonb_array_elements_text(r.directed) AS d(value)"
    " JOIN local_agents a ON a.agent_id = d.value"
    f" WHERE d.value != r.author AND {may_read_sql('r.space', 'd.value')}"
)
_SUBSCRIBED_PG = (
    "SELECT s.agent_id AS agent_id, r.eid AS eid, MIN(s.id) AS sub, 2 AS tier, 'subscription' AS reason, 1 AS part"
    " FROM r CROSS JOIN subscriptions s"
    " WHERE s.id IN (SELECT sub_id FROM subscription_terms WHERE dim = 'type' AND value = r.type"
    "   UNION ALL SELECT sub_id FROM subscription_terms WHERE dim = 'perf' AND value = r.perf"
    "   UNION ALL SELECT sub_id FROM subscription_terms WHERE dim = 'author' AND value = r.author"
    "   UNION ALL SELECT t.sub_id FROM jsonb_array_elements_text(r.tags) AS j(value) JOIN subscription_terms t"
    "     ON t.dim = 'tag' AND t.value = j.value"
    "   UNION ALL SELECT id FROM subscriptions WHERE n_tags + n_types + n_perfs + n_authors = 0)"
    "   AND s.agent_id != r.author AND r.sim = 0"
    f"  AND {may_read_sql('r.space', 's.agent_id')}"
    "   AND (s.n_types = 0 OR EXISTS (SELECT 1 FROM subscription_terms t"
    "        WHERE t.dim = 'type' AND t.value = r.type AND t.sub_id = s.id))"
    "   AND (s.n_perfs = 0 OR EXISTS (SELECT 1 FROM subscription_terms t"
    "        WHERE t.dim = 'perf' AND t.value = r.perf AND t.sub_id = s.id))"
    "   AND (s.n_spaces = 0 OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(CAST(s.spaces AS jsonb)) AS j(value)"
    "        WHERE j.value = r.space))"
    "   AND (s.n_authors = 0 OR EXISTS (SELECT 1 FROM subscription_terms t"
    "        WHERE t.dim = 'author' AND t.value = r.author AND t.sub_id = s.id))"
    "   AND (s.n_tags = 0 OR EXISTS (SELECT 1 FROM subscription_terms t JOIN entry_tags et"
    "        ON et.entry_id = r.eid AND et.tag = t.value WHERE t.dim = 'tag' AND t.sub_id = s.id))"
    "   AND (s.directed = 0 OR EXISTS (SELECT 1 FROM entry_directed d"
    "        WHERE d.entry_id = r.eid AND d.agent_id = s.agent_id))"
    " GROUP BY r.eid, s.agent_id"
)


def fan_out_sql(*, directed: bool, subscribed: bool, engine: str = SQLITE) -> str:
    """The one statement that notifies a run of new entries' addressees and subscribers, entry by entry in log
    order (addressees first: an agent both addressed and subscribed is notified as an addressee), in `engine`'s
    SQL."""
    pg = engine == POSTGRESQL
    chosen = (
        ((_DIRECTED_PG, directed), (_SUBSCRIBED_PG, subscribed))
        if pg
        else ((_DIRECTED, directed), (_SUBSCRIBED, subscribed))
    )
    parts = " UNION ALL ".join(sql for sql, wanted in chosen if wanted)
    if pg:
        # SQLite inserts the rows one by one, so an agent both addressed and subscribed gets the addressee's row and
        # the subscriber's finds it there (kept: not a lower tier); PostgreSQL refuses two rows of one key in one
        # INSERT, so it keeps the first of each (entry, agent) in the same order itself (and names each subquery)
        parts = f"SELECT DISTINCT ON (eid, agent_id) * FROM ({parts}) AS f ORDER BY eid, agent_id, part"
    return (
        f"{_RUN_PG if pg else _RUN} INSERT INTO notifications"
        " (agent_id, entry_id, subscription_id, tier, reason, created_ms, expires_ms)"
        f" SELECT agent_id, eid, sub, tier, reason, :now, :exp FROM ({parts}){' AS d' if pg else ''}"
        " WHERE true ORDER BY eid, part, agent_id" + _ON_CONFLICT
    )


def fan_out_txn(conn: Conn, run: str, now_ms: int, expires_ms: int, *, directed: bool, subscribed: bool) -> None:
    """Insert (or upgrade) the notifications of a run of new entries, in one statement (`fan_out_sql`).

    `run` is the JSON array `_RUN` reads: [entry_id, author, type, performative, tags, directed_to, simulation]
    per entry, in log order."""
    sql = fan_out_sql(directed=directed, subscribed=subscribed, engine=engine_of(conn))
    if engine_of(conn) == POSTGRESQL:  # its strings meet text columns, escaped there (docs/decisions.md record 84)
        run = escape_json_strings(run)
    conn.execute(sql, {"run": run, "now": now_ms, "exp": expires_ms})


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
    f"  AND {may_read_sql('s.space', 't.author_id')} AND {may_read_sql('l.space', 't.author_id')}"
)


# CONTRADICTIONS_SQL on PostgreSQL: `= ANY` for json_each, no planner hint.
CONTRADICTIONS_SQL_PG = (
    "SELECT t.author_id, s.id FROM links l"
    " JOIN entries t ON t.record_hash = l.target_hash"
    " JOIN entries s ON s.record_hash = l.source_hash"
    " JOIN local_agents a ON a.agent_id = t.author_id"
    " WHERE (l.origin_hash = ANY(:h) OR l.source_hash = ANY(:h) OR l.target_hash = ANY(:h))"
    "   AND l.link_type = 'contradicts' AND t.author_id != l.author_id AND s.truth_state != 'simulation'"
    f"  AND {may_read_sql('s.space', 't.author_id')} AND {may_read_sql('l.space', 't.author_id')}"
)


def contradicted(conn: Conn, arrived_hashes: str) -> list[Any]:
    """(author to notify, contradicting entry id) of each contradicts link the records `arrived_hashes` (a JSON
    array of record hashes) complete."""
    if engine_of(conn) == POSTGRESQL:
        return conn.execute(CONTRADICTIONS_SQL_PG, {"h": json.loads(arrived_hashes)}).fetchall()
    return conn.execute(CONTRADICTIONS_SQL, {"h": arrived_hashes}).fetchall()


def upsert_notifications_txn(conn: Conn, rows: list[tuple[str, int, int, str, int, int]]) -> None:
    """Insert notifications (agent_id, entry_id, tier, reason, created_ms, expires_ms), or upgrade the agent's
    notification of that entry to a lower tier."""
    conn.executemany(_UPSERT, rows)


# The state changes a poll makes before it picks its page: notifications past their expiry, any agent's (found
# by notifications_expiry, so only those are visited), and the agent's leases lapsed MAX_ATTEMPTS times (an
# agent's leased notifications are few).
EXPIRE_SQL = "UPDATE notifications SET status = 'expired' WHERE status IN ('pending', 'leased') AND expires_ms <= :now"
EXPIRED_WAITING_SQL = (
    "SELECT EXISTS (SELECT 1 FROM notifications WHERE status IN ('pending', 'leased') AND expires_ms <= :now)"
)


def expire_txn(conn: Conn, now_ms: int) -> int:
    """Mark every agent's notifications past their expiry `expired`; how many."""
    return conn.execute(EXPIRE_SQL, {"now": now_ms}).rowcount


def expired_waiting(conn: Conn, now_ms: int) -> bool:
    """Whether some pending or leased notification is past its expiry (a seek on the partial expiry index)."""
    return bool(conn.execute(EXPIRED_WAITING_SQL, {"now": now_ms}).fetchone()[0])


FAIL_SQL = (
    "UPDATE notifications SET status = 'failed'"
    " WHERE agent_id = :agent AND status = 'leased' AND next_attempt_ms <= :now AND attempt_count >= :attempts"
)
# The envelope of a notification `n` of entry `e`, as columns (INBOX_SQL's page, and node/push's scan), with
# ENVELOPE_JOINS. A notice of a redaction (`n.redaction` set, migration 0042) has no entry: its envelope names the
# dropped entry's id, and the tombstone `t` gives its hash, author, created_at and space; nothing of the body.
ENVELOPE_COLUMNS = (
    "n.id AS notification_id, n.tier, n.reason, n.attempt_count, n.entry_id AS entry_id, n.redaction,"
    "   coalesce(e.record_hash, t.hash) AS record_hash, coalesce(e.space, t.space) AS space,"
    "   coalesce(e.author_id, t.author_id) AS author_id, coalesce(e.created_at, t.created_at) AS created_at,"
    "   coalesce(e.entry_type, '') AS entry_type, coalesce(e.performative, '') AS performative,"
    "   coalesce(e.tags, '[]') AS tags, coalesce(e.confidence, 0.0) AS confidence,"
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
# ENVELOPE_COLUMNS on PostgreSQL (record 50): json_agg in the page's order, as text (NULL over no links, which
# the envelope reads as []), no planner hint, the subquery named.
ENVELOPE_COLUMNS_PG = (
    ENVELOPE_COLUMNS.replace("(SELECT json_group_array(h) FROM (", "(SELECT json_agg(h ORDER BY part, o)::text FROM (")
    .replace("AND +l.link_type = 'contradicts'", "AND l.link_type = 'contradicts'")
    .replace("ORDER BY part, o LIMIT 100)) AS link_targets", "ORDER BY part, o LIMIT 100) x) AS link_targets")
)
# The tables ENVELOPE_COLUMNS reads, after `notifications n`: a notification's entry, or a notice's tombstone.
ENVELOPE_JOINS = (
    " LEFT JOIN entries e ON e.id = n.entry_id AND n.redaction IS NULL"
    " LEFT JOIN redactions r ON r.hash = n.redaction LEFT JOIN tombstones t ON t.hash = r.target"
)
# Which of those rows are shown: a notice, or a notification whose entry is in the `entries` projection (an entry
# flagged void, by a key event or a space's vouched set, is switched out of it, and its notifications with it).
ENVELOPE_SHOWN = "(e.id IS NOT NULL OR n.redaction IS NOT NULL)"


# One page of an agent's deliverable notifications with their envelopes. The page is chosen first, from
# notifications_agent_status in (tier, id) order (a pending and a lapsed-lease branch, merged), so a poll reads
# `limit` rows whatever the agent's backlog; the envelope columns, with their subqueries, are computed for the
# page only (selected with the filter, SQLite computed them for every deliverable row before sorting).
def _inbox_sql(in_space: str = "", *, pg: bool = False) -> str:
    """INBOX_SQL, with `in_space` (a condition on a notification) added to both branches of the page's choice; `pg`:
    in PostgreSQL's SQL (each subquery named, the optional :since typed)."""
    since = (
        "(CAST(:since AS bigint) IS NULL OR created_ms >= :since)" if pg else "(:since IS NULL OR created_ms >= :since)"
    )
    first, second = (" a", " b") if pg else ("", "")
    return (
        "SELECT " + (ENVELOPE_COLUMNS_PG if pg else ENVELOPE_COLUMNS) + " FROM ("
        "   SELECT id, tier FROM (SELECT id, tier FROM notifications"
        f"     WHERE agent_id = :agent AND status = 'pending' AND {since}"
        f"    {in_space} ORDER BY tier, id LIMIT :limit){first}"
        "   UNION ALL"
        "   SELECT id, tier FROM (SELECT id, tier FROM notifications"
        "     WHERE agent_id = :agent AND status = 'leased' AND next_attempt_ms <= :now"
        f"       AND {since}"
        f"    {in_space} ORDER BY tier, id LIMIT :limit){second}"
        "   ORDER BY tier, id LIMIT :limit) p"
        " JOIN notifications n ON n.id = p.id" + ENVELOPE_JOINS + " WHERE " + ENVELOPE_SHOWN + " ORDER BY p.tier, p.id"
    )


INBOX_SQL = _inbox_sql()
# A poll of one space's notifications (`InboxQuery.space`): the same page, of entries of that space only (and the
# notices of redactions of that space's entries).
_IN_SPACE = (
    "AND (entry_id IN (SELECT id FROM entries WHERE space = :space)"
    " OR redaction IN (SELECT hash FROM redactions WHERE space = :space))"
)
INBOX_SPACE_SQL = _inbox_sql(_IN_SPACE)
INBOX_SQL_PG, INBOX_SPACE_SQL_PG = _inbox_sql(pg=True), _inbox_sql(_IN_SPACE, pg=True)


# Whether the agent has anything a poll would lease or fail: a pending notification, or a leased one whose lease
# has lapsed. Both are seeks on notifications_agent_status; an empty inbox is answered from this read alone.
DELIVERABLE_SQL = (
    "SELECT EXISTS (SELECT 1 FROM notifications WHERE agent_id = :agent AND status = 'pending')"
    " OR EXISTS (SELECT 1 FROM notifications WHERE agent_id = :agent AND status = 'leased' AND next_attempt_ms <= :now)"
)


def has_deliverable(conn: Conn, agent_id: str, now_ms: int) -> bool:
    """Whether a poll would lease, deliver or fail any of the agent's notifications now."""
    return bool(conn.execute(DELIVERABLE_SQL, {"agent": agent_id, "now": now_ms}).fetchone()[0])


def fail_lapsed_txn(conn: Conn, agent_id: str, now_ms: int, max_attempts: int) -> None:
    """Mark the agent's leased notifications whose lease lapsed after `max_attempts` attempts `failed`."""
    conn.execute(FAIL_SQL, {"agent": agent_id, "now": now_ms, "attempts": max_attempts})


def inbox_page(
    conn: Conn, agent_id: str, now_ms: int, since_ms: int | None, limit: int, space: str | None = None
) -> list[Any]:
    """Up to `limit` of the agent's deliverable notifications with their envelopes (`INBOX_SQL`); of entries of
    `space` only, when given (`INBOX_SPACE_SQL`)."""
    params = {"agent": agent_id, "now": now_ms, "since": since_ms, "limit": limit, "space": space}
    if engine_of(conn) == POSTGRESQL:
        return conn.execute(INBOX_SQL_PG if space is None else INBOX_SPACE_SQL_PG, params).fetchall()
    return conn.execute(INBOX_SQL if space is None else INBOX_SPACE_SQL, params).fetchall()


def deliver_txn(conn: Conn, ids: list[int], now_ms: int) -> None:
    """Mark the notifications `ids` delivered at `now_ms`, counting the attempt."""
    test, listed = any_of(conn, ids)
    conn.execute(
        "UPDATE notifications SET status = 'delivered', delivered_ms = ?, attempt_count = attempt_count + 1"
        f" WHERE id {test}",
        (now_ms, listed),
    )


def lease_txn(conn: Conn, ids: list[int], until_ms: int) -> None:
    """Lease the notifications `ids` until `until_ms`, counting the attempt."""
    test, listed = any_of(conn, ids)
    conn.execute(
        "UPDATE notifications SET status = 'leased', next_attempt_ms = ?, attempt_count = attempt_count + 1"
        f" WHERE id {test}",
        (until_ms, listed),
    )


def ack_txn(conn: Conn, agent_id: str, ids: list[int], now_ms: int) -> int:
    """Mark the agent's own pending or leased notifications delivered; return how many changed."""
    test, listed = any_of(conn, ids)
    cur = conn.execute(
        "UPDATE notifications SET status = 'delivered', delivered_ms = ?"
        f" WHERE agent_id = ? AND status IN ('pending', 'leased') AND id {test}",
        (now_ms, agent_id, listed),
    )
    return cur.rowcount


def seen_by(conn: Conn, entry_ids: list[int]) -> list[tuple[str, int]]:
    """(agent, entry id) of each agent whose notification of one of the entries `entry_ids` reached it (leased or
    delivered at least once), the first such entry per agent: those a redaction of them tells."""
    test, listed = any_of(conn, entry_ids)
    rows = conn.execute(
        f"SELECT agent_id, min(entry_id) FROM notifications WHERE entry_id {test}"
        " AND redaction IS NULL AND (status IN ('leased', 'delivered') OR attempt_count > 0)"
        " GROUP BY agent_id ORDER BY agent_id",
        (listed,),
    ).fetchall()
    return [(str(r[0]), int(r[1])) for r in rows]


def insert_notices_txn(conn: Conn, seen: list[tuple[str, int]], redaction: str, now_ms: int, expires_ms: int) -> None:
    """Tell each (agent, dropped entry id) of `seen` that the entry was redacted by `redaction`: a pending notice of
    reason `redacted`, tier 1 (their copies should go). Its id is a new one (AUTOINCREMENT, migration 0049): a notice
    never takes the id of the notification it replaces (a client keeping ids, or the push dispatcher's cursor, would
    take it for one already seen)."""
    conn.executemany(
        "INSERT INTO notifications (agent_id, entry_id, subscription_id, tier, reason, created_ms, expires_ms,"
        " redaction) VALUES (?, ?, NULL, 1, 'redacted', ?, ?, ?)",
        [(agent, entry_id, now_ms, expires_ms, redaction) for agent, entry_id in seen],
    )


def forget_notices_txn(conn: Conn, redactions: list[str]) -> None:
    """Delete the notices of `redactions` (they became void: the entry is shown again, and its append notifies its
    subscribers afresh)."""
    test, listed = any_of(conn, redactions)
    conn.execute(f"DELETE FROM notifications WHERE redaction {test}", (listed,))


def repoint_notices_txn(conn: Conn, void: str, holding: str) -> None:
    """Make the notices of the redaction `void` name `holding`, another redaction of the same entry that still holds
    (their envelope reads the tombstone through the redaction they name)."""
    conn.execute("UPDATE notifications SET redaction = ? WHERE redaction = ?", (holding, void))


# ---- subscriptions --------------------------------------------------------------------------------------------


def subscription_by_filter(conn: Conn, agent_id: str, filter_key: str) -> Any:
    """The agent's subscription with this filter key, or None."""
    return conn.execute(
        "SELECT * FROM subscriptions WHERE agent_id = ? AND filter_key = ?", (agent_id, filter_key)
    ).fetchone()


def subscription_count(conn: Conn, agent_id: str) -> int:
    """How many subscriptions the agent holds."""
    return int(conn.execute("SELECT count(*) FROM subscriptions WHERE agent_id = ?", (agent_id,)).fetchone()[0])


def insert_subscription_txn(
    conn: Conn, agent_id: str, dims: dict[str, list[str]], filter_key: str, directed: bool, now_ms: int
) -> int:
    """Store a subscription (its filter's dimensions, and one `subscription_terms` row per value); its id."""
    sub_id = int(
        conn.execute(
            "INSERT INTO subscriptions (agent_id, filter_key, tags, entry_types, performatives, authors, directed,"
            " n_tags, n_types, n_perfs, n_authors, created_ms, spaces, n_spaces)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " RETURNING id",
            (
                agent_id,
                filter_key,
                json.dumps(dims["tags"]),
                json.dumps(dims["entry_types"]),
                json.dumps(dims["performatives"]),
                json.dumps(dims["authors"]),
                int(directed),
                len(dims["tags"]),
                len(dims["entry_types"]),
                len(dims["performatives"]),
                len(dims["authors"]),
                now_ms,
                json.dumps(dims["spaces"]),
                len(dims["spaces"]),
            ),
        ).fetchone()[0]
    )
    terms = (
        [(sub_id, "tag", v) for v in dims["tags"]]
        + [(sub_id, "type", v) for v in dims["entry_types"]]
        + [(sub_id, "perf", v) for v in dims["performatives"]]
        + [(sub_id, "author", v) for v in dims["authors"]]
    )
    conn.executemany("INSERT INTO subscription_terms (sub_id, dim, value) VALUES (?, ?, ?)", terms)
    return sub_id


def subscription(conn: Conn, sub_id: int) -> Any:
    """The subscription `sub_id`, or None."""
    return conn.execute("SELECT * FROM subscriptions WHERE id = ?", (sub_id,)).fetchone()


def agent_subscriptions(conn: Conn, agent_id: str) -> list[Any]:
    """The agent's subscriptions, oldest first."""
    return conn.execute("SELECT * FROM subscriptions WHERE agent_id = ? ORDER BY id", (agent_id,)).fetchall()


def delete_subscription_txn(conn: Conn, agent_id: str, sub_id: int) -> int:
    """Delete the agent's subscription `sub_id`; how many rows went (0 or 1)."""
    return conn.execute("DELETE FROM subscriptions WHERE id = ? AND agent_id = ?", (sub_id, agent_id)).rowcount
