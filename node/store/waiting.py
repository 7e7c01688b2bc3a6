"""The waiting area: records from peers whose authority has not arrived (docs/format-v3.md, section 7.2).

A node-local table beside the log, never synced: a waiting record is not in the log, not projected, not in the
changes feed, fetch, reconciliation or the digest, and not remembered in `refused_versions`. Each row keeps the
record's bytes, address, version, claimed author, the peer it came from, its arrival time and size; its
dependency keys (`node.store.authority`: `key:<author>:<key>`, `event:<address>`, `pages:<event>:<subject>`) are
indexed in `waiting_deps`, so the transaction that stores a resolving record selects what it may decide.

Bounded by count and bytes per claimed author, per peer and in all (the caps below). The arriving record is what
overflows, never an older one, so a flood cannot push out honest waiting records; it is dropped, stored nowhere,
counted per peer (`dropped_waiting`), and reconciliation offers it again. A record waits at most `MAX_AGE_MS`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from node.store.conn import POSTGRESQL, Conn, any_of, engine_of

MiB = 1024 * 1024
MAX_PER_AUTHOR = 1_000
MAX_BYTES_PER_AUTHOR = 16 * MiB
MAX_PER_PEER = 10_000
MAX_BYTES_PER_PEER = 64 * MiB
MAX_TOTAL = 100_000
MAX_BYTES_TOTAL = 512 * MiB
MAX_AGE_MS = 24 * 3600 * 1000
RECHECK_PER_TRANSACTION = 1_000  # waiting records re-checked in one write transaction (the rest in the next jobs)
# A dependency key, or a range [low, high) of them (`node.store.authority.author_deps`: every key of one author).
Dep = str | tuple[str, str]


class Waiting(NamedTuple):
    """A waiting record as the table holds it."""

    id: int
    hash: str
    version: str
    author_id: str
    peer_id: str
    body: bytes


def offer_txn(
    conn: Conn,
    *,
    record_hash: str,
    version: str,
    kind: str,
    author_id: str,
    peer_id: str,
    body: bytes,
    deps: Sequence[str],
    now_ms: int,
) -> bool:
    """Put a record in the waiting area: True if it waits (now, or already did), False if a cap drops it."""
    if conn.execute("SELECT 1 FROM waiting WHERE version = ?", (version,)).fetchone() is not None:
        return True
    size = len(body)
    held = {  # the running counts the triggers of migration 0028 keep: three rows, not a count of the area
        (str(scope), str(key)): (int(count), int(used))
        for scope, key, count, used in conn.execute(
            "SELECT scope, key, count, bytes FROM waiting_counts WHERE (scope = 'author' AND key = ?)"
            " OR (scope = 'peer' AND key = ?) OR (scope = 'all' AND key = '')",
            (author_id, peer_id),
        )
    }
    for cap, most, most_bytes in (
        (("author", author_id), MAX_PER_AUTHOR, MAX_BYTES_PER_AUTHOR),
        (("peer", peer_id), MAX_PER_PEER, MAX_BYTES_PER_PEER),
        (("all", ""), MAX_TOTAL, MAX_BYTES_TOTAL),
    ):
        count, used = held.get(cap, (0, 0))
        if count + 1 > most or used + size > most_bytes:
            return False
    sql = (
        "INSERT INTO waiting (version, hash, kind, author_id, peer_id, arrived_ms, size, body)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    )
    if engine_of(conn) == POSTGRESQL:  # no rowid there: the identity's value returned (record 76)
        sql += " RETURNING id"
    waiting_id = conn.execute(sql, (version, record_hash, kind, author_id, peer_id, now_ms, size, body)).lastrowid
    _insert_deps(conn, waiting_id, deps)
    return True


def _insert_deps(conn: Conn, waiting_id: int | None, deps: Sequence[str]) -> None:
    """The dependency rows of a waiting record, each key once."""
    sql = "INSERT OR IGNORE INTO waiting_deps (dep, waiting_id) VALUES (?, ?)"
    if engine_of(conn) == POSTGRESQL:
        sql = "INSERT INTO waiting_deps (dep, waiting_id) VALUES (?, ?) ON CONFLICT DO NOTHING"
    conn.executemany(sql, [(d, waiting_id) for d in deps])


def set_deps_txn(conn: Conn, waiting_id: int, deps: Sequence[str]) -> None:
    """Replace what a waiting record waits for (re-checked and still undecided, with new keys)."""
    conn.execute("DELETE FROM waiting_deps WHERE waiting_id = ?", (waiting_id,))
    _insert_deps(conn, waiting_id, deps)


def select_txn(conn: Conn, deps: Iterable[Dep], after_id: int, limit: int) -> list[Waiting]:
    """Waiting records that wait for any of `deps` (a dependency key, or a `(low, high)` range of them, as
    `node.store.authority.author_deps` gives), with id above `after_id`, in id order, at most `limit`."""
    wanted = list(deps)
    exact = [d for d in wanted if isinstance(d, str)]
    ranges = [d for d in wanted if isinstance(d, tuple)]
    test, listed = any_of(conn, exact)
    clauses = [f"d.dep {test}"]
    params: list[object] = [listed]
    for low, high in ranges:
        clauses.append("(d.dep >= ? AND d.dep < ?)")
        params += [low, high]
    rows = conn.execute(
        "SELECT DISTINCT w.id, w.hash, w.version, w.author_id, w.peer_id, w.body FROM waiting w"
        f" JOIN waiting_deps d ON d.waiting_id = w.id WHERE ({' OR '.join(clauses)}) AND w.id > ?"
        " ORDER BY w.id LIMIT ?",
        (*params, after_id, limit),
    ).fetchall()
    return [Waiting(int(r[0]), r[1], r[2], r[3], r[4], bytes(r[5])) for r in rows]


def remove_txn(conn: Conn, ids: Sequence[int]) -> None:
    """Take records out of the waiting area (decided, or dropped); their dependency rows go with them."""
    if ids:
        test, listed = any_of(conn, ids)
        conn.execute(f"DELETE FROM waiting WHERE id {test}", (listed,))


def remove_versions_txn(conn: Conn, versions: Sequence[str]) -> None:
    """Take these versions out of the waiting area, if they wait (a copy of one was just stored or refused)."""
    if versions:
        test, listed = any_of(conn, versions)
        conn.execute(f"DELETE FROM waiting WHERE version {test}", (listed,))


def expire_txn(conn: Conn, now_ms: int) -> Counter[str]:
    """Drop records that have waited `MAX_AGE_MS`; returns how many per peer they came from."""
    rows = conn.execute("SELECT id, peer_id FROM waiting WHERE arrived_ms <= ?", (now_ms - MAX_AGE_MS,)).fetchall()
    remove_txn(conn, [int(r[0]) for r in rows])
    return Counter(str(r[1]) for r in rows)


def count_txn(conn: Conn, peer_id: str, *, waiting: int = 0, dropped_waiting: int = 0, void: int = 0) -> None:
    """Add to a peer's counters of the waiting area's outcomes (docs/sync.md)."""
    if waiting or dropped_waiting or void:
        conn.execute(
            "UPDATE peers SET waiting = waiting + ?, dropped_waiting = dropped_waiting + ?, void = void + ?"
            " WHERE node_id = ?",
            (waiting, dropped_waiting, void, peer_id),
        )


def remember_void_txn(conn: Conn, version: str, author_id: str, reason: str, now_ms: int) -> None:
    """Remember a version refused as void, so reconciliation does not fetch it again (docs/format-v3.md, 7.6)."""
    conn.execute(
        "INSERT INTO void_versions (version, author_id, reason, refused_ms) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (version) DO NOTHING",
        (version, author_id, reason, now_ms),
    )


def forget_void_txn(conn: Conn, author_id: str) -> None:
    """Forget the void refusals of an author whose key chain changed: they are fetched and decided again."""
    conn.execute("DELETE FROM void_versions WHERE author_id = ?", (author_id,))


def void(conn: Conn, versions: Iterable[str]) -> dict[str, str]:
    """Those of `versions` remembered as void, with the reason."""
    test, listed = any_of(conn, versions)
    rows = conn.execute(f"SELECT version, reason FROM void_versions WHERE version {test}", (listed,)).fetchall()
    return {str(r[0]): str(r[1]) for r in rows}


def held(conn: Conn, versions: Iterable[str]) -> set[str]:
    """Those of `versions` that wait here (reconciliation need not fetch them again)."""
    test, listed = any_of(conn, versions)
    rows = conn.execute(f"SELECT version FROM waiting WHERE version {test}", (listed,)).fetchall()
    return {str(r[0]) for r in rows}


def counters(conn: Conn) -> dict[str, tuple[int, int, int]]:
    """Each peer's (waiting, dropped_waiting, void) counters."""
    rows = conn.execute("SELECT node_id, waiting, dropped_waiting, void FROM peers").fetchall()
    return {str(r[0]): (int(r[1]), int(r[2]), int(r[3])) for r in rows}


def sizes(conn: Conn) -> dict[str, tuple[int, int]]:
    """(records, bytes) waiting per author."""
    rows = conn.execute("SELECT author_id, count(*), sum(size) FROM waiting GROUP BY author_id").fetchall()
    return {str(r[0]): (int(r[1]), int(r[2])) for r in rows}


def running_counts(conn: Conn) -> dict[tuple[str, str], tuple[int, int]]:
    """The running (records, bytes) the caps read (`waiting_counts`, kept by triggers), by (scope, key); the empty
    area's `all` row is (0, 0), and no author or peer has a row without a waiting record."""
    rows = conn.execute("SELECT scope, key, count, bytes FROM waiting_counts").fetchall()
    return {(str(r[0]), str(r[1])): (int(r[2]), int(r[3])) for r in rows}


def recounted(conn: Conn) -> dict[tuple[str, str], tuple[int, int]]:
    """`running_counts` computed from the waiting area itself (what the triggers must agree with)."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for scope, column in (("author", "author_id"), ("peer", "peer_id")):
        rows = conn.execute(f"SELECT {column}, count(*), sum(size) FROM waiting GROUP BY {column}").fetchall()
        out |= {(scope, str(r[0])): (int(r[1]), int(r[2])) for r in rows}
    count, used = conn.execute("SELECT count(*), coalesce(sum(size), 0) FROM waiting").fetchone()
    out[("all", "")] = (int(count), int(used))
    return out
