"""The node's implementation of sync's storage interface, over node.store.db and projections.append.

Also the peer table operations shared by the REST API and the CLI (which writes the same rows
while a node runs; the node's scheduler re-reads peers every second), and the statements of the replay protection
of a node of several processes (node/federation/node_replay.py: the boot generation, accepted nonces).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import sqlite3
from collections.abc import Callable
from typing import Any

import msgspec
from yarl import URL

from identity import canonical, key_history, keys
from identity.space_rules import may_receive
from node.errors import InvalidInput
from node.federation import space_gate
from node.federation import waiting as waiting_gate
from node.ops import store as ops_store
from node.redaction import effects as redaction_effects
from node.spaces import store as space_store
from node.store import db, equivocation, projections, void, waiting
from node.store.authority import (
    AUTHORITY_KINDS,
    BODY_JSON_TEXT_PG,
    Authority,
    author_deps,
    drop_displaced_txn,
    event_dep,
    key_events_of,
)
from node.store.conn import POSTGRESQL, Conn, any_of, engine_of
from node.store.db import Database
from node.store.side import SideConnection
from sync import compat
from sync.messages import (
    PROTOCOL_VERSION,
    AuthorEquivocations,
    Digest,
    PeerCounters,
    PeerHealth,
    PeerIn,
    PeerList,
    PeerStatus,
)
from sync.store import (
    TOO_NEW,
    Cursor,
    CursorVersion,
    Invalid,
    Outcome,
    Page,
    PeerConfig,
    StoreUnavailable,
    Verified,
)
from wire.time import format_ms

MAX_WANT_ATTEMPTS = 8
MAX_WANT_BACKOFF_MS = 10 * 60 * 1000
POLL_S = 0.1
# What the projections raise for a record they refuse, the peer's fault: a constraint of a projection table, or a
# value the canonical form refuses. Anything else a record meets while stored is a fault of this node's own code.
REFUSED = (sqlite3.IntegrityError, canonical.CanonicalError)
log = logging.getLogger("bbs.sync")
# Federated versions by address or version: a UNION of two index searches (an OR of the two would scan every
# federated record).
FETCH_SQL = (
    "SELECT hash, version, body FROM records WHERE +scope = 'federation' AND seq NOT IN (SELECT seq FROM void_records)"
    " AND (space IS NULL OR space IN (SELECT value FROM json_each(:served))"
    "   OR (kind = 'space_host' AND json_extract(CAST(body AS TEXT), '$.node') = :peer"
    "     AND (:allowed IS NULL OR space IN (SELECT value FROM json_each(:allowed)))))"
    " AND seq IN ("
    "   SELECT seq FROM records WHERE hash IN (SELECT value FROM json_each(:ids))"
    "   UNION SELECT seq FROM records WHERE version IN (SELECT value FROM json_each(:ids)))"
    " ORDER BY seq"
)
# A record is served to a peer when it is public or of a space both nodes host (`served_spaces`), or a hosting record
# naming the peer (so a node learns that it was named a host, or no longer is): the condition every answer to a peer
# carries (docs/sync.md, "Spaces").
SERVED = (
    "(space IS NULL OR space IN (SELECT value FROM json_each(:served))"
    " OR (kind = 'space_host' AND json_extract(CAST(body AS TEXT), '$.node') = :peer"
    "   AND (:allowed IS NULL OR space IN (SELECT value FROM json_each(:allowed)))))"
)
# PostgreSQL's (docs/decisions.md record 50): lists as arrays, the body's JSON read by `->>` (its `\u0000` escapes
# rewritten first: json refuses them as jsonb does, record 84), the NULL test of a parameter typed.
SERVED_PG = (
    "(space IS NULL OR space = ANY(:served)"
    f" OR (kind = 'space_host' AND {BODY_JSON_TEXT_PG}::json ->> 'node' = :peer"
    "   AND (CAST(:allowed AS text[]) IS NULL OR space = ANY(:allowed))))"
)
FETCH_SQL_PG = (
    "SELECT hash, version, body FROM records WHERE scope = 'federation' AND seq NOT IN (SELECT seq FROM void_records)"
    f" AND {SERVED_PG}"
    " AND seq IN (SELECT seq FROM records WHERE hash = ANY(:ids)"
    "   UNION SELECT seq FROM records WHERE version = ANY(:ids))"
    " ORDER BY seq"
)


class NodeSyncStore:
    """`sync.store.SyncStore` over a node's database. Records from a peer get origin = the peer's node id."""

    def __init__(
        self, db: Database, node_id: str, now_ms: Callable[[], int], *, authority: Authority | None = None
    ) -> None:
        self.db = db
        self.node_id = node_id
        self.now_ms = now_ms
        self._changed = asyncio.Event()  # replaced at each wake: a waiter holds the one of its last look
        self._newest_lock = asyncio.Lock()
        self._newest = 0
        self._newest_at = float("-inf")
        self._newest_wakes = 0  # `_wakes` when `_newest` was read
        self._wakes = 0
        self.poll_s = POLL_S
        self._epoch_seen: str | None = None  # the store epoch the node's epoch watch last told (`epoch_is`)
        self._reconcile_all = False  # it changed since: the next `reconcile_wanted` names every peer
        # the writer's authority cache (node/store/authority.py), shared with local writes (Node passes sealing's)
        self.authority = Authority() if authority is None else authority
        # called after a batch holding redactions is stored: the redaction scrubber looks at once (Node sets it)
        self.on_redactions: Callable[[], None] | None = None

    async def position(self) -> tuple[str, int]:
        return await self.db.read(_position)

    async def changes(
        self, since: int, limit: int, exclude_origin: str | None = None, v: int = PROTOCOL_VERSION
    ) -> Page:
        return await self.db.read(lambda c: changes_page(c, self.node_id, since, limit, exclude_origin, v))

    def wake(self) -> None:
        """Something was committed (records through sync, a local post, or on PostgreSQL another process's commit:
        record 85): long-polling peers look again. On the event loop (node/app.py wires it to after_commit)."""
        self._wakes += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for_change(self, since: int, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            changed = self._changed  # taken before the look: a wake during it is not missed
            if await self._newest_federated() > since:
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            # Woken at once by a commit (`wake`); the poll is the fallback for a wake that never comes (a write by
            # a tool that is not serving).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(self.poll_s, remaining))

    async def _newest_federated(self) -> int:
        """The newest federated seq; one read per poll interval (and per wake) however many peers are
        long-polling."""
        loop = asyncio.get_running_loop()
        async with self._newest_lock:
            if self._newest_wakes != self._wakes or loop.time() - self._newest_at >= self.poll_s / 2:
                wakes = self._wakes  # a wake during the read makes the next look read again
                self._newest = await self.db.read(
                    lambda c: c.execute(
                        "SELECT coalesce(max(seq), 0) FROM records WHERE scope = 'federation'"
                    ).fetchone()[0]
                )
                self._newest_at, self._newest_wakes = loop.time(), wakes
            return int(self._newest)

    async def fetch(
        self, ids: list[str], v: int = PROTOCOL_VERSION, peer_id: str | None = None
    ) -> list[tuple[str, str, bytes]]:
        return await self.db.read(lambda c: fetch_items(c, self.node_id, ids, v, peer_id))

    async def reconcile_items(
        self, v: int = PROTOCOL_VERSION, peer_id: str | None = None
    ) -> tuple[str, int, list[tuple[int, bytes]]]:
        return await self.db.read(lambda c: reconcile_snapshot(c, self.node_id, v, peer_id))

    async def served_spaces(self, peer_id: str | None) -> frozenset[str]:
        return frozenset(await self.db.read(lambda c: served_spaces(c, self.node_id, peer_id)))

    async def set_items(
        self, v: int = PROTOCOL_VERSION, space: str | None = None
    ) -> tuple[str, int, list[tuple[int, bytes]]]:
        return await self.db.read(lambda c: set_snapshot(c, v, space))

    async def hosting_items(self, v: int, space: str, peer_id: str) -> list[tuple[int, bytes]]:
        return await self.db.read(lambda c: hosting_snapshot(c, v, space, peer_id))

    async def reconcile_spaces(self, peer_id: str, offered: frozenset[str]) -> list[str]:
        def run(conn: Conn) -> list[str]:
            allowed = peer_filter(conn, peer_id)
            taken = {s for s in offered if allowed is None or s in allowed}
            return sorted(taken.union(served_spaces(conn, self.node_id, peer_id)))

        return await self.db.read(run)

    async def refused(self, versions: list[str]) -> set[str]:
        return await self.db.read(
            lambda c: (
                equivocation.refused(c, versions)
                | waiting.held(c, versions)
                | set(waiting.void(c, versions))
                | void.flagged_versions(c, versions)
                | held_versions(c, versions)
            )  # held, flagged void: outside our set, never fetched again; in the log already (a space this node
            # serves the peer no more, while the peer still counts it a host: docs/sync.md, "Spaces")
        )

    async def refused_prefixes(self, prefixes: list[str]) -> set[str]:
        return await self.db.read(lambda c: prefixed_versions(c, prefixes))

    def epoch_is(self, epoch: str) -> None:
        """The node's epoch watch (node/ops/history.py) tells what the store epoch is now. A change since it last told:
        a restore or a failover under a serving process may have lost records of this node that its peers hold, and
        only a reconciliation gives them back (a peer's feed leaves out what the asker wrote; docs/decisions.md
        record 94), so the next `reconcile_wanted` names every peer."""
        seen, self._epoch_seen = self._epoch_seen, epoch
        if seen is not None and epoch != seen:
            log.warning(
                "the store epoch changed (%s, now %s: a restore or a failover); reconciling with every peer to take"
                " back what this node's store lost",
                seen,
                epoch,
            )
            self._reconcile_all = True

    async def reconcile_wanted(self) -> set[str]:
        """The authority's wakes (filled by the writer thread; a wake lost to a race waits for the round), and every
        peer once after the store epoch changed (`epoch_is`); a round that finds the store unavailable leaves that to
        the next."""
        wanted = self.authority.take_wake()
        if self._reconcile_all:
            with contextlib.suppress(StoreUnavailable):
                wanted |= await self.peer_ids()
                self._reconcile_all = False
        return wanted

    async def ingest(
        self,
        peer_id: str,
        records: list[Verified],
        invalid: list[Invalid],
        cursor: Cursor | None,
        too_new_from: int | None = None,
    ) -> list[Outcome]:
        now = self.now_ms()
        authority = self.authority
        try:
            outcomes = await self.db.write(
                lambda c: ingest_txn(c, peer_id, records, invalid, cursor, now, authority, too_new_from=too_new_from)
            )
            await self._recheck_pending()
        except BaseException:
            authority.invalidate()  # the cache may hold what a rolled-back transaction stored
            raise
        if any(o.outcome in ("saved", "pending_link") for o in outcomes):
            self.wake()
        if self.on_redactions is not None and any(v.record.get("kind") == "redaction" for v in records):
            self.on_redactions()  # a peer's redaction dropped a body: its bytes leave the disk without the idle wait
        return outcomes

    async def _recheck_pending(self) -> None:
        """Re-check, one write job each, the waiting records the last transactions left (docs/format-v3.md 7.3)."""
        authority = self.authority
        while authority.pending:
            deps, after_id = authority.pending.pop(0)
            await self.db.write(functools.partial(recheck_waiting_txn, authority, deps, after_id, self.now_ms()))
            self.wake()

    async def peers(self) -> list[PeerConfig]:
        rows = await self.db.read(lambda c: c.execute("SELECT node_id, url FROM peers ORDER BY node_id").fetchall())
        return [PeerConfig(r[0], r[1]) for r in rows]

    async def peer_ids(self) -> frozenset[str]:
        rows = await self.db.read(lambda c: c.execute("SELECT node_id FROM peers").fetchall())
        return frozenset(r[0] for r in rows)

    async def node_key_verdict(self, node_id: str, signing_key: str) -> key_history.KeyVerdict:
        """Whether `signing_key` may sign `node_id`'s sync requests by the key events of it this node holds
        (`identity.key_history.request_key_verdict` over the log's, read here: the writer's cache is the writer's).

        The common case costs no read: a node's first key, once the writer's cache is loaded and knows no key event
        of the node (a membership test; at worst it misses an event the writer is storing this instant, which is a
        request arriving a moment earlier)."""
        authority = self.authority
        if signing_key == node_id and authority.loaded and not authority.needs({"author_id": node_id}):
            return "valid"
        events = await self.db.read(lambda c: key_events_of(c, node_id))
        return key_history.request_key_verdict(key_history.resolve(node_id, events), signing_key)

    async def cursor(self, peer_id: str) -> Cursor | None:
        row = await self.db.read(
            lambda c: c.execute("SELECT cursor_epoch, cursor_seq FROM peers WHERE node_id = ?", (peer_id,)).fetchone()
        )
        if row is None or row[0] is None:
            return None
        return Cursor(row[0], int(row[1]))

    async def cursor_version(self, peer_id: str) -> CursorVersion | None:
        return await self.db.read(lambda c: cursor_version(c, peer_id))

    async def upgrade_cursor(self, peer_id: str) -> None:
        await self.db.write(lambda c: upgrade_cursor_txn(c, peer_id))

    async def note_peer(
        self,
        peer_id: str,
        *,
        remote_epoch: str | None = None,
        remote_head: int | None = None,
        error: str | None = None,
        reconciled: bool = False,
        health: PeerHealth | None = None,
        sync_version: int | None = None,
    ) -> None:
        now = self.now_ms()
        await self.db.write(
            lambda c: note_peer_txn(c, peer_id, now, remote_epoch, remote_head, error, reconciled, health, sync_version)
        )

    async def wanted(self, peer_id: str, now_ms: int, limit: int) -> list[str]:
        return await self.db.read(lambda c: wanted_hashes(c, peer_id, now_ms, limit))

    async def want_failed(self, peer_id: str, hashes: list[str], now_ms: int) -> None:
        await self.db.write(lambda c: want_failed_txn(c, peer_id, hashes, now_ms))

    async def digest(self, v: int = PROTOCOL_VERSION, space: str | None = None) -> Digest:
        return await self.db.read(lambda c: digest(c, self.node_id, v, space))

    async def add_peer(self, peer: PeerIn) -> PeerStatus:
        check_peer_url(peer.url)
        if peer.node_id == self.node_id:
            raise InvalidInput("a node cannot peer with itself", field="$.node_id", code="self_peer")
        now = self.now_ms()
        await self.db.write(lambda c: add_peer_txn(c, peer.url, peer.node_id, now, peer.spaces))
        return next(p for p in await self.statuses() if p.node_id == peer.node_id)

    async def listing(self) -> PeerList:
        now = self.now_ms()
        return await self.db.read(lambda c: peer_list(c, now))

    async def statuses(self) -> list[PeerStatus]:
        now = self.now_ms()
        return await self.db.read(lambda c: peer_statuses(c, now))


def changes_page(conn: Conn, node_id: str, since: int, limit: int, exclude_origin: str | None, v: int) -> Page:
    """`SyncStore.changes`: the federated records after `since` in seq order (at most `limit` scanned) served to
    `exclude_origin`, whose own records are left out."""
    epoch, head = _position(conn)
    sql = (
        "SELECT seq, hash, version, body, seq IN (SELECT seq FROM void_records) FROM records"
        f" WHERE scope = 'federation' AND seq > :since AND origin IS NOT :peer AND {SERVED}"
        " ORDER BY seq LIMIT :limit"
    )
    if engine_of(conn) == POSTGRESQL:
        sql = (
            "SELECT seq, hash, version, body, seq IN (SELECT seq FROM void_records) FROM records"
            " WHERE scope = 'federation' AND seq > :since AND origin IS DISTINCT FROM CAST(:peer AS text)"
            f" AND {SERVED_PG} ORDER BY seq LIMIT :limit"
        )
    rows = conn.execute(sql, {"since": since, "limit": limit, **_serving(conn, node_id, exclude_origin)}).fetchall()
    scanned = [(int(r[0]), r[1], r[2], bytes(r[3])) for r in rows]
    more = len(scanned) == limit and scanned[-1][0] < head
    # records a peer of protocol v cannot store, and records flagged void (node/store/void.py), are
    # skipped; `next` moves past them all the same
    served = {int(r[0]) for r in rows if not r[4]}
    items = [item for item in scanned if item[0] in served and compat.servable(v, item[2], item[3])]
    return Page(epoch, head, scanned[-1][0] if more else head, more, items)


def fetch_items(conn: Conn, node_id: str, ids: list[str], v: int, peer_id: str | None) -> list[tuple[str, str, bytes]]:
    """`SyncStore.fetch`: the federated records served to `peer_id` whose address or version is one of `ids`."""
    sql = FETCH_SQL_PG if engine_of(conn) == POSTGRESQL else FETCH_SQL
    rows = conn.execute(sql, {"ids": any_of(conn, ids)[1], **_serving(conn, node_id, peer_id)}).fetchall()
    found = [(r[0], r[1], bytes(r[2])) for r in rows]
    return [item for item in found if compat.servable(v, item[1], item[2])]


def reconcile_snapshot(
    conn: Conn, node_id: str, v: int, peer_id: str | None
) -> tuple[str, int, list[tuple[int, bytes]]]:
    """`SyncStore.reconcile_items`: (epoch, head, the sorted (created_ms, version) items served to `peer_id`)."""
    epoch, head = _position(conn)
    sql = (
        # created_ms >= 0: records dated before 1970 are refused now, but a node may hold some from before
        # the unary + keeps the planner on records_time_version's order (no sort of the whole log)
        # records flagged void are outside the set (docs/format-v3.md 7.6); so are the records of a space
        # the peer does not host, or this node does not (`served_spaces`)
        "SELECT created_ms, version FROM records WHERE +scope = 'federation' AND created_ms >= 0"
        f" AND seq NOT IN (SELECT seq FROM void_records) AND {SERVED} ORDER BY created_ms, version"
    )
    if engine_of(conn) == POSTGRESQL:  # no unary + there (record 50)
        sql = (
            "SELECT created_ms, version FROM records WHERE scope = 'federation' AND created_ms >= 0"
            f" AND seq NOT IN (SELECT seq FROM void_records) AND {SERVED_PG} ORDER BY created_ms, version"
        )
    rows = conn.execute(sql, _serving(conn, node_id, peer_id)).fetchall()
    return epoch, head, _items(conn, v, rows)


def set_snapshot(conn: Conn, v: int, space: str | None) -> tuple[str, int, list[tuple[int, bytes]]]:
    """`SyncStore.set_items`: as `reconcile_snapshot`, over one set: the public federation (`space` None) or one
    space."""
    epoch, head = _position(conn)
    sql = (
        "SELECT created_ms, version FROM records WHERE +scope = 'federation' AND created_ms >= 0"
        " AND seq NOT IN (SELECT seq FROM void_records) AND space IS ? ORDER BY created_ms, version"
    )
    if engine_of(conn) == POSTGRESQL:
        sql = (
            "SELECT created_ms, version FROM records WHERE scope = 'federation' AND created_ms >= 0"
            " AND seq NOT IN (SELECT seq FROM void_records) AND space IS NOT DISTINCT FROM CAST(? AS text)"
            " ORDER BY created_ms, version"
        )
    return epoch, head, _items(conn, v, conn.execute(sql, (space,)).fetchall())


def hosting_snapshot(conn: Conn, v: int, space: str, peer_id: str) -> list[tuple[int, bytes]]:
    """`SyncStore.hosting_items`: the items of the hosting records of `space` naming `peer_id`."""
    allowed = peer_filter(conn, peer_id)
    if allowed is not None and space not in allowed:
        return []
    sql = (
        "SELECT created_ms, version FROM records WHERE space = ? AND kind = 'space_host'"
        " AND +scope = 'federation' AND created_ms >= 0 AND seq NOT IN (SELECT seq FROM void_records)"
        " AND json_extract(CAST(body AS TEXT), '$.node') = ? ORDER BY created_ms, version"
    )
    if engine_of(conn) == POSTGRESQL:
        sql = (
            "SELECT created_ms, version FROM records WHERE space = ? AND kind = 'space_host'"
            " AND scope = 'federation' AND created_ms >= 0 AND seq NOT IN (SELECT seq FROM void_records)"
            f" AND {BODY_JSON_TEXT_PG}::json ->> 'node' = ? ORDER BY created_ms, version"
        )
    return _items(conn, v, conn.execute(sql, (space, peer_id)).fetchall())


def wanted_hashes(conn: Conn, peer_id: str, now_ms: int, limit: int) -> list[str]:
    """`SyncStore.wanted`: the addresses to fetch from `peer_id` now, the longest due first."""
    rows = conn.execute(
        "SELECT w.hash FROM sync_wanted w WHERE w.peer_id = ? AND w.next_ms <= ? AND w.attempts < ?"
        " AND NOT EXISTS (SELECT 1 FROM records r WHERE r.hash = w.hash) ORDER BY w.next_ms LIMIT ?",
        (peer_id, now_ms, MAX_WANT_ATTEMPTS, limit),
    ).fetchall()
    return [r[0] for r in rows]


def note_peer_txn(
    conn: Conn,
    peer_id: str,
    now: int,
    remote_epoch: str | None,
    remote_head: int | None,
    error: str | None,
    reconciled: bool,
    health: PeerHealth | None,
    sync_version: int | None,
) -> None:
    """`SyncStore.note_peer`: what the puller learnt of a peer (its position, an error, a reconciliation, its health,
    the protocol version spoken)."""
    if sync_version is not None:
        note_sync_version_txn(conn, peer_id, sync_version)
    if health is not None:
        conn.execute("UPDATE peers SET health = ? WHERE node_id = ?", (msgspec.json.encode(health).decode(), peer_id))
    if error is not None:
        conn.execute("UPDATE peers SET last_error = ?, last_error_ms = ? WHERE node_id = ?", (error, now, peer_id))
        return
    sql = (
        "UPDATE peers SET last_ok_ms = :now, last_error = NULL,"
        " remote_epoch = coalesce(:epoch, remote_epoch), remote_head = coalesce(:head, remote_head),"
        " caught_up_ms = CASE WHEN cursor_epoch = coalesce(:epoch, remote_epoch)"
        "   AND cursor_seq >= coalesce(:head, remote_head) THEN :now ELSE caught_up_ms END,"
        " reconciliations = reconciliations + :rec,"
        " last_reconcile_ms = CASE WHEN :rec THEN :now ELSE last_reconcile_ms END"
        " WHERE node_id = :peer"
    )
    if engine_of(conn) == POSTGRESQL:  # an integer is no condition there; the NULL parameters typed
        sql = (
            "UPDATE peers SET last_ok_ms = :now, last_error = NULL,"
            " remote_epoch = coalesce(CAST(:epoch AS text), remote_epoch),"
            " remote_head = coalesce(CAST(:head AS bigint), remote_head),"
            " caught_up_ms = CASE WHEN cursor_epoch = coalesce(CAST(:epoch AS text), remote_epoch)"
            "   AND cursor_seq >= coalesce(CAST(:head AS bigint), remote_head) THEN :now ELSE caught_up_ms END,"
            " reconciliations = reconciliations + :rec,"
            " last_reconcile_ms = CASE WHEN :rec <> 0 THEN :now ELSE last_reconcile_ms END"
            " WHERE node_id = :peer"
        )
    conn.execute(sql, {"now": now, "epoch": remote_epoch, "head": remote_head, "rec": int(reconciled), "peer": peer_id})


def served_spaces(conn: Conn, node_id: str, peer_id: str | None) -> list[str]:
    """The spaces whose records this node (`node_id`) serves to the peer `peer_id`, by space id: those it hosts and
    `identity.space_rules.may_receive` lets the peer receive (docs/spaces.md, "Which nodes host a space"), within the
    operator's filter of the peer (`peer_filter`). None for a peer (the digest of the public federation, an unknown
    asker): no space."""
    if peer_id is None:
        return []
    hosted = space_store.hosts_of_hosted(conn, node_id)
    allowed = peer_filter(conn, peer_id)
    return sorted(
        s
        for s, hosts in hosted.items()
        if may_receive(node_id, s, hosts) and may_receive(peer_id, s, hosts) and (allowed is None or s in allowed)
    )


def _items(conn: Conn, v: int, rows: list[Any]) -> list[tuple[int, bytes]]:
    """Rows of (created_ms, version) as a reconciliation item vector, at protocol `v` only the servable ones."""
    if v != PROTOCOL_VERSION:
        keep = servable_versions(conn, v, [h for _, h in rows])
        rows = [(ms, h) for ms, h in rows if h in keep]
    return [(int(ms), bytes.fromhex(h)) for ms, h in rows]


def peer_filter(conn: Conn, peer_id: str) -> frozenset[str] | None:
    """The operator's filter of spaces for `peer_id` (`bbs peer add --spaces`): the only spaces served to it and
    taken from it; None: every space both nodes host (or no such peer)."""
    row = conn.execute("SELECT spaces FROM peers WHERE node_id = ?", (peer_id,)).fetchone()
    return None if row is None or row[0] is None else frozenset(json.loads(row[0]))


def _serving(conn: Conn, node_id: str, peer_id: str | None) -> dict[str, Any]:
    """The parameters of `SERVED` (`SERVED_PG`) for an answer to `peer_id`: the spaces served, the peer, its
    operator's filter; the lists as the engine takes them (`any_of`)."""
    allowed = None if peer_id is None else peer_filter(conn, peer_id)
    return {
        "served": any_of(conn, served_spaces(conn, node_id, peer_id))[1],
        "peer": peer_id,
        "allowed": None if allowed is None else any_of(conn, sorted(allowed))[1],
    }


def check_peer_url(url: str) -> None:
    """Refuse a peer URL the sync client could not call: PeerIn's pattern checks only its overall shape."""
    try:
        parsed = URL(url)
        port = parsed.port
    except (ValueError, UnicodeError) as exc:
        raise InvalidInput(f"not a usable peer URL: {exc}", field="$.url", code="invalid_peer_url") from None
    if not parsed.raw_host or "%" in parsed.raw_host:
        raise InvalidInput("the peer URL needs a host name or an IP address", field="$.url", code="invalid_peer_url")
    if parsed.user is not None or parsed.password is not None:
        raise InvalidInput(
            "the peer URL cannot carry credentials (peers authenticate by signature)",
            field="$.url",
            code="invalid_peer_url",
        )
    if not port:
        raise InvalidInput("the peer URL's port must be 1 to 65535", field="$.url", code="invalid_peer_url")


# ---- transaction bodies (shared with the CLI, which runs them with db.write_sync / read_sync) -------------


def _position(conn: Conn) -> tuple[str, int]:
    epoch = conn.execute("SELECT value FROM node_meta WHERE key = 'epoch'").fetchone()[0]
    head = conn.execute("SELECT coalesce(max(seq), 0) FROM records").fetchone()[0]
    return str(epoch), int(head)


def _json(values: list[str]) -> str:
    return json.dumps(values)


def _targets(record: dict[str, Any]) -> list[str]:
    if record.get("kind") == "entry":
        return [link["target"] for link in record.get("links", [])]
    if record.get("kind") == "link":
        return [record["source"], record["target"]]
    return []


def want_failed_txn(conn: Conn, peer_id: str, hashes: list[str], now_ms: int) -> None:
    """Wanted records from this peer not obtained: try again later (2, 4, 8 ... s, capped), up to MAX_WANT_ATTEMPTS."""
    sql = (
        "UPDATE sync_wanted SET attempts = attempts + 1,"
        " next_ms = ? + min(?, 1000 * (1 << (attempts + 1)))"
        " WHERE peer_id = ? AND hash IN (SELECT value FROM json_each(?))"
    )
    if engine_of(conn) == POSTGRESQL:  # two-argument min is LEAST there (record 50)
        sql = (
            "UPDATE sync_wanted SET attempts = attempts + 1,"
            " next_ms = CAST(? AS bigint)"
            "   + LEAST(CAST(? AS bigint), 1000 * (CAST(1 AS bigint) << CAST(attempts + 1 AS integer)))"
            " WHERE peer_id = ? AND hash = ANY(?)"
        )
    conn.execute(sql, (now_ms, MAX_WANT_BACKOFF_MS, peer_id, any_of(conn, hashes)[1]))


def ingest_txn(
    conn: Conn,
    peer_id: str,
    records: list[Verified],
    invalid: list[Invalid],
    cursor: Cursor | None,
    now_ms: int,
    authority: Authority | None = None,
    *,
    recheck: bool = True,
    too_new_from: int | None = None,
) -> list[Outcome]:
    """Store a batch from a peer: one set-based append, or record by record when that fails (each then in its
    own savepoint, so one failure never sinks the batch). Counters and the cursor are written in this same
    transaction.

    First the records whose authority depends on key histories are decided (node/federation/waiting.py, against
    `authority`, the writer's cache; a fresh one is loaded from the log when none is given): the valid ones are
    stored with the batch, the others answered `waiting`, `dropped_waiting`, `void` or `invalid`; waiting records
    the batch's key events decide are stored in this same transaction (`recheck`), under the peer they came from.

    A record the projections refuse (`REFUSED`) is the peer's fault: `invalid`, reason `store_refused`. Any
    other error is a fault of this node's code: logged with its traceback and counted `internal`; the cursor
    still moves past it (the puller backs off), and a wanted record that met one counts as not obtained, so
    its fetch is retried with backoff and then given up, never in a loop without end.

    A record refused only for being too new (`TOO_NEW`) is counted `too_new` and never remembered; with a cursor,
    `too_new_from` is kept beside it (`write_cursor_txn`).
    """
    authority = Authority() if authority is None else authority
    named = {v.record["target"] for v in records if v.record.get("kind") == "redaction"}
    later = [v for v in records if v.hash in named and v.record.get("kind") != "redaction"]
    if later and len(later) < len(records):  # a body after the redactions naming it: it never reaches the disk
        first = [v for v in records if v.hash not in named or v.record.get("kind") == "redaction"]
        done = ingest_txn(conn, peer_id, first, [], None, now_ms, authority, recheck=recheck)
        return done + ingest_txn(conn, peer_id, later, invalid, cursor, now_ms, authority, recheck=recheck,
                                 too_new_from=too_new_from)  # fmt: skip
    # a body a stored redaction (or purge) holds against is checked in memory and never stored, not even to wait:
    # only its tombstone (issue 39)
    redacted = redaction_effects.screen_txn(conn, [(v.hash, v.version, v.record) for v in records], now_ms)
    screened = [Outcome(v.hash, "void", "redacted") for v in records if v.version in redacted]
    records = [v for v in records if v.version not in redacted] if redacted else records
    waiting.count_txn(conn, peer_id, void=len(screened))  # a peer serving a redacted body shows in its counters
    gated = waiting_gate.gate_txn(conn, authority, peer_id, records, now_ms, recheck=recheck)
    voided = {str(o.hash): str(o.reason) for o in gated.outcomes if o.outcome == "void"}
    space_gate.remember_void_txn(conn, records, voided, now_ms)  # a link naming one is decided (decisions.md 75)
    gated.outcomes.extend(screened)
    # records of a space: only those of a space this node hosts, valid by `identity.spaces.resolve` (docs/sync.md)
    spaced = space_gate.gate_spaces_txn(conn, gated.now, peer_filter(conn, peer_id), authority.judged, now_ms)
    records, invalid = spaced.now, [*invalid, *gated.invalid, *spaced.refused]
    if spaced.joining:  # named a host of a space this node cannot decide yet: reconcile with the peer at once
        authority.wake.add(peer_id)
    appended, failed, faults = _append_batch(conn, peer_id, records, now_ms)
    kept = [(v, result) for v, result in zip(records, appended, strict=True) if result is not None]
    targets, missing = _want_missing_targets(conn, peer_id, kept, now_ms)
    outcomes = [
        _outcome(v.hash, seq, inserted, pending=bool(missing.intersection(targets.get(v.hash, ()))))
        for v, (seq, inserted) in kept
    ]
    for bad in [*invalid, *failed]:
        if bad.reason == TOO_NEW:
            outcomes.append(Outcome(bad.hash, "too_new"))
            continue
        outcomes.append(Outcome(bad.hash, "invalid", bad.reason))
        _count_invalid(conn, peer_id, bad)
    if faults:
        outcomes.extend(faults)
        want_failed_txn(conn, peer_id, [str(o.hash) for o in faults], now_ms)
    _count_outcomes(conn, peer_id, outcomes, internal=len(faults))
    outcomes.extend(gated.outcomes)
    # key events and pages stored: the authors' records already in the log may change verdict (7.6)
    stored = [v.record for v, (_, inserted) in kept if inserted]
    settle_authority_txn(conn, authority, void.authors_of_authority(stored), now_ms)
    redaction_effects.redecide_txn(conn, stored, now_ms)  # who moderates a space may have changed (issue 39)
    # a record stored earlier naming one of the batch's records of a space from outside it (docs/decisions.md 75)
    space_gate.void_naming_txn(conn, [(v.hash, v.record) for v, (_, inserted) in kept if inserted], now_ms)
    _store_released_txn(conn, authority, gated.released, now_ms)
    if cursor is not None:
        write_cursor_txn(conn, peer_id, cursor, too_new_from)
    return outcomes


def settle_authority_txn(conn: Conn, authority: Authority, authors: set[str], now_ms: int) -> None:
    """After key events of `authors` were stored (sync ingest, the REST key-event route): drop the events a better
    one displaced from the kept set (docs/format-v3.md 3.4) and re-check what waited for them (judged in the state
    they led to), then decide the authors' stored records again (7.6)."""
    if not authors:
        return
    dropped = drop_displaced_txn(conn, authority, authors, now_ms)
    if dropped:  # what waited for them, or for the keys they installed (now losing keys)
        deps: list[waiting.Dep] = [event_dep(address) for address in dropped]
        deps += [author_deps(author) for author in sorted(authors)]
        _store_released_txn(conn, authority, waiting_gate.recheck_txn(conn, authority, tuple(deps), 0, now_ms), now_ms)
    void.reflag_txn(conn, authority, authors, now_ms)
    # a redaction those flagged void released the versions it set aside: into the log again (docs/decisions.md 69)
    redaction_effects.restore_txn(conn, authority, now_ms)


def recheck_waiting_txn(
    authority: Authority, deps: tuple[waiting.Dep, ...], after_id: int, now_ms: int, conn: Conn
) -> None:
    """A writer job of its own: re-check the waiting records an earlier transaction left (more than it could)."""
    authority.ensure_txn(conn)
    _store_released_txn(conn, authority, waiting_gate.recheck_txn(conn, authority, deps, after_id, now_ms), now_ms)


def _store_released_txn(conn: Conn, authority: Authority, released: dict[str, list[Verified]], now_ms: int) -> None:
    """Store waiting records a re-check found valid, each as if it had just arrived from the peer it came from: the
    key events and pages of every peer first, so a record is never stored before the key event that installed its key
    (`node.store.void.reflag_txn` reads a key's records from that event's seq on)."""
    for authority_kinds in (True, False):
        for peer_id, records in sorted(released.items()):
            part = [v for v in records if (v.record.get("kind") in AUTHORITY_KINDS) == authority_kinds]
            if part:
                ingest_txn(conn, peer_id, part, [], None, now_ms, authority, recheck=False)


def _append_batch(
    conn: Conn, peer_id: str, records: list[Verified], now_ms: int
) -> tuple[list[tuple[int, bool] | None], list[Invalid], list[Outcome]]:
    """`ingest`, step 1: append the batch in one go, else record by record. Returns each record's
    `(seq, inserted)` (None when it was not stored), the records the projections refused, and this node's
    faults."""
    try:
        return list(_append_all(conn, peer_id, records, now_ms)), [], []
    except db.TransactionLost:
        raise  # SQLite ended the transaction (e.g. disk full): nothing of this batch can be kept
    except Exception:  # refused, or a fault of ours: record by record finds the records, and which it is
        pass
    appended: list[tuple[int, bool] | None] = []
    failed: list[Invalid] = []
    faults: list[Outcome] = []
    for v in records:
        try:
            appended.append(_append_all(conn, peer_id, [v], now_ms)[0])
        except REFUSED as exc:  # counted, never fatal to the batch
            failed.append(Invalid(v.hash, "store_refused", str(exc)))
            appended.append(None)
        except db.TransactionLost:
            raise
        except Exception as exc:
            log.exception("record %s from %s failed in this node's own code; counted internal", v.hash, peer_id)
            faults.append(Outcome(v.hash, "internal", type(exc).__name__))
            appended.append(None)
    return appended, failed, faults


def _want_missing_targets(
    conn: Conn, peer_id: str, kept: list[tuple[Verified, tuple[int, bool]]], now_ms: int
) -> tuple[dict[str, list[str]], set[str]]:
    """`ingest`, step 2: the stored records are wanted no more; the link targets of the newly inserted ones
    that this node does not hold are wanted from this peer. Returns each inserted record's targets and the
    missing ones."""
    if kept:  # however they got here, they are here
        test, here = any_of(conn, [v.hash for v, _ in kept])
        conn.execute(f"DELETE FROM sync_wanted WHERE hash {test}", (here,))
    targets = {v.hash: _targets(v.record) for v, (_, inserted) in kept if inserted}
    wanted = sorted({t for ts in targets.values() for t in ts})
    missing: set[str] = set()
    if wanted:
        sql = "SELECT value FROM json_each(?) WHERE value NOT IN (SELECT hash FROM records)"
        if engine_of(conn) == POSTGRESQL:
            sql = (
                "SELECT value FROM unnest(CAST(? AS text[])) AS w(value) WHERE value NOT IN (SELECT hash FROM records)"
            )
        rows = conn.execute(sql, (any_of(conn, wanted)[1],)).fetchall()
        missing = {r[0] for r in rows}
    if missing:
        conn.executemany(
            "INSERT INTO sync_wanted (hash, peer_id, next_ms, first_ms) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (hash) DO NOTHING",
            [(h, peer_id, now_ms, now_ms) for h in sorted(missing)],
        )
    return targets, missing


def _outcome(record_hash: str, seq: int, inserted: bool, pending: bool) -> Outcome:
    """`ingest`, step 3: what became of a stored record (`pending`: it links to a record not held here)."""
    if seq == projections.REFUSED_SEQ:
        return Outcome(record_hash, "overflow")
    if not inserted:
        return Outcome(record_hash, "duplicate")
    if pending:
        return Outcome(record_hash, "pending_link")
    return Outcome(record_hash, "saved")


COUNT_INVALID_SQL = (
    "INSERT INTO peer_invalid (node_id, reason, count, last_hash, last_detail) VALUES (?, ?, 1, ?, ?)"
    " ON CONFLICT (node_id, reason) DO UPDATE SET count = count + 1, last_hash = excluded.last_hash,"
    " last_detail = excluded.last_detail"
)
# a bare `count` is ambiguous there (the row's, or excluded's): the row's, by its table's name
COUNT_INVALID_SQL_PG = COUNT_INVALID_SQL.replace("count = count + 1", "count = peer_invalid.count + 1")


def _count_invalid(conn: Conn, peer_id: str, bad: Invalid) -> None:
    """`ingest`, step 4: count an invalid record against its peer by reason, keeping the latest one."""
    sql = COUNT_INVALID_SQL_PG if engine_of(conn) == POSTGRESQL else COUNT_INVALID_SQL
    conn.execute(sql, (peer_id, bad.reason, bad.hash, bad.detail[:500]))


def _count_outcomes(conn: Conn, peer_id: str, outcomes: list[Outcome], internal: int) -> None:
    """`ingest`, step 5: add the batch's outcomes to the peer's counters."""
    counts = {
        word: sum(1 for o in outcomes if o.outcome == word)
        for word in ("saved", "duplicate", "invalid", "pending_link", "overflow", "too_new")
    }
    counts["internal"] = internal
    conn.execute(
        "UPDATE peers SET saved = saved + :saved, duplicate = duplicate + :duplicate, invalid = invalid + :invalid,"
        " pending_link = pending_link + :pending_link, internal = internal + :internal,"
        " overflow = overflow + :overflow, too_new = too_new + :too_new WHERE node_id = :peer",
        {**counts, "peer": peer_id},
    )


def _append_all(conn: Conn, peer_id: str, records: list[Verified], now_ms: int) -> list[tuple[int, bool]]:
    """Append records inside a savepoint: all of them, or none (the error raised)."""
    incoming = [
        projections.Incoming(v.record, v.hash, v.decoded, str(v.record.get("scope", "federation")), v.body)
        for v in records
    ]
    with db.savepoint(conn, "sync_records"):
        return projections.append_many(conn, incoming, origin=peer_id, now_ms=now_ms)


def add_peer_txn(conn: Conn, url: str, node_id: str, now_ms: int, spaces: list[str] | None = None) -> None:
    """Configure a peer (or change its URL and its filter of spaces; its cursor and counters are kept). `spaces`:
    the operator's filter, the only spaces served to the peer and taken from it; None: every space both host."""
    if not keys.is_did(node_id):
        raise InvalidInput("node_id must be the peer node's Ed25519 did:key", field="$.node_id")
    mine = conn.execute("SELECT value FROM node_meta WHERE key = 'node_id'").fetchone()
    if mine is not None and mine[0] == node_id:
        raise InvalidInput("a node cannot peer with itself", field="$.node_id", code="self_peer")
    conn.execute(
        "INSERT INTO peers (node_id, url, added_ms, spaces) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (node_id) DO UPDATE SET url = excluded.url, spaces = excluded.spaces",
        (node_id, url.rstrip("/"), now_ms, None if spaces is None else _json(sorted(set(spaces)))),
    )


def peer_statuses(conn: Conn, now_ms: int) -> list[PeerStatus]:
    """Every peer with cursor, lag, last error and counters."""
    reasons: dict[str, dict[str, int]] = {}
    for node_id, reason, count in conn.execute("SELECT node_id, reason, count FROM peer_invalid").fetchall():
        reasons.setdefault(node_id, {})[reason] = int(count)
    out = []
    for r in conn.execute("SELECT * FROM peers ORDER BY node_id").fetchall():
        same_epoch = r["remote_epoch"] is not None and r["remote_epoch"] == r["cursor_epoch"]
        lag_records = (
            max(0, r["remote_head"] - r["cursor_seq"]) if same_epoch and r["remote_head"] is not None else None
        )
        lag_seconds = None
        if lag_records == 0:
            lag_seconds = 0.0
        elif r["caught_up_ms"] is not None:
            lag_seconds = round(max(0, now_ms - r["caught_up_ms"]) / 1000, 3)
        out.append(
            PeerStatus(
                node_id=r["node_id"],
                url=r["url"],
                added_at=format_ms(r["added_ms"]),
                cursor_epoch=r["cursor_epoch"],
                cursor_seq=r["cursor_seq"],
                remote_head=r["remote_head"],
                lag_records=lag_records,
                lag_seconds=lag_seconds,
                last_ok_at=_fmt(r["last_ok_ms"]),
                last_error=r["last_error"],
                last_error_at=_fmt(r["last_error_ms"]),
                reconciliations=r["reconciliations"],
                last_reconcile_at=_fmt(r["last_reconcile_ms"]),
                counters=PeerCounters(
                    saved=r["saved"],
                    duplicate=r["duplicate"],
                    invalid=r["invalid"],
                    pending_link=r["pending_link"],
                    overflow=r["overflow"],
                    internal=r["internal"],
                    waiting=r["waiting"],
                    dropped_waiting=r["dropped_waiting"],
                    void=r["void"],
                    too_new=r["too_new"],
                    invalid_reasons=reasons.get(r["node_id"], {}),
                ),
                health=_health(r["health"]),
                sync_version=r["sync_version"],
                too_new_from=r["too_new_from"],
                spaces=None if r["spaces"] is None else list(json.loads(r["spaces"])),
            )
        )
    return out


def _health(raw: str | None) -> PeerHealth:
    """The puller's last note of a peer's health (none yet: all zero)."""
    if raw is None:
        return PeerHealth()
    try:
        return msgspec.json.decode(raw, type=PeerHealth)
    except msgspec.DecodeError:  # written by an older or newer node: not worth failing the listing over
        return PeerHealth()


def peer_list(conn: Conn, now_ms: int) -> PeerList:
    """`GET /v1/peers` and `bbs peers`: every peer's status, and the authors with equivocated addresses."""
    authors = [AuthorEquivocations(a, n) for a, n in sorted(equivocation.by_author(conn).items())]
    return PeerList(peers=peer_statuses(conn, now_ms), equivocating_authors=authors)


def _fmt(ms: int | None) -> str | None:
    return format_ms(ms) if ms is not None else None


def digest(conn: Conn, node_id: str, v: int = PROTOCOL_VERSION, space: str | None = None) -> Digest:
    """Version count and SHA-256 over the sorted versions of federated records not flagged void, each followed by a
    newline: equal digests mean equal valid bodies. Of the public federation, or of one `space` (its records held
    here: equal on its hosts once in sync). At protocol `v` 2, over the v2-compatible ones (sync/compat.py)."""
    h = hashlib.sha256()
    count = 0
    # in the unique version index's order (the unary + keeps the planner from sorting the whole log instead)
    # valid versions only: records flagged void are left out (docs/format-v3.md 7.6)
    # the public federation, or one space: the records of spaces are counted by each space's digest, never here
    sql = (
        "SELECT version FROM records WHERE +scope = 'federation' AND seq NOT IN (SELECT seq FROM void_records)"
        " AND space IS ? ORDER BY version"
    )
    if engine_of(conn) == POSTGRESQL:  # bytewise order there too: `version` collates "C" (record 76)
        sql = (
            "SELECT version FROM records WHERE scope = 'federation' AND seq NOT IN (SELECT seq FROM void_records)"
            " AND space IS NOT DISTINCT FROM CAST(? AS text) ORDER BY version"
        )
    rows: Any = conn.execute(sql, (space,))
    if v != PROTOCOL_VERSION:  # the v2-compatible ones (a list: their bodies are read on the same connection)
        versions = [r[0] for r in rows]
        keep = servable_versions(conn, v, versions)
        rows = [(version,) for version in versions if version in keep]
    for (version,) in rows:
        h.update(version.encode("ascii") + b"\n")
        count += 1
    return Digest(v=v, node_id=node_id, count=count, sha256=h.hexdigest())


# ---- protocol versions (docs/format-v3.md, section 8) -------------------------------------------------------

BODIES_PER_READ = 500


def servable_versions(conn: Conn, v: int, versions: list[str]) -> set[str]:
    """Those of `versions` (federated versions held) `sync.compat.servable` allows at protocol `v`; a version is
    read from the log only the first time it is asked about (the answer is remembered by version)."""
    keep = {version for version in versions if compat.decided(version)}
    unknown = [version for version in versions if compat.decided(version) is None]
    for start in range(0, len(unknown), BODIES_PER_READ):
        chunk = unknown[start : start + BODIES_PER_READ]
        test, listed = any_of(conn, chunk)
        rows = conn.execute(f"SELECT version, body FROM records WHERE version {test}", (listed,)).fetchall()
        keep.update(r[0] for r in rows if compat.servable(v, r[0], bytes(r[1])))
    return keep


def write_cursor_txn(conn: Conn, peer_id: str, cursor: Cursor, too_new_from: int | None) -> None:
    """Save a peer's cursor, taken by this release (its protocol version), with the lower of the kept and the given
    `too_new_from`; a cursor of another epoch than the kept one replaces it (positions of another store)."""
    sql = (
        "UPDATE peers SET too_new_from = CASE WHEN cursor_epoch IS NOT :epoch THEN :tnf"
        "   ELSE min(coalesce(too_new_from, :tnf), coalesce(:tnf, too_new_from)) END,"
        " cursor_epoch = :epoch, cursor_seq = :seq, cursor_version = :version WHERE node_id = :peer"
    )
    if engine_of(conn) == POSTGRESQL:  # LEAST of two non-NULL values, or NULL as min (both coalesce to the same)
        sql = (
            "UPDATE peers SET too_new_from = CASE WHEN cursor_epoch IS DISTINCT FROM CAST(:epoch AS text)"
            "   THEN CAST(:tnf AS bigint)"
            "   ELSE LEAST(coalesce(too_new_from, CAST(:tnf AS bigint)), coalesce(CAST(:tnf AS bigint), too_new_from))"
            " END, cursor_epoch = :epoch, cursor_seq = :seq, cursor_version = :version WHERE node_id = :peer"
        )
    conn.execute(
        sql,
        {"epoch": cursor.epoch, "seq": cursor.seq, "tnf": too_new_from, "version": PROTOCOL_VERSION, "peer": peer_id},
    )


def cursor_version(conn: Conn, peer_id: str) -> CursorVersion | None:
    """A peer cursor's protocol version and `too_new_from` (None: no cursor)."""
    row = conn.execute(
        "SELECT cursor_version, too_new_from FROM peers WHERE node_id = ? AND cursor_epoch IS NOT NULL", (peer_id,)
    ).fetchone()
    if row is None:
        return None
    # a cursor without a version was written by a release before 0023 while it migrated: of protocol v2
    return CursorVersion(2 if row[0] is None else int(row[0]), None if row[1] is None else int(row[1]))


def upgrade_cursor_txn(conn: Conn, peer_id: str) -> None:
    """`SyncStore.upgrade_cursor`: back to just before `too_new_from` (cleared), and of this release's version."""
    sql = (
        "UPDATE peers SET cursor_seq = CASE WHEN too_new_from IS NULL THEN cursor_seq"
        "   ELSE max(0, min(cursor_seq, too_new_from - 1)) END,"
        " too_new_from = NULL, cursor_version = ? WHERE node_id = ?"
    )
    if engine_of(conn) == POSTGRESQL:  # GREATEST and LEAST (cursor_seq and too_new_from are not NULL here)
        sql = (
            "UPDATE peers SET cursor_seq = CASE WHEN too_new_from IS NULL THEN cursor_seq"
            "   ELSE GREATEST(0, LEAST(cursor_seq, too_new_from - 1)) END,"
            " too_new_from = NULL, cursor_version = ? WHERE node_id = ?"
        )
    conn.execute(sql, (PROTOCOL_VERSION, peer_id))


def note_sync_version_txn(conn: Conn, peer_id: str, sync_version: int) -> None:
    """The protocol version this node now speaks with a peer (`bbs peers` shows it)."""
    conn.execute("UPDATE peers SET sync_version = ? WHERE node_id = ?", (sync_version, peer_id))


def held_versions(conn: Conn, versions: list[str]) -> set[str]:
    """Those of `versions` the log holds."""
    test, listed = any_of(conn, versions)
    rows = conn.execute(f"SELECT version FROM records WHERE version {test}", (listed,))
    return {str(r[0]) for r in rows.fetchall()}


# the tables whose versions `NodeSyncStore.refused` consults (each has a unique index on `version`)
REFUSED_TABLES = ("records", "refused_versions", "waiting", "void_versions", "void_records")


# one index range a prefix and table: a version beginning with `p` sorts in [p, p || 'g'), hex digits being below 'g'
PREFIX_SQL = "SELECT p.value FROM json_each(?) AS p WHERE " + " OR ".join(
    f"EXISTS (SELECT 1 FROM {table} WHERE version >= p.value AND version < p.value || 'g')" for table in REFUSED_TABLES
)
# PostgreSQL's: the prefixes as an array; the range compares bytewise, `version` collating "C" (record 76)
PREFIX_SQL_PG = "SELECT p.value FROM unnest(CAST(? AS text[])) AS p(value) WHERE " + " OR ".join(
    f"EXISTS (SELECT 1 FROM {table} WHERE version >= p.value AND version < p.value || 'g')" for table in REFUSED_TABLES
)


def prefixed_versions(conn: Conn, prefixes: list[str]) -> set[str]:
    """Those of `prefixes` (lowercase hex) that begin a version of any of `REFUSED_TABLES` (decision 74)."""
    sql = PREFIX_SQL_PG if engine_of(conn) == POSTGRESQL else PREFIX_SQL
    return {str(r[0]) for r in conn.execute(sql, (any_of(conn, prefixes)[1],)).fetchall()}


def store_epoch(conn: Conn) -> str:
    """The store epoch of this database (a restore gives it a new one)."""
    return str(conn.execute("SELECT value FROM node_meta WHERE key = 'epoch'").fetchone()[0])


def holds_key_event(conn: Conn, author: str, address: str) -> bool:
    """Whether the log holds the key event at `address` of `author`."""
    sql = "SELECT 1 FROM records WHERE hash = ? AND kind = 'key_event' AND author_id = ?"
    return conn.execute(sql, (address, author)).fetchone() is not None


def peer_node_ids(conn: Conn) -> frozenset[str]:
    """The node ids of every configured peer."""
    return frozenset(str(r[0]) for r in conn.execute("SELECT node_id FROM peers"))


NODE_KEYS_META = "node_keys"  # node_meta: this node's signing keys after a rotation (node/federation/node_key.py)


def node_keys_meta(conn: Conn) -> str | None:
    """The node's stored signing-key state (JSON), or None before any rotation of the node key."""
    return ops_store.meta_value(conn, NODE_KEYS_META)


def set_node_keys_txn(conn: Conn, value: str) -> None:
    """Store the node's signing-key state (JSON)."""
    ops_store.set_meta_txn(conn, NODE_KEYS_META, value)


# ---- replay protection of a node of several processes (node/federation/node_replay.py) ----------------------------
# Run on the process's own connection (node/store/side.py), each statement its own transaction, never the writer's.

_ADMIT_NONCE = """
WITH fresh AS (
    INSERT INTO peer_nonces (peer, nonce, expires_s) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1
)
SELECT (SELECT count(*) FROM fresh), b.boot_id, b.since_s FROM (SELECT 1) AS one LEFT JOIN peer_boot AS b ON b.id = 1
"""
# The current generation, drawn when there is none: `drawn` tells which. When another process drew one after this
# statement's snapshot, neither part gives a row, and the statement runs again.
# The first generation of a database (peer_boot_draws, a logged table, holds no row: nothing was ever accepted on it)
# refuses no signature by its date; a later one refuses those dated up to its `since`.
_DRAW_BOOT = """
WITH drawn AS (
    INSERT INTO peer_boot (id, boot_id, since_s)
    SELECT 1, %s, CASE WHEN EXISTS (SELECT 1 FROM peer_boot_draws) THEN %s ELSE 0 END
    ON CONFLICT (id) DO NOTHING
    RETURNING boot_id, since_s
), counted AS (
    INSERT INTO peer_boot_draws (id, draws) SELECT 1, 1 FROM drawn
    ON CONFLICT (id) DO UPDATE SET draws = peer_boot_draws.draws + 1
)
SELECT boot_id, since_s, true FROM drawn UNION ALL SELECT boot_id, since_s, false FROM peer_boot WHERE id = 1
"""
_SWEEP_NONCES = "DELETE FROM peer_nonces WHERE expires_s < %s"


async def admit_nonce(side: SideConnection, peer: str, nonce: str, expires_s: int) -> tuple[bool, str | None, int]:
    """Hold `peer`'s `nonce` until `expires_s`, and read the boot generation with it, in one statement: (whether the
    nonce was new, the generation's boot id or None when the database holds none, its first second)."""
    ((fresh, boot_id, since),) = await side.fetch(_ADMIT_NONCE, (peer, nonce, expires_s))
    return bool(fresh), None if boot_id is None else str(boot_id), int(since or 0)


async def draw_boot(side: SideConnection, boot_id: str, since_s: int) -> tuple[str, int, bool] | None:
    """The node's boot generation, drawn now as (`boot_id`, `since_s`, or 0 for a database's first) when the database
    holds none: (boot id, its first second, whether this call drew it); None when another process drew one after this
    statement's snapshot (ask again)."""
    rows = await side.fetch(_DRAW_BOOT, (boot_id, since_s))
    if not rows:
        return None
    found, since, drawn = rows[0]
    return str(found), int(since), bool(drawn)


async def sweep_nonces(side: SideConnection, before_s: int) -> None:
    """Delete the nonces that expired before `before_s`."""
    await side.fetch(_SWEEP_NONCES, (before_s,))
