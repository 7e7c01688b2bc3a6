"""The SQL of redaction (migrations 0039, 0043): the `redactions` projection, the node-local `tombstones`,
`redaction_scrubs` and `redacted_bodies` (the dropped versions set aside for the grace), and dropping a target's
versions from the log and the tables that copied them."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterable
from typing import Any, NamedTuple

from node.store.conn import LOCK_NOT_AVAILABLE, POSTGRESQL, Conn, DatabaseError, any_of, engine_of

TABLES: tuple[str, ...] = ("redactions",)  # the projection `bbs rebuild` recreates; tombstones are node-local


class RedactionRow(NamedTuple):
    """A stored redaction record, as the projection holds it."""

    hash: str
    seq: int
    target: str
    author_id: str
    created_at: str
    space: str | None
    reason: str | None


class HeldVersion(NamedTuple):
    """A version of a target held in the log."""

    seq: int
    version: str
    kind: str
    record: dict[str, Any]


class TombstoneRow(NamedTuple):
    """A redacted address's tombstone (docs/format-v3.md 5.3)."""

    hash: str
    kind: str
    author_id: str
    created_at: str
    space: str | None
    versions: list[str]
    redaction: str
    redacted_by: str
    redacted_at: str
    dropped_ms: int


def insert_redaction_txn(conn: Conn, row: RedactionRow) -> None:
    """Project a redaction record (once: a version stored twice is one row)."""
    conn.execute(
        "INSERT INTO redactions (hash, seq, target, author_id, created_at, space, reason) VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (hash) DO NOTHING",
        tuple(row),
    )


def redactions_of(conn: Conn, targets: Iterable[str]) -> list[RedactionRow]:
    """The redactions naming any of `targets`, oldest first (created_at, then address): the order they are tried in."""
    test, listed = any_of(conn, sorted(set(targets)))
    rows = conn.execute(
        "SELECT hash, seq, target, author_id, created_at, space, reason FROM redactions"
        f" WHERE target {test} ORDER BY created_at, hash",
        (listed,),
    ).fetchall()
    return [RedactionRow(r[0], int(r[1]), r[2], r[3], r[4], r[5], r[6]) for r in rows]


def redactions_of_held_in(conn: Conn, spaces: Iterable[str]) -> list[RedactionRow]:
    """The redactions of any of `spaces` whose target the log holds (void for it when they came), oldest first."""
    test, listed = any_of(conn, sorted(set(spaces)))
    rows = conn.execute(
        "SELECT hash, seq, target, author_id, created_at, space, reason FROM redactions r"
        f" WHERE space {test} AND EXISTS (SELECT 1 FROM records WHERE hash = r.target)"
        " ORDER BY created_at, hash",
        (listed,),
    ).fetchall()
    return [RedactionRow(r[0], int(r[1]), r[2], r[3], r[4], r[5], r[6]) for r in rows]


def versions_by(conn: Conn, space_id: str, author: str) -> list[str]:
    """The versions of `author`'s redactions in the space that the log holds (what it did there as an admin:
    docs/format-v3.md 5.2), sorted: part of what a removal vouches for by default (`node.spaces.store.posts_of`)."""
    rows = conn.execute(
        "SELECT r.version FROM redactions d JOIN records r ON r.seq = d.seq WHERE d.space = ? AND d.author_id = ?",
        (space_id, author),
    ).fetchall()
    return sorted(str(r[0]) for r in rows)


def moderated_in(conn: Conn, spaces: Iterable[str]) -> list[tuple[RedactionRow, TombstoneRow]]:
    """The tombstones of any of `spaces` that a moderator's redaction made (its author is not the target's), each
    with that redaction, oldest redaction first."""
    test, listed = any_of(conn, sorted(set(spaces)))
    rows = conn.execute(
        "SELECT r.hash, r.seq, r.target, r.author_id, r.created_at, r.space, r.reason, t.hash, t.kind, t.author_id,"
        " t.created_at, t.space, t.versions, t.redaction, t.redacted_by, t.redacted_at, t.dropped_ms"
        " FROM tombstones t JOIN redactions r ON r.hash = t.redaction"
        f" WHERE t.space {test} AND r.author_id <> t.author_id"
        " ORDER BY r.created_at, r.hash",
        (listed,),
    ).fetchall()
    return [
        (
            RedactionRow(r[0], int(r[1]), r[2], r[3], r[4], r[5], r[6]),
            TombstoneRow(r[7], r[8], r[9], r[10], r[11], json.loads(r[12]), r[13], r[14], r[15], int(r[16])),
        )
        for r in rows
    ]


def redaction(conn: Conn, address: str) -> RedactionRow | None:
    """The redaction record at `address`, when this node holds one."""
    row = conn.execute(
        "SELECT hash, seq, target, author_id, created_at, space, reason FROM redactions WHERE hash = ?", (address,)
    ).fetchone()
    return None if row is None else RedactionRow(row[0], int(row[1]), row[2], row[3], row[4], row[5], row[6])


def held_versions(conn: Conn, address: str) -> list[HeldVersion]:
    """Every version of `address` in the log, flagged void or not, in seq order."""
    rows = conn.execute("SELECT seq, version, kind, body FROM records WHERE hash = ? ORDER BY seq", (address,))
    return [HeldVersion(int(r[0]), r[1], r[2], json.loads(bytes(r[3]))) for r in rows.fetchall()]


def kind_held(conn: Conn, address: str) -> str | None:
    """The kind of the record at `address` in the log (any version), or None."""
    row = conn.execute("SELECT kind FROM records WHERE hash = ? LIMIT 1", (address,)).fetchone()
    return None if row is None else str(row[0])


def drop_versions_txn(conn: Conn, address: str, seqs: list[int], now_ms: int) -> None:
    """Delete the versions of `address` at `seqs` from the log, with their void flags, their copies waiting for a
    dependency, and the notifications of them (an entry's: they name its seq); remember every version of the
    address, held or waiting, in `refused_versions`, so no peer brings it back."""
    test, seq_list = any_of(conn, seqs)
    sql = (
        "INSERT INTO refused_versions (version, hash, refused_ms)"
        " SELECT version, hash, ? FROM records WHERE seq IN (SELECT value FROM json_each(?))"
        " UNION SELECT version, hash, ? FROM waiting WHERE hash = ?"
        " ON CONFLICT (version) DO NOTHING"
    )
    if engine_of(conn) == POSTGRESQL:  # the time typed: a bare parameter in a UNION's select list is text there
        sql = (
            "INSERT INTO refused_versions (version, hash, refused_ms)"
            " SELECT version, hash, CAST(? AS bigint) FROM records WHERE seq = ANY(?)"
            " UNION SELECT version, hash, CAST(? AS bigint) FROM waiting WHERE hash = ?"
            " ON CONFLICT (version) DO NOTHING"
        )
    conn.execute(sql, (now_ms, seq_list, now_ms, address))
    conn.execute(f"DELETE FROM notifications WHERE entry_id {test}", (seq_list,))
    conn.execute(f"DELETE FROM void_records WHERE seq {test}", (seq_list,))
    conn.execute("DELETE FROM waiting WHERE hash = ?", (address,))
    conn.execute(f"DELETE FROM records WHERE seq {test}", (seq_list,))


def delete_redaction_txn(conn: Conn, address: str) -> None:
    """Take a redaction record out of the projection (it was flagged void: it screens and drops nothing)."""
    conn.execute("DELETE FROM redactions WHERE hash = ?", (address,))


class SetAside(NamedTuple):
    """A version a redaction dropped, kept aside for the grace (migration 0043)."""

    version: str
    hash: str
    seq: int
    kind: str
    origin: str
    scope: str
    body: bytes


def set_aside_txn(conn: Conn, seqs: list[int]) -> None:
    """Copy the versions at `seqs` from the log into `redacted_bodies`, before a redaction deletes them: node-local,
    read by nothing but `released` (a void redaction's restore) and the scrub that deletes them."""
    test, listed = any_of(conn, seqs)
    conn.execute(
        "INSERT INTO redacted_bodies (version, hash, seq, kind, origin, scope, body)"
        " SELECT version, hash, seq, kind, origin, scope, body FROM records"
        f" WHERE seq {test}"
        " ON CONFLICT (version) DO NOTHING",
        (listed,),
    )


def release_txn(conn: Conn, address: str) -> int:
    """Mark the versions of `address` set aside for restoring (their redaction became void); how many."""
    return conn.execute("UPDATE redacted_bodies SET released = 1 WHERE hash = ?", (address,)).rowcount


def released(conn: Conn) -> list[SetAside]:
    """The versions set aside whose redaction became void, in their old log order; deleted from the table."""
    rows = conn.execute(
        "SELECT version, hash, seq, kind, origin, scope, body FROM redacted_bodies WHERE released = 1 ORDER BY seq"
    ).fetchall()
    if rows:  # (every key event's transaction asks: one probe of a partial index when none is released)
        conn.execute("DELETE FROM redacted_bodies WHERE released = 1")
    return [SetAside(r[0], r[1], int(r[2]), r[3], r[4], r[5], bytes(r[6])) for r in rows]


def forget_set_aside_txn(conn: Conn, addresses: list[str] | None = None) -> int:
    """Delete the versions set aside of `addresses` (every one when None): the scrub, a backup's copy. With
    `secure_delete` on, their cells are zeroed. How many rows went."""
    if addresses is None:
        return conn.execute("DELETE FROM redacted_bodies").rowcount
    test, listed = any_of(conn, addresses)
    return conn.execute(f"DELETE FROM redacted_bodies WHERE hash {test}", (listed,)).rowcount


def set_aside_count(conn: Conn) -> int:
    """How many dropped versions are set aside, waiting for their scrub (`bbs doctor`)."""
    return int(conn.execute("SELECT count(*) FROM redacted_bodies").fetchone()[0])


def delete_tombstone_txn(conn: Conn, address: str) -> None:
    """Forget the tombstone of `address` (no redaction holds against it any more)."""
    conn.execute("DELETE FROM tombstones WHERE hash = ?", (address,))


def repoint_tombstone_txn(conn: Conn, address: str, row: RedactionRow) -> None:
    """Name `row` as the redaction of `address`'s tombstone (the one it named became void, `row` still holds)."""
    conn.execute(
        "UPDATE tombstones SET redaction = ?, redacted_by = ?, redacted_at = ? WHERE hash = ?",
        (row.hash, row.author_id, row.created_at, address),
    )


def insert_tombstone_txn(conn: Conn, row: TombstoneRow) -> None:
    """Keep the tombstone of a redacted address; for one already kept, only its versions change (the caller gives
    the union: a version arriving after the redaction joins them)."""
    conn.execute(
        "INSERT INTO tombstones (hash, kind, author_id, created_at, space, versions, redaction, redacted_by,"
        " redacted_at, dropped_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (hash) DO UPDATE SET versions = excluded.versions",
        (*row[:5], json.dumps(sorted(set(row.versions))), *row[6:]),
    )


def tombstones(conn: Conn, addresses: Iterable[str]) -> list[TombstoneRow]:
    """The tombstones of those of `addresses` redacted here, by address."""
    test, listed = any_of(conn, sorted(set(addresses)))
    rows = conn.execute(
        "SELECT hash, kind, author_id, created_at, space, versions, redaction, redacted_by, redacted_at, dropped_ms"
        f" FROM tombstones WHERE hash {test} ORDER BY hash",
        (listed,),
    ).fetchall()
    return [TombstoneRow(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6], r[7], r[8], int(r[9])) for r in rows]


def redacted_spaces(conn: Conn, addresses: Iterable[str]) -> dict[str, str | None]:
    """The space (None: public) of each of `addresses` redacted here, from its tombstone: a record's space outlives
    its body, and a record naming it is decided by it (node/spaces/posts.py, node/federation/space_gate.py)."""
    test, listed = any_of(conn, sorted(set(addresses)))
    rows = conn.execute(f"SELECT hash, space FROM tombstones WHERE hash {test}", (listed,)).fetchall()
    return {str(r[0]): None if r[1] is None else str(r[1]) for r in rows}


def count(conn: Conn) -> int:
    """How many addresses this node holds as tombstones (`bbs doctor`)."""
    return int(conn.execute("SELECT count(*) FROM tombstones").fetchone()[0])


def schedule_scrub_txn(conn: Conn, address: str, dropped_ms: int) -> None:
    """Remember that the bytes of `address`'s dropped body may stay on disk (free pages, WAL frames, index segments)
    until a scrub runs, once the node's grace after `dropped_ms` has passed."""
    conn.execute(
        "INSERT INTO redaction_scrubs (hash, dropped_ms) VALUES (?, ?)"
        " ON CONFLICT (hash) DO UPDATE SET dropped_ms = excluded.dropped_ms, done_ms = NULL",
        (address, dropped_ms),
    )


def due_scrubs(conn: Conn, dropped_before_ms: int) -> list[str]:
    """The addresses dropped at or before `dropped_before_ms` whose scrub has not run."""
    rows = conn.execute(
        "SELECT hash FROM redaction_scrubs WHERE done_ms IS NULL AND dropped_ms <= ? ORDER BY dropped_ms",
        (dropped_before_ms,),
    ).fetchall()
    return [str(r[0]) for r in rows]


def drops_between(conn: Conn, from_ms: int, to_ms: int) -> list[tuple[str, int]]:
    """(address, dropped_ms) of every drop from `from_ms` to `to_ms` (both included), scrubbed or not, oldest first:
    what a process's own search index is scrubbed of (node/redaction/scrub.py `scrub_own_index`)."""
    rows = conn.execute(
        "SELECT hash, dropped_ms FROM redaction_scrubs WHERE dropped_ms >= ? AND dropped_ms <= ? ORDER BY dropped_ms",
        (from_ms, to_ms),
    ).fetchall()
    return [(str(r[0]), int(r[1])) for r in rows]


def last_drop_ms(conn: Conn) -> int | None:
    """When this node last dropped a body (a redaction or a purge), or None."""
    row = conn.execute("SELECT max(dropped_ms) FROM redaction_scrubs").fetchone()
    return None if row[0] is None else int(row[0])


def pending_scrubs(conn: Conn) -> tuple[int, int | None]:
    """(how many scrubs have not run, the earliest dropped_ms among them): `bbs doctor`, the scrubber's sleep."""
    row = conn.execute("SELECT count(*), min(dropped_ms) FROM redaction_scrubs WHERE done_ms IS NULL").fetchone()
    return int(row[0]), None if row[1] is None else int(row[1])


def mark_scrubbed_txn(conn: Conn, addresses: list[str], now_ms: int) -> None:
    """Record that the scrub of `addresses` ran."""
    test, listed = any_of(conn, addresses)
    conn.execute(f"UPDATE redaction_scrubs SET done_ms = ? WHERE hash {test}", (now_ms, listed))


def checkpoint(path: str, tries: int, pause_s: float) -> bool:
    """`PRAGMA wal_checkpoint(TRUNCATE)` on the database at `path`, on a connection of its own: every WAL frame is
    copied into the database and the WAL file emptied. It cannot finish while a reader holds an older snapshot, so
    each try waits up to `pause_s` for readers (the busy handler) and it is tried `tries` times; whether it
    succeeded."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None, timeout=pause_s)) as conn:
        conn.execute(f"PRAGMA busy_timeout = {max(1, int(pause_s * 1000))}")
        for _ in range(tries):
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if int(busy) == 0:
                return True
    return False


# Every table that holds a redactable record's bytes or text copied from it (the log, the versions set aside, the
# waiting area, the projections of entries, links and messages, default mode's candidates and replies, notices):
# PostgreSQL keeps a deleted row's bytes in its page until the table is rewritten (docs/decisions.md record 78).
SCRUB_TABLES_PG: tuple[str, ...] = (
    "records",
    "redacted_bodies",
    "waiting",
    "entries",
    "entry_tags",
    "links",
    "messages",
    "dm_candidates",
    "dm_replies",
    "notifications",
)


def pg_scrub_refusal(conn: Conn) -> str | None:
    """Why the node's PostgreSQL role cannot scrub the disk of its database's server, or None: `wal_recycle` must be
    off (a recycled WAL segment keeps its old bytes), the role must own the database (VACUUM FULL of pg_statistic)
    and may run CHECKPOINT (superuser, or pg_checkpoint from PostgreSQL 15) and pg_switch_wal()."""
    row = conn.execute(
        "SELECT current_setting('wal_recycle') = 'off',"
        " pg_has_role(current_user, (SELECT datdba FROM pg_database WHERE datname = current_database()), 'MEMBER'),"
        " (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) OR CASE WHEN EXISTS"
        " (SELECT 1 FROM pg_roles WHERE rolname = 'pg_checkpoint')"
        " THEN pg_has_role(current_user, 'pg_checkpoint', 'MEMBER') ELSE FALSE END,"
        " has_function_privilege('pg_switch_wal()', 'EXECUTE')"
    ).fetchone()
    missing = [
        what
        for what, ok in zip(
            (
                "the server's wal_recycle is on (set wal_recycle = off)",
                "the node's role does not own its database",
                "the node's role may not CHECKPOINT (GRANT pg_checkpoint TO it)",
                "the node's role may not switch WAL segments (GRANT EXECUTE ON FUNCTION pg_switch_wal() TO it)",
            ),
            row,
            strict=True,
        )
        if not ok
    ]
    return "; ".join(missing) or None


def scrub_pg(url: str, tables: tuple[str, ...], lock_timeout_ms: int) -> str | None:
    """Take a dropped body's bytes off the disk of the PostgreSQL server at `url`, on a connection of its own
    outside a transaction: VACUUM FULL rewrites each of `tables` (heap, TOAST and indexes) without its dead rows and
    ANALYZE replaces their statistics, whose samples may have held the body; pg_statistic is rewritten without the
    old ones; then the WAL segment that logged the body is switched away from and a CHECKPOINT removes it (with
    `wal_recycle` off: a recycled one would keep its bytes until overwritten). A table rewrite waits up to
    `lock_timeout_ms` for readers. None when done, else why not (nothing is marked done then: the scrub waits)."""
    from node.store import pg_conn  # PostgreSQL only (node/store/db.py says why)

    with contextlib.closing(pg_conn.connect(url)) as conn:
        refusal = pg_scrub_refusal(conn)
        if refusal is not None:
            return refusal
        conn.execute(f"SET lock_timeout = {int(lock_timeout_ms)}")
        try:
            for table in tables:
                conn.execute(f"VACUUM (FULL, ANALYZE) {table}")
            conn.execute("VACUUM FULL pg_statistic")
        except DatabaseError as exc:
            if exc.sqlstate != LOCK_NOT_AVAILABLE:
                raise
            return f"a reader held a table past the lock timeout: {exc}"
        conn.execute("SELECT pg_switch_wal()")
        conn.execute("CHECKPOINT")
    return None


# ---- operator purges ----------------------------------------------------------------------------------------------


class PurgeRow(NamedTuple):
    """A record the operator purged from this node alone."""

    hash: str
    kind: str
    author_id: str
    versions: list[str]
    reason: str | None
    purged_ms: int


def insert_purge_txn(conn: Conn, row: PurgeRow) -> None:
    """Remember a purged address (a version purged again later joins its versions: the caller gives the union)."""
    conn.execute(
        "INSERT INTO purges (hash, kind, author_id, versions, reason, purged_ms) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (hash) DO UPDATE SET versions = excluded.versions",
        (row.hash, row.kind, row.author_id, json.dumps(sorted(set(row.versions))), row.reason, row.purged_ms),
    )


def purges(conn: Conn, addresses: Iterable[str]) -> list[PurgeRow]:
    """The purges of those of `addresses` purged here."""
    test, listed = any_of(conn, sorted(set(addresses)))
    rows = conn.execute(
        f"SELECT hash, kind, author_id, versions, reason, purged_ms FROM purges WHERE hash {test} ORDER BY hash",
        (listed,),
    ).fetchall()
    return [PurgeRow(r[0], r[1], r[2], json.loads(r[3]), r[4], int(r[5])) for r in rows]


def newest_purges(conn: Conn, limit: int) -> list[PurgeRow]:
    """The `limit` newest purges, newest first (the operator's list: GET /v1/admin/purges, the dashboard)."""
    rows = conn.execute(
        "SELECT hash, kind, author_id, versions, reason, purged_ms FROM purges ORDER BY purged_ms DESC, hash LIMIT ?",
        (limit,),
    ).fetchall()
    return [PurgeRow(r[0], r[1], r[2], json.loads(r[3]), r[4], int(r[5])) for r in rows]


def purge_counts(conn: Conn) -> tuple[int, int]:
    """(addresses purged here, their authors): `bbs doctor`."""
    row = conn.execute("SELECT count(*), count(DISTINCT author_id) FROM purges").fetchone()
    return int(row[0]), int(row[1])


def addresses_of_author(conn: Conn, author: str, kinds: Iterable[str]) -> list[str]:
    """The addresses of `author`'s records of `kinds` in the log, oldest first."""
    test, listed = any_of(conn, sorted(kinds))
    rows = conn.execute(
        f"SELECT hash FROM records WHERE author_id = ? AND kind {test} GROUP BY hash ORDER BY min(seq)",
        (author, listed),
    ).fetchall()
    return [str(r[0]) for r in rows]


def any_named(conn: Conn, addresses: Iterable[str]) -> bool:
    """Whether a redaction or a purge names any of `addresses`: the one look-up every append makes (two index
    probes per address; the tables are empty on most nodes)."""
    if engine_of(conn) == POSTGRESQL:
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM redactions WHERE target = ANY(?1))"
            " OR EXISTS (SELECT 1 FROM purges WHERE hash = ANY(?1))",
            (sorted(set(addresses)),),
        ).fetchone()
        return bool(row[0])
    listed = json.dumps(sorted(set(addresses)))
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM json_each(?1) a"
        " WHERE EXISTS (SELECT 1 FROM redactions r WHERE r.target = a.value)"
        " OR EXISTS (SELECT 1 FROM purges p WHERE p.hash = a.value))",
        (listed,),
    ).fetchone()
    return bool(row[0])
