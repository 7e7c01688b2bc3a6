"""The SQL of the search index (docs/architecture.md, "Where SQL lives"): what the indexer reads of `entries` to
build and check the index, the freshness targets a search waits for, and the trust and confidence a ranking reads
in the search's own read transaction.

Every function here only reads, but `redone_txn` (the indexer's removal of the redo rows it handled). Statements
are those the modules had (docs/performance.md's search figures and
tests/node/search_index/test_freshness.py's plan check hold them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from node.store.conn import POSTGRESQL, Conn, any_of, engine_of

# The columns of an entry the index holds, in the order of node/search_index/index.py `Row`'s fields.
ROW_COLUMNS = (
    "id, record_hash, content, tags, entry_type, performative, author_id, truth_state, confidence, created_ms, space"
)

# The highest entry id, and the caller's own newest (0 without entries): two seeks, on the primary key and on
# entries_author(author_id, id) (tests/node/search_index/test_freshness.py checks the plan).
TARGETS_SQL = (
    "SELECT (SELECT coalesce(max(id), 0) FROM entries), (SELECT coalesce(max(id), 0) FROM entries WHERE author_id = ?)"
)

# ---- the indexer ----------------------------------------------------------------------------------------------------


def store_epoch(conn: Conn) -> str:
    """The store epoch (a restore reuses seqs under a new one: the index is rebuilt); "" when there is none."""
    row = conn.execute("SELECT value FROM node_meta WHERE key = 'epoch'").fetchone()
    return str(row[0]) if row else ""


def highest_entry(conn: Conn) -> int:
    """The highest entry id (0 with no entries): what a caught-up index covers."""
    return int(conn.execute("SELECT coalesce(max(id), 0) FROM entries").fetchone()[0])


def pending(conn: Conn, position: int, cap: int | None = None) -> int:
    """Entries with ids above `position` (what an index covering `position` lags behind), at most `cap` + 1."""
    if cap is None:
        return int(conn.execute("SELECT count(*) FROM entries WHERE id > ?", (position,)).fetchone()[0])
    sql = "SELECT count(*) FROM (SELECT 1 FROM entries WHERE id > ? LIMIT ?)"
    if engine_of(conn) == POSTGRESQL:  # a subquery in FROM needs a name there
        sql = "SELECT count(*) FROM (SELECT 1 FROM entries WHERE id > ? LIMIT ?) AS ahead"
    return int(conn.execute(sql, (position, cap + 1)).fetchone()[0])


def entries_after(conn: Conn, position: int, limit: int) -> list[tuple[Any, ...]]:
    """Up to `limit` entries with ids above `position`, in id order, as tuples of ROW_COLUMNS."""
    rows = conn.execute(
        f"SELECT {ROW_COLUMNS} FROM entries WHERE id > ? ORDER BY id LIMIT ?", (position, limit)
    ).fetchall()
    return [tuple(r) for r in rows]


def redo(conn: Conn, limit: int) -> tuple[int, list[str], list[tuple[Any, ...]]]:
    """Up to `limit` rows of `search_redo` (addresses a void switch changed: node/store/void.py): the last row's id
    (0 when none), the addresses, and the `entries` rows (as tuples of ROW_COLUMNS) that hold them now."""
    queued = conn.execute("SELECT id, address FROM search_redo ORDER BY id LIMIT ?", (limit,)).fetchall()
    if not queued:
        return 0, [], []
    addresses = sorted({str(r[1]) for r in queued})
    listed, param = any_of(conn, addresses)
    sql = f"SELECT {ROW_COLUMNS} FROM entries WHERE record_hash {listed} ORDER BY id"
    rows = conn.execute(sql, (param,)).fetchall()
    return int(queued[-1][0]), addresses, [tuple(r) for r in rows]


def present(conn: Conn, ids: Sequence[int]) -> set[int]:
    """Those of these entry ids that `entries` holds (the others were dropped: redacted, purged, made void)."""
    listed, param = any_of(conn, ids)
    rows = conn.execute(f"SELECT id FROM entries WHERE id {listed}", (param,))
    return {int(r[0]) for r in rows}


def logged(conn: Conn, ids: Sequence[int]) -> set[int]:
    """Those of these log positions whose record the log still holds (an entry made void is still there; a version
    redacted, purged or evicted is not: its bytes must leave the disk)."""
    listed, param = any_of(conn, ids)
    rows = conn.execute(f"SELECT seq FROM records WHERE seq {listed}", (param,))
    return {int(r[0]) for r in rows}


def entries_at(conn: Conn, ids: Sequence[int]) -> list[tuple[Any, ...]]:
    """The entries with these ids (those `entries` holds), in id order, as tuples of ROW_COLUMNS."""
    listed, param = any_of(conn, ids)
    rows = conn.execute(f"SELECT {ROW_COLUMNS} FROM entries WHERE id {listed} ORDER BY id", (param,)).fetchall()
    return [tuple(r) for r in rows]


def redo_count(conn: Conn) -> int:
    """Rows of `search_redo` the indexer has not handled yet."""
    return int(conn.execute("SELECT count(*) FROM search_redo").fetchone()[0])


def redone_txn(conn: Conn, last_id: int) -> None:
    """Remove the rows of `search_redo` up to `last_id`: the indexer committed their documents."""
    conn.execute("DELETE FROM search_redo WHERE id <= ?", (last_id,))


def covered(conn: Conn, position: int) -> int:
    """Entries with ids up to `position` (the documents an index at `position` holds)."""
    return int(conn.execute("SELECT count(*) FROM entries WHERE id <= ?", (position,)).fetchone()[0])


def sample(conn: Conn, position: int, size: int) -> list[tuple[int, str]]:
    """(id, record_hash) of up to `size` entries with ids up to `position`, chosen at random."""
    rows = conn.execute(
        "SELECT id, record_hash FROM entries WHERE id <= ? ORDER BY random() LIMIT ?", (position, size)
    ).fetchall()
    return [(int(seq), str(record_hash)) for seq, record_hash in rows]


# ---- freshness ----------------------------------------------------------------------------------------------------


def targets(conn: Conn, author: str) -> tuple[int, int]:
    """(highest entry id, `author`'s newest entry id, 0 when none)."""
    highest, own = conn.execute(TARGETS_SQL, (author,)).fetchone()
    return int(highest), int(own)


# ---- ranking --------------------------------------------------------------------------------------------------------


def author_scores(conn: Conn) -> dict[str, float]:
    """Every scored author's trust from the cache (node/trust/service.py)."""
    return {str(a): float(s) for a, s in conn.execute("SELECT agent_id, score FROM trust_scores")}


def authors_of(conn: Conn, ids: Sequence[int]) -> dict[int, str]:
    """The author of each of these entries."""
    listed, param = any_of(conn, ids)
    rows = conn.execute(f"SELECT id, author_id FROM entries WHERE id {listed}", (param,))
    return {int(i): str(a) for i, a in rows}


def community_confidence(conn: Conn, ids: Sequence[int], neutral: float) -> dict[int, float]:
    """The community confidence of these entries, as node/entries/queries.py ENTRY_COLUMNS computes it (the
    author's trust when the cache has no confidence for the entry, `neutral` when it has no score either)."""
    if not ids:
        return {}
    listed, param = any_of(conn, ids)
    rows = conn.execute(
        "SELECT e.id, coalesce("
        " (SELECT c.community_confidence FROM entry_confidence c WHERE c.entry_hash = e.record_hash),"
        f" (SELECT t.score FROM trust_scores t WHERE t.agent_id = e.author_id), {neutral})"
        f" FROM entries e WHERE e.id {listed}",
        (param,),
    )
    return {int(i): float(c) for i, c in rows}
