"""The candidates table (node-local holding area): SQL only, run inside the node's read/write jobs."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from identity import canonical
from node.agents import refs as agent_refs
from node.default_mode.critic import Review
from node.entries import queries
from node.errors import InvalidInput, NotFound
from node.spaces.sight import PUBLIC, Sight
from node.store import idempotency
from node.store.conn import POSTGRESQL, Conn, any_of, engine_of
from wire.default_mode import CandidateOut
from wire.time import format_ms

# What default mode reads (reflection, consolidation, evidence, duplicates) when no space is asked for: the public
# federation only, for members too (docs/spaces.md, "Read paths"): a public candidate derived from a space's entries
# would carry them, and its `derived_from` links their addresses, out. Asked in a space, it reads that space and the
# public federation (`in_space`), and its candidates land in the space.
DEFAULT_MODE_SIGHT: Sight = PUBLIC


def in_space(space: str | None) -> Sight:
    """What default mode reads for a call in `space` (None: the public federation only)."""
    return DEFAULT_MODE_SIGHT if space is None else Sight(frozenset({space}))


@dataclass
class NewCandidate:
    """A candidate about to be stored."""

    kind: str
    text: str
    salience: float
    confidence: float
    evidence_refs: list[str]
    truth_state: str
    synthetic: bool
    source: str
    proposed_by: str
    tags: list[str] = field(default_factory=list)
    payload: dict[str, Any] = field(default_factory=dict)
    space: str | None = None  # the space it was proposed in (its entry is posted there); None: public


def _iso(ms: int | None) -> str | None:
    return None if ms is None else format_ms(ms)


def insert(conn: Conn, rows: list[NewCandidate], now_ms: int) -> list[int]:
    """Store candidates as `proposed`; returns their ids in order."""
    ids = []
    for c in rows:
        cur = conn.execute(
            "INSERT INTO dm_candidates (kind, text, salience, confidence, evidence_refs, truth_state, synthetic,"
            " payload, tags, source, proposed_by, created_ms, space) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " RETURNING id",
            (
                c.kind,
                c.text,
                c.salience,
                c.confidence,
                json.dumps(c.evidence_refs),
                c.truth_state,
                int(c.synthetic),
                json.dumps(c.payload, sort_keys=True),
                json.dumps(sorted(set(c.tags))),
                c.source,
                c.proposed_by,
                now_ms,
                c.space,
            ),
        )
        ids.append(int(cur.fetchone()[0]))
    return ids


def fetch(conn: Conn, ids: list[int], sight: Sight) -> list[sqlite3.Row]:
    """Candidate rows with these ids that `sight` sees (a candidate of a space: its readers), in id order."""
    test, listed = any_of(conn, ids)
    return conn.execute(
        f"SELECT * FROM dm_candidates WHERE id {test} AND {sight.sql('space', engine_of(conn))} ORDER BY id",
        (listed,),
    ).fetchall()


def page(conn: Conn, statuses: list[str], limit: int, offset: int, sight: Sight) -> list[sqlite3.Row]:
    """Candidates that `sight` sees, newest first, optionally filtered by status."""
    seen = sight.sql("space", engine_of(conn))
    if statuses:
        test, listed = any_of(conn, statuses)
        return conn.execute(
            f"SELECT * FROM dm_candidates WHERE status {test} AND {seen} ORDER BY id DESC LIMIT ? OFFSET ?",
            (listed, limit, offset),
        ).fetchall()
    return conn.execute(
        f"SELECT * FROM dm_candidates WHERE {seen} ORDER BY id DESC LIMIT ? OFFSET ?", (limit, offset)
    ).fetchall()


def proposed_ids(conn: Conn, limit: int, sight: Sight) -> list[int]:
    """The oldest `proposed` candidates awaiting the critic that `sight` sees."""
    rows = conn.execute(
        f"SELECT id FROM dm_candidates WHERE status = 'proposed' AND {sight.sql('space', engine_of(conn))}"
        " ORDER BY id LIMIT ?",
        (limit,),
    ).fetchall()
    return [int(r[0]) for r in rows]


def duplicate_of(
    conn: Conn,
    text: str,
    made_by: tuple[str, str] | None = None,
    besides: str | None = None,
    sight: Sight = DEFAULT_MODE_SIGHT,
) -> str | None:
    """The record hash of a stored entry with the same content fingerprint as `text`, or None.

    `made_by` (agent id, idempotency key) leaves out the entry that key already produced: a promotion retried
    after a crash finds its own entry, which is not a duplicate of itself. `besides` leaves out one more entry:
    the source a reflected line was read from."""
    agent_id, key = made_by or (None, None)
    engine = engine_of(conn)
    is_not = "IS DISTINCT FROM" if engine == POSTGRESQL else "IS NOT"  # SQLite's `IS NOT` (record 50)
    row = conn.execute(
        f"SELECT record_hash FROM entries WHERE content_fingerprint = ? AND {sight.sql('space', engine)}"
        f" AND record_hash {is_not} ?"
        f" AND record_hash {is_not} (SELECT record_hash FROM idempotency WHERE agent_id = ? AND idem_key = ?) LIMIT 1",
        (canonical.content_fingerprint(text), besides, agent_id, key),
    ).fetchone()
    return None if row is None else str(row[0])


def earlier_reply(conn: Conn, agent_id: str, key: str, operation: str) -> bytes | None:
    """The reply a default-mode call with this idempotency key already gave, or None if the key is unused.

    Raises 409 `idempotency_key_reused` if the agent used the key for another operation."""
    if idempotency.replayed(conn, agent_id, key, operation, field=idempotency.HEADER) is None:
        return None
    row = conn.execute("SELECT reply FROM dm_replies WHERE agent_id = ? AND idem_key = ?", (agent_id, key)).fetchone()
    return bytes(row[0])


def keep_reply(conn: Conn, agent_id: str, key: str, operation: str, reply: bytes, now_ms: int) -> None:
    """Remember the reply of a call with this key (in the transaction that stored its candidates)."""
    idempotency.remember(conn, agent_id, key, operation, "", now_ms)
    conn.execute("INSERT INTO dm_replies (agent_id, idem_key, reply) VALUES (?, ?, ?)", (agent_id, key, reply))


def apply_review(conn: Conn, candidate_id: int, review: Review, now_ms: int) -> None:
    """Write the critic's decision, flags and truth_state onto a candidate not yet promoted, rejected or decided
    by a person (a human decision stands)."""
    conn.execute(
        "UPDATE dm_candidates SET status = ?, critic_decision = ?, critic_reasons = ?, risk_flag = ?,"
        " evidence_flag = ?, truth_state = ?, reviewed_ms = ?"
        " WHERE id = ? AND status NOT IN ('promoted', 'rejected') AND decision IS NULL",
        (
            review.decision,
            review.decision,
            json.dumps(list(review.reasons)),
            int(review.risk_flag),
            int(review.evidence_flag),
            review.truth_state,
            now_ms,
            candidate_id,
        ),
    )


def decide(conn: Conn, candidate_id: int, decision: str, decided_by: str, note: str | None, now_ms: int) -> None:
    """Record a person's decision: approve -> `approved`, reject -> `rejected`; truth_state is left alone."""
    conn.execute(
        "UPDATE dm_candidates SET status = ?, decision = ?, decided_by = ?, decided_ms = ?, decision_note = ?"
        " WHERE id = ? AND status != 'promoted'",
        ("approved" if decision == "approve" else "rejected", decision, decided_by, now_ms, note, candidate_id),
    )


def mark_promoted(
    conn: Conn,
    candidate_id: int,
    entry_hash: str,
    agent_id: str,
    now_ms: int,
    requested_by: str | None = None,
) -> None:
    """Point a candidate at the entry it became (once); `requested_by` is set when the admin named the author."""
    conn.execute(
        "UPDATE dm_candidates SET status = 'promoted', promoted_hash = ?, promoted_by = ?, promoted_ms = ?,"
        " promote_requested_by = ? WHERE id = ? AND status != 'promoted'",
        (entry_hash, agent_id, now_ms, requested_by, candidate_id),
    )


def local_author(conn: Conn, ref: str) -> sqlite3.Row | None:
    """The local agent named `ref` (a local name or a did), with whether this node keeps its key; 404
    `author_not_found` for a name no agent here has."""
    try:
        did = agent_refs.resolve(conn, ref, "$.author")
    except (NotFound, InvalidInput):  # a name no agent here has, a malformed did: no such local agent
        return None
    return conn.execute(
        "SELECT agent_id, key_seed IS NOT NULL AS key_kept FROM local_agents WHERE agent_id = ?", (did,)
    ).fetchone()


# ---- what the proposing side reads (node/default_mode/proposals.py) ---------------------------------------------


def session_records(
    conn: Conn,
    session_id: str | None,
    project: str | None,
    since_ms: int | None,
    until_ms: int | None,
    cap: int,
    sight: Sight = DEFAULT_MODE_SIGHT,
) -> list[Any]:
    """What a session produced, oldest first: entries tagged session:<id> (simulations aside) and the bus
    messages of `project`, within [since, until]; at most `cap` of each."""
    window = " AND {t} >= coalesce(:since, {t}) AND {t} <= coalesce(:until, {t})"
    engine = engine_of(conn)
    named = " AS s" if engine == POSTGRESQL else ""  # PostgreSQL 15 names every subquery in FROM
    params = {"tag": f"session:{session_id}", "project": project, "since": since_ms, "until": until_ms,
              "cap": cap}  # fmt: skip
    parts = []
    if session_id is not None:
        parts.append(
            "SELECT * FROM (SELECT e.record_hash, e.content AS text, e.created_ms AS at, 0 AS part, e.id AS n"
            " FROM entry_tags t JOIN entries e ON e.id = t.entry_id"
            f" WHERE t.tag = :tag AND e.truth_state != 'simulation' AND {sight.sql('e.space', engine)}"
            + window.format(t="e.created_ms")
            + f" ORDER BY e.created_ms, e.id LIMIT :cap){named}"
        )
    if project is not None:
        parts.append(
            "SELECT * FROM (SELECT m.record_hash, m.body AS text, m.created_ms AS at, 1 AS part, m.id AS n"
            f" FROM messages m WHERE m.project = :project AND {sight.sql('m.space', engine)}"
            + window.format(t="m.created_ms")
            + f" ORDER BY m.created_ms, m.id LIMIT :cap){named}"
        )
    return conn.execute(" UNION ALL ".join(parts) + " ORDER BY at, part, n", params).fetchall()


def recent_entries(
    conn: Conn,
    limit: int,
    include_synthetic: bool,
    tags: list[str],
    since_ms: int | None,
    sight: Sight = DEFAULT_MODE_SIGHT,
) -> list[Any]:
    """The newest `limit` entries a consolidation summarises (since `since_ms`, with one of `tags` when given;
    simulations only with `include_synthetic`) that `sight` sees, newest first."""
    where = [sight.sql("e.space", engine_of(conn))]
    params: dict[str, Any] = {"limit": limit, "since": since_ms}
    if not include_synthetic:
        where.append("e.truth_state != 'simulation'")
    if since_ms is not None:
        where.append("e.created_ms >= :since")
    if tags:
        where.append(queries.tagged_any(tags, params))
    sql = (
        "SELECT e.record_hash, e.author_id, e.created_at, e.entry_type, e.performative, e.truth_state, e.tags"
        f" FROM entries e WHERE {' AND '.join(where)} ORDER BY e.id DESC LIMIT :limit"
    )
    return conn.execute(sql, params).fetchall()


def out(row: sqlite3.Row) -> CandidateOut:
    """Render a candidate row."""
    return CandidateOut(
        id=row["id"],
        kind=row["kind"],
        text=row["text"],
        salience=row["salience"],
        confidence=row["confidence"],
        evidence_refs=json.loads(row["evidence_refs"]),
        truth_state=row["truth_state"],
        synthetic=bool(row["synthetic"]),
        status=row["status"],
        critic_decision=row["critic_decision"],
        critic_reasons=json.loads(row["critic_reasons"]),
        risk_flag=None if row["risk_flag"] is None else bool(row["risk_flag"]),
        evidence_flag=None if row["evidence_flag"] is None else bool(row["evidence_flag"]),
        payload=json.loads(row["payload"]),
        tags=json.loads(row["tags"]),
        source=row["source"],
        proposed_by=row["proposed_by"],
        created_at=_iso(row["created_ms"]) or "",
        reviewed_at=_iso(row["reviewed_ms"]),
        promoted_entry=row["promoted_hash"],
        promoted_by=row["promoted_by"],
        promoted_at=_iso(row["promoted_ms"]),
        decision=row["decision"],
        decided_by=row["decided_by"],
        decided_at=_iso(row["decided_ms"]),
        decision_note=row["decision_note"],
        promote_requested_by=row["promote_requested_by"],
        space=row["space"],
    )


def forget_evidence_txn(conn: Conn, address: str) -> int:
    """Forget the candidates not promoted whose evidence names `address` (its body was redacted or purged: what a
    runtime made of it may quote it), and the remembered replies that name it, with their idempotency keys (a retry
    runs again). Returns the candidates forgotten. A full scan: redactions are rare."""
    if engine_of(conn) == POSTGRESQL:
        return _forget_evidence_pg(conn, address)
    gone = conn.execute(
        "DELETE FROM dm_candidates WHERE status != 'promoted'"
        " AND EXISTS (SELECT 1 FROM json_each(dm_candidates.evidence_refs) WHERE value = ?)",
        (address,),
    ).rowcount
    conn.execute(
        "DELETE FROM idempotency WHERE record_hash = '' AND EXISTS (SELECT 1 FROM dm_replies r"
        " WHERE r.agent_id = idempotency.agent_id AND r.idem_key = idempotency.idem_key AND instr(r.reply, ?) > 0)",
        (address,),
    )
    conn.execute("DELETE FROM dm_replies WHERE instr(reply, ?) > 0", (address,))
    return int(gone)


def _forget_evidence_pg(conn: Conn, address: str) -> int:
    """`forget_evidence_txn` on PostgreSQL (record 50): the evidence by jsonb_array_elements_text, the reply (bytea)
    searched for the address's UTF-8 bytes with `position` (no `instr` there)."""
    gone = conn.execute(
        "DELETE FROM dm_candidates WHERE status != 'promoted' AND EXISTS (SELECT 1 FROM"
        " jsonb_array_elements_text(CAST(dm_candidates.evidence_refs AS jsonb)) AS j(value) WHERE j.value = ?)",
        (address,),
    ).rowcount
    conn.execute(
        "DELETE FROM idempotency WHERE record_hash = '' AND EXISTS (SELECT 1 FROM dm_replies r"
        " WHERE r.agent_id = idempotency.agent_id AND r.idem_key = idempotency.idem_key"
        " AND position(convert_to(?, 'UTF8') IN r.reply) > 0)",
        (address,),
    )
    conn.execute("DELETE FROM dm_replies WHERE position(convert_to(?, 'UTF8') IN reply) > 0", (address,))
    return int(gone)
