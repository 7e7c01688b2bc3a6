"""The SQL of the trust feature: the signals read from the log (`links`, `entries`), and the cache beside it
(`trust_scores`, `entry_confidence`, `trust_state`).

Store functions (docs/architecture.md, "Where SQL lives"): `replace_cache_txn` writes and runs on the writer
thread; the others only read. node/trust/service.py computes the numbers and decides when a cache is stale.
"""

from __future__ import annotations

from typing import Any

from node.store.conn import Conn

# One row per distinct (endorser, target entry, polarity). UNION deduplicates. Public entries only: trust and community
# confidence are the same on every node (docs/trust.md), and nodes hold different spaces (docs/spaces.md).
SIGNALS_SQL = """
SELECT l.author_id AS endorser, t.author_id AS author, t.record_hash AS target,
       CASE l.link_type WHEN 'supports' THEN 1 ELSE -1 END AS polarity
FROM links l
JOIN entries s ON s.record_hash = l.source_hash
JOIN entries t ON t.record_hash = l.target_hash
WHERE l.link_type IN ('supports', 'contradicts') AND l.ordinal >= 0
  AND l.author_id != t.author_id AND s.truth_state != 'simulation' AND s.space IS NULL AND t.space IS NULL
  AND l.space IS NULL
  AND NOT EXISTS (SELECT 1 FROM links r WHERE r.source_hash = s.record_hash AND r.link_type = 'retracted_by')
UNION
SELECT s.author_id, t.author_id, t.record_hash,
       CASE s.performative WHEN 'confirm' THEN 1 ELSE -1 END
FROM entries s
JOIN links l ON l.source_hash = s.record_hash AND l.ordinal >= 0
    AND l.link_type NOT IN ('supersedes', 'retracted_by')
JOIN entries t ON t.record_hash = l.target_hash
WHERE s.performative IN ('confirm', 'disconfirm')
  AND s.author_id != t.author_id AND s.truth_state != 'simulation' AND s.space IS NULL AND t.space IS NULL
  AND NOT EXISTS (SELECT 1 FROM links r WHERE r.source_hash = s.record_hash AND r.link_type = 'retracted_by')
"""


def signal_rows(conn: Conn) -> list[Any]:
    """Every distinct (endorser, author, target entry, polarity) the log holds, in no particular order."""
    return conn.execute(SIGNALS_SQL).fetchall()


def log_head(conn: Conn) -> int:
    """The newest record's seq (0 for an empty log): the position a computation covers."""
    return int(conn.execute("SELECT coalesce(max(seq), 0) FROM records").fetchone()[0])


def cache_seq(conn: Conn) -> int | None:
    """The log position the stored cache covers, or None before the first refresh."""
    state = conn.execute("SELECT computed_seq FROM trust_state WHERE id = 1").fetchone()
    return None if state is None else state[0]


def agent_scores(conn: Conn, agent_id: str) -> Any:
    """The agent's cached (`confirms`, `disconfirms`, `laplace`, `score`), or None when it has no signals."""
    return conn.execute(
        "SELECT confirms, disconfirms, laplace, score FROM trust_scores WHERE agent_id = ?", (agent_id,)
    ).fetchone()


def replace_cache_txn(
    conn: Conn,
    agents: list[tuple[str, int, int, float, float, float, float]],
    entries: list[tuple[str, float, int, int]],
    head: int,
    now_ms: int,
) -> None:
    """Replace the whole cache: the agents' rows (agent_id, confirms, disconfirms, laplace, score,
    weighted_confirms, weighted_disconfirms), the entries' (entry_hash, community_confidence, confirms,
    disconfirms), and the log position `head` they were computed at."""
    conn.execute("DELETE FROM trust_scores")
    conn.execute("DELETE FROM entry_confidence")
    conn.executemany(
        "INSERT INTO trust_scores (agent_id, confirms, disconfirms, laplace, score, weighted_confirms,"
        " weighted_disconfirms) VALUES (?, ?, ?, ?, ?, ?, ?)",
        agents,
    )
    conn.executemany(
        "INSERT INTO entry_confidence (entry_hash, community_confidence, confirms, disconfirms) VALUES (?, ?, ?, ?)",
        entries,
    )
    conn.execute(
        "INSERT INTO trust_state (id, computed_seq, computed_ms) VALUES (1, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET computed_seq = excluded.computed_seq, computed_ms = excluded.computed_ms",
        (head, now_ms),
    )
