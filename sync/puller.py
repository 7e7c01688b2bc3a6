"""The puller: read a peer's changes feed, verify, store with the cursor, fetch missing link targets, reconcile."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from identity import keys
from sync import messages as m
from sync.auth import NodeSigner, PeerBoots
from sync.client import PeerClient, SyncError, Traffic
from sync.ids_first import Ask, Bodies, FeedModes, Fetch, Policy, read_page
from sync.listed import Listed
from sync.negentropy import NegentropyError
from sync.protocol import PeerVersions
from sync.reconcile_sets import ReconcileReport, reconcile_sets
from sync.store import (
    TOO_NEW,
    Cursor,
    Invalid,
    Outcome,
    PeerConfig,
    RoundFailures,
    StoreUnavailable,
    SyncStore,
    Verified,
)
from sync.verify import verify_record
from sync.workers import POOL, VerifyPool

log = logging.getLogger("bbs.sync")
WANTED_PER_ROUND = 64
# Threads verifying one page: Ed25519 (most of a record's check) runs without the GIL, so they use every core.
VERIFY_THREADS = min(4, os.cpu_count() or 1)
# A page of at least POOL_MIN_ITEMS records is verified in the worker processes (sync/workers.py)
POOL_MIN_ITEMS = 256
NOTE_EVERY_S = 5.0  # during a catch-up, the peer's status (head, last success) is written this often
# A peer that has not added this node yet (403 unknown_peer) is asked again at most backoff(2) (2 s) apart: it
# is a step of setting up a federation, not a fault, so sync starts within seconds of the other side's `peer add`.
WAITING_BACKOFF_STEPS = 2
UNKNOWN_PEER = "unknown_peer"
# a reconciliation started at once for dropped waiting records, at most this often per peer (docs/format-v3.md 7.3)
WAKE_EVERY_S = 10.0


@dataclass
class PullReport:
    """What one pull of the changes feed did: the page's outcomes, and those of the wanted link targets fetched
    after it."""

    reset: bool = False
    more: bool = False
    outcomes: list[Outcome] = field(default_factory=list)
    wanted: list[Outcome] = field(default_factory=list)


class StoreFault(Exception):
    """Records of a peer failed in the store's own code (counted `internal`; the store logged each traceback).
    The records are past the cursor, so the loop backs off as after any failure and then goes on."""


def _check_stored(peer: PeerConfig, outcomes: list[Outcome]) -> None:
    internal = sum(1 for o in outcomes if o.outcome == "internal")
    if internal:
        raise StoreFault(f"internal: records from {peer.node_id} failed in this node's code: {internal} (see its log)")


class Wakeups:
    """Peers to reconcile with before the next round, as the store asks (`SyncStore.reconcile_wanted`: a dependency of
    records they sent that a full waiting cap dropped is stored, docs/format-v3.md 7.3; or the store's epoch changed),
    at most once per peer per `WAKE_EVERY_S`."""

    def __init__(self, store: SyncStore, clock: Callable[[], float]) -> None:
        self.store, self.clock = store, clock
        self.woken: set[str] = set()
        self.last: dict[str, float] = {}  # when each peer was last reconciled early

    async def due(self, peer_id: str) -> bool:
        """Whether to reconcile with `peer_id` now; a wake within `WAKE_EVERY_S` of the last is kept for later."""
        self.woken |= await self.store.reconcile_wanted()
        last = self.last.get(peer_id)
        if peer_id not in self.woken or (last is not None and self.clock() - last < WAKE_EVERY_S):
            return False
        self.woken.discard(peer_id)
        self.last[peer_id] = self.clock()
        log.info("peer %s: reconciling now, as the store asks (`SyncStore.reconcile_wanted`)", peer_id)
        return True


class Puller:
    """Pulls from peers into `store`, signing requests with `key`."""

    def __init__(
        self,
        store: SyncStore,
        key: keys.SigningKey | NodeSigner,
        session: aiohttp.ClientSession,
        *,
        clock: Callable[[], float] = time.time,
        limit: int = m.MAX_CHANGES_LIMIT,  # a page per request: fewer round trips and commits in a catch-up
        wait_ms: int = 20_000,
        reconcile_every_s: float = 300.0,
        min_poll_s: float = 0.25,
        feed_policy: Policy = "ids",
        listed: Listed | None = None,  # the node's server's (sync/listed.py): what each peer listed, never listed back
    ) -> None:
        self.store, self.key, self.session, self.clock = store, key, session, clock
        self.feeds = FeedModes(feed_policy, listed=listed)  # how each peer's feed is read (sync/ids_first.py)
        self.limit, self.wait_ms, self.reconcile_every_s = limit, wait_ms, reconcile_every_s
        self.min_poll_s, self.traffic = min_poll_s, Traffic()
        self.boots = PeerBoots()  # each peer's boot id, named in every signature (sync/auth.py)
        self.health: dict[str, m.PeerHealth] = {}
        self.versions, self.wakeups = PeerVersions(store, session, clock), Wakeups(store, clock)  # see each

    def client(self, peer: PeerConfig) -> PeerClient:
        health, version = self.health_of(peer.node_id), self.versions.version_of(peer.node_id)
        return PeerClient(self.session, self.key, peer.node_id, peer.url, self.traffic, health, self.boots, version)

    def health_of(self, peer_id: str) -> m.PeerHealth:
        """How pulling from this peer is going (kept in memory, written with every peer note)."""
        return self.health.setdefault(peer_id, m.PeerHealth())

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def pull_once(self, peer: PeerConfig, wait_ms: int = 0) -> PullReport:
        """One request of the changes feed, stored with its cursor; then due link targets are fetched."""
        client = self.client(peer)
        cursor = await self.store.cursor(peer.node_id)
        reply = await self.page(peer, client, cursor, wait_ms)
        if isinstance(reply, m.Reset) or (cursor is not None and reply.epoch != cursor.epoch):
            log.warning("peer %s: cursor %s no longer valid; reconciling", peer.node_id, cursor)
            await self.reconcile(peer, reset=True)
            return PullReport(reset=True, more=True)
        outcomes = await self._store_page(peer, reply, cursor, await self._verify_page(peer, reply))
        await self._noted(peer, reply, client.version)
        wanted = await self.fetch_wanted(peer)
        return PullReport(more=reply.more, outcomes=outcomes, wanted=wanted)

    async def catch_up(self, peer: PeerConfig) -> PullReport:
        """Pull pages of the changes feed until the peer has no more, as a pipeline: page n+1 is requested
        while page n is verified, and verified while page n is stored. Pages are stored in order, each in one
        transaction with the cursor after it, so what a crash or a failure loses is only what no transaction
        holds yet: the next pull asks for it again. Then due link targets are fetched (once, at the end:
        during a catch-up most targets arrive in a later page)."""
        client = self.client(peer)
        cursor = await self.store.cursor(peer.node_id)
        report = PullReport()

        def request(since: Cursor | None) -> asyncio.Task[m.ChangesReply]:
            return asyncio.create_task(self.page(peer, client, since, 0))

        fetching: asyncio.Task[m.ChangesReply] | None = request(cursor)
        storing: asyncio.Task[list[Outcome]] | None = None
        noted = time.monotonic()
        try:
            while fetching is not None:
                reply = await fetching
                fetching = None
                if isinstance(reply, m.Reset) or (cursor is not None and reply.epoch != cursor.epoch):
                    if storing is not None:
                        report.outcomes += await storing
                        storing = None
                    log.warning("peer %s: cursor %s no longer valid; reconciling", peer.node_id, cursor)
                    await self.reconcile(peer, reset=True)
                    return PullReport(reset=True, more=True, outcomes=report.outcomes)
                page_cursor = Cursor(reply.epoch, reply.next)
                if reply.more:
                    fetching = request(page_cursor)
                results = await self._verify_page(peer, reply)
                if storing is not None:
                    report.outcomes += await storing
                storing = asyncio.create_task(self._store_page(peer, reply, cursor, results))
                cursor = page_cursor
                if not reply.more or time.monotonic() - noted >= NOTE_EVERY_S:
                    report.outcomes += await storing
                    storing = None
                    await self._noted(peer, reply, client.version)
                    noted = time.monotonic()
        finally:
            if fetching is not None:  # a failure or a reset: the page requested ahead is not wanted
                fetching.cancel()
            await _settle(fetching, storing)
        report.wanted = await self.fetch_wanted(peer)
        return report

    async def page(self, peer: PeerConfig, client: PeerClient, since: Cursor | None, wait_ms: int) -> m.ChangesReply:
        """One page of the peer's feed after `since` with its bodies: asked ids first when `self.feeds` says so (the
        bodies this node lacks then fetched), by bodies otherwise or when the peer refuses ids (sync/ids_first.py)."""
        health = self.health_of(peer.node_id)
        ask, fetch, bodies = _feed_calls(client, since, self.limit, wait_ms, health)
        return await read_page(self.feeds, self.store, peer.node_id, ask, fetch, bodies, health)

    async def _noted(self, peer: PeerConfig, reply: m.Changes, v: int) -> None:
        await self.store.note_peer(peer.node_id, remote_epoch=reply.epoch, remote_head=reply.head,
                                   health=self.health_of(peer.node_id), sync_version=v)  # fmt: skip

    async def _verify_page(self, peer: PeerConfig, reply: m.Changes) -> list[Verified | Invalid]:
        # an item fetched by seq (decision 74) has no claimed address: verifying computes it
        results = await verify_many([(item.body(), item.hash or None, item.version) for item in reply.items])
        _log_refused(peer, results)
        return results

    async def _store_page(
        self, peer: PeerConfig, reply: m.Changes, cursor: Cursor | None, results: list[Verified | Invalid]
    ) -> list[Outcome]:
        """Store one verified page with the cursor after it (nothing is written when it brings nothing new)."""
        verified = [r for r in results if isinstance(r, Verified)]
        invalid = [r for r in results if isinstance(r, Invalid)]
        new_cursor = Cursor(reply.epoch, reply.next)
        if not (verified or invalid or cursor != new_cursor):
            return []
        outcomes = await self.store.ingest(peer.node_id, verified, invalid, new_cursor, too_new_from(reply, results))
        if outcomes:
            counts = collections.Counter(o.outcome for o in outcomes)
            log.info(
                "pulled %d records from %s (%s); cursor %s/%d",
                len(outcomes),
                peer.node_id,
                ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
                new_cursor.epoch,
                new_cursor.seq,
            )
        return outcomes

    async def fetch_wanted(self, peer: PeerConfig) -> list[Outcome]:
        """Fetch link targets this peer announced but we lack, within the bound and backoff the store keeps."""
        hashes = await self.store.wanted(peer.node_id, self.now_ms(), WANTED_PER_ROUND)
        if not hashes:
            return []
        try:
            outcomes, missing = await self.fetch_into_store(peer, hashes)
        except SyncError:  # a failed fetch is a try of each hash: they back off, then are given up
            await self.store.want_failed(peer.node_id, hashes, self.now_ms())
            raise
        if missing:
            await self.store.want_failed(peer.node_id, missing, self.now_ms())
        return outcomes

    async def fetch_into_store(self, peer: PeerConfig, hashes: list[str]) -> tuple[list[Outcome], list[str]]:
        """Fetch records by address or version, verify and store them. Returns (outcomes, ids not obtained)."""
        client = self.client(peer)
        outcomes: list[Outcome] = []
        missing: list[str] = []
        for start in range(0, len(hashes), m.MAX_FETCH_HASHES):
            chunk = hashes[start : start + m.MAX_FETCH_HASHES]
            wanted = set(chunk)
            try:
                reply = await client.fetch(chunk)
            except SyncError:
                self.health_of(peer.node_id).fetch_failures += 1
                raise
            verified: list[Verified] = []
            invalid = [
                Invalid(item.hash, "unrequested", "the peer sent a record that was not asked for")
                for item in reply.items
                if item.hash not in wanted and item.version not in wanted
            ]
            asked: list[tuple[bytes, str | None, str | None]] = [
                (bytes(item.record), item.hash, item.version)
                for item in reply.items
                if item.hash in wanted or item.version in wanted
            ]
            obtained: set[str] = set()
            for result in await verify_many(asked):
                if isinstance(result, Verified):
                    verified.append(result)
                    obtained.update((result.hash, result.version))
                elif isinstance(result, Invalid):
                    invalid.append(result)
            if verified or invalid:
                outcomes += await self.store.ingest(peer.node_id, verified, invalid, None)
            missing += [h for h in chunk if h not in obtained]
        return outcomes, missing

    async def reconcile(self, peer: PeerConfig, *, reset: bool = False) -> ReconcileReport:
        """Negentropy with the peer as responder, one session per set (the public federation, then each space to
        reconcile with it: `SyncStore.reconcile_spaces`, over the spaces both host and those the peer's first reply
        offers), then fetch what we lack. A peer of the previous release (it refuses the `set` member) is reconciled
        in one session over the whole set served to it. With `reset`, restart the cursor at the peer's head as of
        the first round (every record up to it is then held here)."""
        client = self.client(peer)
        report = ReconcileReport()
        have, need, first = await reconcile_sets(client, self.store, peer.node_id, report)
        report.need, report.have = len(need), len(have)
        # versions this node refused (their address holds two better ones) are not fetched again
        needed = [h.hex() for h in need]
        if needed:
            refused = await self.store.refused(needed)
            needed = [v for v in needed if v not in refused]
        if needed:
            report.outcomes, _missing = await self.fetch_into_store(peer, needed)
        report.bytes_sent, report.bytes_received = client.bytes_sent, client.bytes_received
        if reset:
            await self.store.ingest(peer.node_id, [], [], Cursor(first.epoch, first.head))
        await self.store.note_peer(
            peer.node_id,
            remote_epoch=first.epoch,
            remote_head=first.head,
            reconciled=True,
            health=self.health_of(peer.node_id),
            sync_version=client.version,
        )
        log.info(
            "reconciled with %s: %d sets, %d rounds, need %d, have %d",
            *(peer.node_id, report.sets, report.rounds, len(need), len(have)),
        )
        return report

    async def run_peer(self, peer: PeerConfig) -> None:
        """Pull from one peer forever: long-poll when caught up, reconcile after catch-up and on a timer,
        back off exponentially (with jitter) on failure.

        Every failure counts toward the backoff, which only a round that got through (a page that said `more`,
        or a pull and any reconciliation due) resets; so a peer that fails every reconciliation or every fetch
        is tried less and less often, never in a loop. Long-polls to one peer start at least `min_poll_s`
        apart when the previous one came back empty (a peer answering them at once is not polled in a spin).
        When the peer answers again after failing to, the node reconciles at once rather than at the next
        `reconcile_every_s`. Records that fail in the store's own code (`internal`) are a failure too, backed
        off like any other; the cursor has moved past them and a reconciliation is not repeated early for them,
        so a fault that every try meets never turns into a loop without end. A peer that answers 403 unknown_peer
        has not added this node yet: that is no failure; it is logged once and asked again every few seconds."""
        health = self.health_of(peer.node_id)
        failures = waits = 0
        caught_up = unreachable = False
        last_reconcile: float | None = None
        empty_poll_at: float | None = None  # when the last pull that brought nothing started (monotonic)
        while True:
            try:
                step = await self.versions.step(peer, self.reconcile)  # sync/protocol.py
                if step == "reconciled":
                    last_reconcile = self.clock()
                elif step == "newer":
                    caught_up, last_reconcile = False, None
                if caught_up and empty_poll_at is not None:
                    gap = self.min_poll_s - (time.monotonic() - empty_poll_at)
                    if gap > 0:
                        health.throttled_polls += 1
                        await asyncio.sleep(gap)
                started = time.monotonic()
                report = await (self.pull_once(peer, wait_ms=self.wait_ms) if caught_up else self.catch_up(peer))
                _check_stored(peer, [*report.outcomes, *report.wanted])
                if health.waiting_for_peer:  # said once, and noted at once
                    health.waiting_for_peer, waits = False, 0
                    log.info("peer %s has added this node; pulling from it", peer.node_id)
                    await self.store.note_peer(peer.node_id, health=health)
                empty_poll_at = None if report.outcomes or report.more or report.reset else started
                if unreachable:
                    unreachable, last_reconcile = False, None
                    health.reconnect_reconciliations += 1
                    log.info("peer %s answers again; reconciling now", peer.node_id)
                if report.more:
                    failures = health.consecutive_failures = 0
                    caught_up = False
                    continue
                early = await self.wakeups.due(peer.node_id)  # dropped waiting records can be stored now (7.3)
                if early or last_reconcile is None or self.clock() - last_reconcile >= self.reconcile_every_s:
                    reconciled = await self.reconcile(peer)
                    last_reconcile = self.clock()
                    _check_stored(peer, reconciled.outcomes)
                failures = health.consecutive_failures = 0
                caught_up = True
            except asyncio.CancelledError:
                raise
            except (SyncError, NegentropyError, StoreFault, StoreUnavailable) as exc:
                if isinstance(exc, SyncError) and self.versions.fall_back(peer, exc):
                    caught_up = False
                    continue
                if isinstance(exc, SyncError) and exc.code == UNKNOWN_PEER:
                    caught_up = False
                    waits += 1
                    await wait_for_peer(self.store, self.key.did, peer, health, waits, str(exc))
                    continue
                failures += 1
                unreachable = unreachable or not isinstance(exc, StoreFault | StoreUnavailable)
                caught_up = False
                log.warning("sync with %s failed (%d): %s", peer.node_id, failures, exc)
                await self._failed(peer, health, failures, str(exc))
            except Exception as exc:  # a bug must not kill the loop silently
                failures += 1
                caught_up = False
                log.exception("sync with %s crashed", peer.node_id)
                await self._failed(peer, health, failures, f"internal: {type(exc).__name__}: {exc}")

    async def _failed(self, peer: PeerConfig, health: m.PeerHealth, failures: int, error: str) -> None:
        health.failures += 1
        health.consecutive_failures = failures
        await self.store.note_peer(peer.node_id, error=error[:500], health=health)
        await asyncio.sleep(backoff(failures))


def _feed_calls(
    client: PeerClient, since: Cursor | None, limit: int, wait_ms: int, health: m.PeerHealth
) -> tuple[Ask, Fetch, Bodies]:
    """The requests `sync.ids_first.read_page` makes of a peer: a page after `since` (by bodies, ids first or
    compact), a fetch by version and one by seq (a failure of either counted in `health.fetch_failures`)."""
    seq, epoch = (since.seq, since.epoch) if since else (0, None)

    async def ask(ids: int) -> m.ChangesReply:
        return await client.changes(seq, epoch, limit, wait_ms, ids=ids)

    async def bodies(seqs: list[int]) -> list[bytes]:
        try:
            return await client.bodies(seqs)
        except SyncError:
            health.fetch_failures += 1
            raise

    async def fetch(versions: list[str]) -> m.Records:
        try:
            return await client.fetch(versions)
        except SyncError:
            health.fetch_failures += 1
            raise

    return ask, fetch, bodies


async def wait_for_peer(
    store: SyncStore, node_id: str, peer: PeerConfig, health: m.PeerHealth, waits: int, error: str
) -> None:
    """The peer answered 403 unknown_peer: it has not added this node (`node_id`) yet. Said once in the log (at
    info, not as a failure), noted as the peer's state, and asked again soon, without counting failures."""
    if not health.waiting_for_peer:
        health.waiting_for_peer = True
        log.info(
            "peer %s has not added this node yet (403 unknown_peer); waiting for it to: on that node,"
            " bbs peer add <this node's URL> --key %s (asked again every few seconds, not logged again)",
            peer.node_id,
            node_id,
        )
    await store.note_peer(peer.node_id, error=f"waiting for the peer to add this node: {error}"[:500], health=health)
    await asyncio.sleep(backoff(min(waits, WAITING_BACKOFF_STEPS)))


async def verify_many(
    items: list[tuple[bytes, str | None, str | None]], pool: VerifyPool | None = None
) -> list[Verified | Invalid]:
    """Verify records (body, claimed address, claimed version) off the event loop, so a large page does not
    stall the node's other requests; a large page goes to the worker processes of `pool` (default `POOL`), or
    when they are not usable is split over `VERIFY_THREADS` threads. Results keep the order of `items`."""
    if len(items) < 8:
        return [verify_record(*item) for item in items]
    if len(items) >= POOL_MIN_ITEMS:
        pooled = await (pool or POOL).verify(items)
        if pooled is not None:
            return pooled
    parts = min(VERIFY_THREADS, len(items) // 64 or 1)
    step = -(-len(items) // parts)
    chunks = [items[i : i + step] for i in range(0, len(items), step)]
    done = await asyncio.gather(*(asyncio.to_thread(_verify_all, chunk) for chunk in chunks))
    return [result for chunk in done for result in chunk]


def _log_refused(peer: PeerConfig, results: list[Verified | Invalid]) -> None:
    for bad in results:
        if isinstance(bad, Invalid) and bad.reason == TOO_NEW:
            log.info("peer %s sent a record too new for this release %s: %s", peer.node_id, bad.hash, bad.detail)
        elif isinstance(bad, Invalid):
            log.warning("peer %s sent an invalid record %s: %s (%s)", peer.node_id, bad.hash, bad.reason, bad.detail)


def too_new_from(reply: m.Changes, results: list[Verified | Invalid]) -> int | None:
    """The lowest feed position in a page of a record refused for being too new: the cursor moves past it, and
    keeps where it is (docs/format-v3.md, 8.4)."""
    seqs = [item.seq for item, r in zip(reply.items, results, strict=True) if isinstance(r, Invalid)
            and r.reason == TOO_NEW]  # fmt: skip
    return min(seqs, default=None)


def _verify_all(items: list[tuple[bytes, str | None, str | None]]) -> list[Verified | Invalid]:
    return [verify_record(*item) for item in items]


async def _settle(*tasks: asyncio.Task[Any] | None) -> None:
    """Let a pipeline's unfinished steps end before it returns or raises (a store already handed to the writer
    commits or fails), and read their failures so that none is reported as never retrieved."""
    for task in tasks:
        if task is None:
            continue
        await asyncio.wait([task])
        if not task.cancelled():
            task.exception()


def backoff(failures: int, base: float = 0.5, cap: float = 10.0) -> float:
    """Exponential backoff with full jitter."""
    return random.uniform(base, min(cap, base * 2**failures))


class Scheduler:
    """Runs one puller loop per configured peer; re-reads the peers every `refresh_s` (or when poked),
    so a peer added by the CLI or the API takes effect without a restart."""

    def __init__(self, puller: Puller, refresh_s: float = 1.0) -> None:
        self.puller, self.refresh_s = puller, refresh_s
        self._tasks: dict[PeerConfig, asyncio.Task[None]] = {}
        self._poke = asyncio.Event()
        self._halted = False

    def poke(self) -> None:
        """Re-read the peer list now."""
        self._poke.set()

    def halt(self) -> None:
        """Make `run` stop its loops and return. Cancelling alone is not enough on Python 3.11: `asyncio.wait_for`
        drops a cancellation that lands as the event it waits for is set (a poke during shutdown)."""
        self._halted = True
        self._poke.set()

    async def run(self) -> None:
        rounds = RoundFailures(log, "reading the peer list")
        try:
            while not self._halted:
                try:
                    await self._refresh()
                    rounds.passed()
                except Exception as exc:
                    rounds.failed(exc)
                self._poke.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._poke.wait(), self.refresh_s)
        finally:
            await self.stop()

    async def _refresh(self) -> None:
        peers = set(await self.puller.store.peers())
        for peer in list(self._tasks):
            if peer not in peers or self._tasks[peer].done():
                self._tasks.pop(peer).cancel()
        for peer in peers:
            if peer not in self._tasks:
                self._tasks[peer] = asyncio.create_task(self.puller.run_peer(peer), name=f"sync {peer.node_id}")

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
