"""Working memory: one local SQLite file per agent.

- events: append-only ground truth (decisions, engagements, actions, malformed output). Compaction deletes
  ordinary events older than `compact_after_days`; audit events (AUDIT_KINDS) are kept forever.
- pending_notifications: the local queue of inbox envelopes (stored before they are acknowledged on the node).
- thread_summaries: one summary per thread cluster (a root entry and what links to it; an orphan entry is its
  own cluster), with access tracking and dual decay (see `relevance`).
- own_entries: what this agent posted (to recognise replies to and contradictions of its own entries).
- agent_actions: the outbound audit trail, one row per operation, unique by idempotency key.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec

from wire.api import Envelope

AUDIT_KINDS = frozenset({"action", "malformed_output", "compaction", "engaged"})
DAY_S = 86_400
MAX_SUMMARY_CHARS = 1200

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    audit INTEGER NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_kind ON events (kind, ts);
CREATE INDEX IF NOT EXISTS events_compact ON events (audit, ts);
CREATE TABLE IF NOT EXISTS pending_notifications (
    notification_id INTEGER PRIMARY KEY,
    entry_id INTEGER NOT NULL,
    record_hash TEXT NOT NULL,
    envelope TEXT NOT NULL,
    tier INTEGER NOT NULL,
    score REAL NOT NULL DEFAULT 0,
    features TEXT NOT NULL DEFAULT '{}',
    received REAL NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'engaged', 'dismissed'))
);
CREATE INDEX IF NOT EXISTS pending_status ON pending_notifications (status, tier, score);
CREATE TABLE IF NOT EXISTS thread_summaries (
    thread_id TEXT PRIMARY KEY,
    summary TEXT NOT NULL,
    members TEXT NOT NULL,
    tags TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    last_access REAL NOT NULL,
    access_count INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS thread_members (
    record_hash TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL REFERENCES thread_summaries (thread_id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS thread_members_thread ON thread_members (thread_id);
CREATE TABLE IF NOT EXISTS own_entries (
    record_hash TEXT PRIMARY KEY,
    entry_id INTEGER NOT NULL,
    posted REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS agent_actions (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    op TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    request TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
    result TEXT NOT NULL
);
"""


class WorkingMemory:
    """The agent's local SQLite memory. `clock` returns epoch seconds (injectable for tests)."""

    def __init__(
        self,
        path: Path | str,
        clock: Callable[[], float] = time.time,
        *,
        time_half_life_h: float = 72.0,
        access_half_life_h: float = 24.0,
        access_weight: float = 0.5,
    ) -> None:
        self.path = Path(path)
        self.clock = clock
        self.time_half_life_s = time_half_life_h * 3600
        self.access_half_life_s = access_half_life_h * 3600
        self.access_weight = access_weight
        self.conn = sqlite3.connect(self.path, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.executescript(SCHEMA)

    def close(self) -> None:
        self.conn.close()

    # ---- events ---------------------------------------------------------------------------------------

    def record(self, kind: str, **payload: Any) -> int:
        """Append one event."""
        with self.conn:
            cur = self.conn.execute(
                "INSERT INTO events (ts, kind, audit, payload) VALUES (?, ?, ?, ?)",
                (self.clock(), kind, int(kind in AUDIT_KINDS), json.dumps(payload, sort_keys=True, default=str)),
            )
        return int(cur.lastrowid or 0)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Events oldest first, each as {"id", "ts", "kind", **payload}."""
        sql = "SELECT id, ts, kind, payload FROM events" + (" WHERE kind = ?" if kind else "") + " ORDER BY id"
        rows = self.conn.execute(sql, (kind,) if kind else ()).fetchall()
        return [{"id": r["id"], "ts": r["ts"], "kind": r["kind"], **json.loads(r["payload"])} for r in rows]

    def compact(self, older_than_days: int = 90) -> int:
        """Delete ordinary events older than the horizon (audit events stay); record and return how many."""
        cutoff = self.clock() - older_than_days * DAY_S
        with self.conn:
            cur = self.conn.execute("DELETE FROM events WHERE audit = 0 AND ts < ?", (cutoff,))
            removed = cur.rowcount
        self.record("compaction", removed=removed, older_than_days=older_than_days)
        return removed

    # ---- pending notifications ------------------------------------------------------------------------

    def enqueue(self, envelopes: Iterable[Envelope], tiers: dict[int, int]) -> list[int]:
        """Store envelopes (once each); return the notification ids that were new."""
        now = self.clock()
        fresh: list[int] = []
        with self.conn:
            for env in envelopes:
                cur = self.conn.execute(
                    "INSERT INTO pending_notifications (notification_id, entry_id, record_hash, envelope, tier,"
                    " received) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (notification_id) DO NOTHING",
                    (
                        env.notification_id,
                        env.entry_id,
                        env.record_hash,
                        msgspec.json.encode(env).decode(),
                        tiers[env.notification_id],
                        now,
                    ),
                )
                if cur.rowcount:
                    fresh.append(env.notification_id)
        return fresh

    def set_scores(self, scores: dict[int, tuple[float, dict[str, float]]]) -> None:
        with self.conn:
            self.conn.executemany(
                "UPDATE pending_notifications SET score = ?, features = ? WHERE notification_id = ?",
                [(score, json.dumps(features), nid) for nid, (score, features) in scores.items()],
            )

    def pending(self, tier: int | None = None) -> list[tuple[Envelope, float]]:
        """Pending envelopes with their scores, tier 1 first, then by score (highest first)."""
        sql = "SELECT envelope, score FROM pending_notifications WHERE status = 'pending'"
        args: tuple[Any, ...] = ()
        if tier is not None:
            sql, args = sql + " AND tier = ?", (tier,)
        rows = self.conn.execute(sql + " ORDER BY tier, score DESC, notification_id", args).fetchall()
        return [(msgspec.json.decode(r["envelope"], type=Envelope), r["score"]) for r in rows]

    def mark(self, notification_ids: Iterable[int], status: str = "engaged") -> None:
        """Take notifications off the queue: 'engaged' (shown to the model) or 'dismissed'."""
        with self.conn:
            self.conn.executemany(
                "UPDATE pending_notifications SET status = ? WHERE notification_id = ?",
                [(status, i) for i in notification_ids],
            )

    def dismiss_older_than(self, seconds: float) -> int:
        """Hygiene: batched notifications that never reached the threshold within `seconds` are dismissed."""
        with self.conn:
            cur = self.conn.execute(
                "UPDATE pending_notifications SET status = 'dismissed' WHERE status = 'pending' AND received < ?",
                (self.clock() - seconds,),
            )
        return cur.rowcount

    # ---- own entries ----------------------------------------------------------------------------------

    def remember_own(self, record_hash: str, entry_id: int) -> None:
        with self.conn:
            self.conn.execute(
                "INSERT INTO own_entries (record_hash, entry_id, posted) VALUES (?, ?, ?)"
                " ON CONFLICT (record_hash) DO NOTHING",
                (record_hash, entry_id, self.clock()),
            )

    def own_hashes(self) -> set[str]:
        return {r[0] for r in self.conn.execute("SELECT record_hash FROM own_entries")}

    # ---- thread summaries -----------------------------------------------------------------------------

    def thread_of(self, record_hashes: Iterable[str]) -> str | None:
        """The thread that already holds any of these entries, if one does."""
        hashes = list(record_hashes)
        if not hashes:
            return None
        row = self.conn.execute(
            "SELECT thread_id FROM thread_members WHERE record_hash IN (SELECT value FROM json_each(?)) LIMIT 1",
            (json.dumps(hashes),),
        ).fetchone()
        return str(row[0]) if row else None

    def note_entry(self, record_hash: str, linked: Iterable[str], line: str, tags: Iterable[str]) -> str:
        """Fold an entry into its thread's summary: the thread of an entry it links to, else its own (orphan).

        The summary is extractive (one line per entry, newest kept when over MAX_SUMMARY_CHARS); the model's
        own synthesis is posted to the board, not kept here.
        """
        now = self.clock()
        thread = self.thread_of([record_hash]) or self.thread_of(linked) or record_hash
        row = self.conn.execute("SELECT summary, tags FROM thread_summaries WHERE thread_id = ?", (thread,)).fetchone()
        with self.conn:
            if row is None:
                self.conn.execute(
                    "INSERT INTO thread_summaries (thread_id, summary, members, tags, created, updated, last_access)"
                    " VALUES (?, ?, '[]', ?, ?, ?, ?)",
                    (thread, line[:MAX_SUMMARY_CHARS], json.dumps(sorted(set(tags))), now, now, now),
                )
            else:
                known = self.conn.execute(
                    "SELECT 1 FROM thread_members WHERE record_hash = ?", (record_hash,)
                ).fetchone()
                summary = row["summary"] if known else (row["summary"] + "\n" + line)
                if len(summary) > MAX_SUMMARY_CHARS:
                    summary = "...\n" + summary[-(MAX_SUMMARY_CHARS - 4) :].split("\n", 1)[-1]
                merged = sorted(set(json.loads(row["tags"])) | set(tags))
                self.conn.execute(
                    "UPDATE thread_summaries SET summary = ?, tags = ?, updated = ? WHERE thread_id = ?",
                    (summary, json.dumps(merged), now, thread),
                )
            self.conn.execute(
                "INSERT INTO thread_members (record_hash, thread_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                (record_hash, thread),
            )
            self.conn.execute(
                "UPDATE thread_summaries SET members = (SELECT json_group_array(record_hash) FROM thread_members"
                " WHERE thread_id = ?) WHERE thread_id = ?",
                (thread, thread),
            )
        return thread

    def relevance(self, updated: float, last_access: float, access_count: int, now: float | None = None) -> float:
        """Dual decay: 0.5^(age/time half-life) + access_weight x ln(1 + accesses) x 0.5^(idle/access half-life).

        A thread fades as it ages; reading it brings it back, and that boost fades in turn when it is not read.
        """
        now = self.clock() if now is None else now
        by_time = 0.5 ** (max(0.0, now - updated) / self.time_half_life_s)
        by_access = math.log1p(access_count) * 0.5 ** (max(0.0, now - last_access) / self.access_half_life_s)
        return by_time + self.access_weight * by_access

    def summaries(self, limit: int = 10, touching: Iterable[str] = ()) -> list[dict[str, Any]]:
        """The most relevant thread summaries, those holding any of `touching` first; reading counts as access."""
        now = self.clock()
        rows = self.conn.execute("SELECT * FROM thread_summaries").fetchall()
        hot = {
            r[0]
            for r in self.conn.execute(
                "SELECT DISTINCT thread_id FROM thread_members WHERE record_hash IN (SELECT value FROM json_each(?))",
                (json.dumps(sorted(set(touching))),),
            )
        }
        ranked = sorted(
            rows,
            key=lambda r: (
                r["thread_id"] not in hot,
                -self.relevance(r["updated"], r["last_access"], r["access_count"], now),
            ),
        )[:limit]
        with self.conn:
            self.conn.executemany(
                "UPDATE thread_summaries SET access_count = access_count + 1, last_access = ? WHERE thread_id = ?",
                [(now, r["thread_id"]) for r in ranked],
            )
        return [
            {
                "thread_id": r["thread_id"],
                "summary": r["summary"],
                "tags": json.loads(r["tags"]),
                "touching": r["thread_id"] in hot,
                "relevance": self.relevance(r["updated"], r["last_access"], r["access_count"], now),
            }
            for r in ranked
        ]

    def forget(self, below: float) -> int:
        """Drop thread summaries whose relevance decayed under `below` (hygiene); return how many."""
        now = self.clock()
        rows = self.conn.execute("SELECT thread_id, updated, last_access, access_count FROM thread_summaries")
        gone = [
            r["thread_id"]
            for r in rows.fetchall()
            if self.relevance(r["updated"], r["last_access"], r["access_count"], now) < below
        ]
        with self.conn:
            self.conn.executemany("DELETE FROM thread_summaries WHERE thread_id = ?", [(t,) for t in gone])
        return len(gone)

    def forget_redacted(self, record_hash: str) -> int:
        """Drop every copy of a redacted entry (a notice of reason `redacted`): the thread summary it is a member of
        (its lines are not kept per entry, so the whole summary goes, its members with it) and the queued
        notifications of it. Returns the summaries dropped."""
        with self.conn:
            gone = self.conn.execute(
                "DELETE FROM thread_summaries WHERE thread_id IN"
                " (SELECT thread_id FROM thread_members WHERE record_hash = ?)",
                (record_hash,),
            ).rowcount
            self.conn.execute("DELETE FROM pending_notifications WHERE record_hash = ?", (record_hash,))
        return int(gone)

    def thread_count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM thread_summaries").fetchone()[0])

    # ---- outbound audit -------------------------------------------------------------------------------

    def action_done(self, key: str) -> dict[str, Any] | None:
        """The recorded successful result for an idempotency key, if the action already ran."""
        row = self.conn.execute(
            "SELECT result FROM agent_actions WHERE idempotency_key = ? AND status = 'ok'", (key,)
        ).fetchone()
        return json.loads(row[0]) if row else None

    def record_action(self, op: str, key: str, request: Any, status: str, result: Any) -> None:
        """Record an outbound operation (a retried failure is overwritten by its later outcome)."""
        with self.conn:
            self.conn.execute(
                "INSERT INTO agent_actions (ts, op, idempotency_key, request, status, result)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (idempotency_key) DO UPDATE SET"
                " ts = excluded.ts, status = excluded.status, result = excluded.result",
                (self.clock(), op, key, json.dumps(request, default=str), status, json.dumps(result, default=str)),
            )
        self.record("action", op=op, idempotency_key=key, status=status)

    def actions(self) -> list[dict[str, Any]]:
        rows = self.conn.execute("SELECT * FROM agent_actions ORDER BY id").fetchall()
        return [{**dict(r), "request": json.loads(r["request"]), "result": json.loads(r["result"])} for r in rows]
