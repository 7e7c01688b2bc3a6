"""Keeping the search index caught up with `entries`, beside the writer; answering a search page from it.

The writer commits the log and the relational projections; `Indexer.catch_up` then reads the entries past the
index's position in batches on a reader thread and applies each batch in one index commit, off the write
transaction. Every search with words is answered by the index as it stands (`page`), once it has been seen near
the log's head; before that (a first start, a rebuild) it is answered 503 `search_index_building` (docs/api.md,
"Search").

The indexer paces its commits (`Indexer`) and publishes the position its searchers see; a search that must see
newer entries waits for that position (node/search_index/freshness.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import shutil
import time
import unicodedata
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from node.errors import SearchIndexBuilding
from node.search_index import ranking, store
from node.search_index.freshness import CommitAges, Pace, Watermark
from node.search_index.index import (
    DAMAGED_FOLDER,
    FOLDER,
    PUBLIC_SPACE,
    Filters,
    Hits,
    Row,
    SearchIndex,
    is_fault,
    is_panic,
    stamp_for,
)
from node.search_index.query import Clause, parse
from node.spaces import store as space_store
from node.spaces.sight import Sight
from node.store.conn import Conn
from node.store.db import Database
from wire.api import SearchQuery

BATCH = 2_000  # entries per index commit
# An index at most this many entries behind the log serves searches (a few batches: the lag of a node under
# load); further behind it is being built, and searches with words are answered 503 until it gets this close.
SERVING_LAG = 4 * BATCH
# Entries indexed per second while building, for the Retry-After of a 503 (measured: docs/performance.md).
BUILD_RATE = 2_000
REPAIR_RETRY_S = 5  # the Retry-After of a search while a damaged index is set aside and rebuilt
REBUILD_ADVICE = "; run bbs rebuild"  # what `check` tells an operator after a failure
IDLE_POLL_SECONDS = 1.0  # a look for new entries even without a commit signal (a write no wakeup announced)
log = logging.getLogger("bbs.search_index")


def rows_after(conn: Conn, position: int, limit: int = BATCH) -> list[Row]:
    """Up to `limit` entries with ids above `position`, in id order."""
    return [Row(*r) for r in store.entries_after(conn, position, limit)]


def lock_busy(exc: BaseException) -> bool:
    """Whether opening an index failed because another writer (a serving node) holds its lock file."""
    return "LockBusy" in str(exc)


def set_aside(root: Path) -> Path | None:
    """Move the data folder's index to `search-index.damaged` (replacing an earlier one: at most one such copy is
    kept, for a bug report); the path it went to, or None when there was no folder."""
    path, aside = root / FOLDER, root / DAMAGED_FOLDER
    if not path.exists():
        return None
    shutil.rmtree(aside, ignore_errors=True)
    os.replace(path, aside)
    return aside


@dataclass(frozen=True)
class Opened:
    """An index opened for writing, with what was done to open it."""

    index: SearchIndex
    moved_to: Path | None  # where a damaged folder went (`set_aside`), or None
    problem: str | None  # why the folder was damaged (it could not be opened, or failed `verify`), or None


def open_repaired(root: Path, conn: Conn) -> Opened:
    """The data folder's index opened for writing; a folder that cannot be opened is moved aside (`set_aside`) and
    a new, empty index takes its place, and one that opens but fails `verify` is emptied: either way it is then
    built from the log. Raises (ValueError) when another process holds the writer lock (`lock_busy`), or when
    even a new index cannot be created (a read-only or full disk)."""
    path, epoch = root / FOLDER, store.store_epoch(conn)
    index: SearchIndex | None = None
    unreadable: str | None = None
    try:
        index = SearchIndex(path, epoch)
        unreadable = _unreadable(index)
    except BaseException as exc:  # a tantivy panic on a damaged segment too
        if lock_busy(exc) or not is_fault(exc):
            raise
        unreadable = f"it cannot be opened ({_one_line(exc)})"
    if unreadable is not None or index is None:
        if index is not None:
            _drop(index)
        moved_to = set_aside(root)
        return Opened(SearchIndex(path, epoch), moved_to, unreadable or "it cannot be opened")
    status, detail = verify(index, conn)
    if status == "fail":
        index.reset()  # emptied in place: the indexer (or `build`) fills it again
        return Opened(index, None, detail.removesuffix(REBUILD_ADVICE))
    return Opened(index, None, None)


def _unreadable(index: SearchIndex) -> str | None:
    """Why an opened index cannot be read through (its meta document, its documents), or None."""
    try:
        index.state()
        index.documents()
    except BaseException as exc:  # a tantivy panic on a damaged segment too
        if not is_fault(exc):
            raise
        return f"it cannot be read ({_one_line(exc)})"
    return None


def _drop(index: SearchIndex) -> None:
    """Close an index that may be damaged: a writer that fails to finish is dropped all the same."""
    try:
        index.close()
    except BaseException as exc:
        if not is_fault(exc):
            raise


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def open_index(root: Path, conn: Conn) -> SearchIndex | None:
    """The data folder's index opened for writing (a damaged one repaired: `open_repaired`; the node's indexer
    then builds it in the background), or None (logged) when it cannot be: searches with words are then
    answered 503 `search_index_building` (searches by filters alone still work)."""
    try:
        opened = open_repaired(root, conn)
    except Exception as exc:  # a second writer (tantivy's lock), an unreadable folder: degrade, never fail to serve
        log.warning("search index at %s not opened (%s); searches with words are refused", root / FOLDER, exc)
        return None
    if opened.problem is not None:
        log.warning("search index at %s: %s", root / FOLDER, repair_note(opened))
    return opened.index


def repair_note(opened: Opened) -> str:
    """One line saying what `open_repaired` did to a damaged index."""
    moved = f"; moved it to {opened.moved_to}" if opened.moved_to is not None else ""
    return f"{opened.problem}{moved}; rebuilding it from the log"


def build(conn: Conn, index: SearchIndex) -> int:
    """Index every entry not yet covered, synchronously (`bbs rebuild`); returns the entries indexed."""
    done = 0
    while rows := rows_after(conn, index.state()[0]):
        index.apply(rows, rows[-1].seq)
        done += len(rows)
    return done


@dataclass(frozen=True)
class Rebuilt:
    """What `rebuild` did: entries indexed (None: a serving node holds the index), the repair note of a damaged
    index (`repair_note`), and the index's `verify` finding afterwards."""

    entries: int | None
    repaired: str | None = None
    status: str = "ok"
    detail: str = ""


def rebuild(root: Path, conn: Conn) -> Rebuilt:
    """Empty the data folder's index and index every entry again (`bbs rebuild`), from nothing when the folder is
    damaged (`open_repaired`); checks the result (`verify`).

    `entries` is None when another process (a serving node) holds the index's writer lock: that node keeps it
    caught up, and repairs it itself. A new index that cannot be created is a `fail`.
    """
    try:
        opened = open_repaired(root, conn)
    except Exception as exc:
        if lock_busy(exc):
            return Rebuilt(None, detail="a serving node holds the search index; it keeps it caught up")
        return Rebuilt(None, status="fail", detail=f"search index at {root / FOLDER} cannot be created ({exc})")
    index = opened.index
    try:
        index.reset()
        count = build(conn, index)
        status, detail = verify(index, conn)
    finally:
        index.close()
    return Rebuilt(count, repair_note(opened) if opened.problem else None, status, detail)


SAMPLE = 50  # entries `check` looks up in the index


def check(root: Path, conn: Conn) -> tuple[str, str]:
    """(status, detail) of the data folder's index against `conn`'s entries, for `bbs doctor`; reads only.

    The index must hold one document per entry it covers, and a sample of those entries under their ids.
    """
    path = root / FOLDER
    if not path.is_dir():
        return "warn", f"no search index at {path}; the node builds it when it starts"
    try:
        index = SearchIndex(path, store.store_epoch(conn), writable=False)
    except Exception as exc:  # a damaged folder is a finding, not a crash
        return "fail", f"search index at {path} cannot be read ({_one_line(exc)}){REBUILD_ADVICE}"
    return verify(index, conn)


def verify(index: SearchIndex, conn: Conn) -> tuple[str, str]:
    """(status, detail) of an opened index against `conn`'s entries: its stamp, its document count and a sample
    of entries under their ids (`check`, and `open_repaired` before a node serves it)."""
    unreadable = _unreadable(index)
    if unreadable is not None:
        return "fail", f"search index at {index.path}: {unreadable}{REBUILD_ADVICE}"
    position, stamp = index.state()
    if stamp != index.stamp:
        return "warn", f"search index built for {stamp}, not {index.stamp}; the node rebuilds it when it starts"
    if position > store.highest_entry(conn):  # the node indexed entries committed after this copy was taken
        return "warn", f"search index covers entry id {position}, past this copy of the database; check again"
    covered = store.covered(conn, position)
    documents = index.documents()
    redo = store.redo_count(conn)
    if redo:  # entries a key event switched out or back: the serving node's indexer redoes them
        return "warn", f"search index: {redo} documents of entries made void or valid again wait to be redone"
    if documents != covered:
        return "fail", f"search index holds {documents} documents for {covered} entries{REBUILD_ADVICE}"
    sample = store.sample(conn, position, SAMPLE)
    wrong = [record_hash for seq, record_hash in sample if index.seq_of(record_hash) != seq]
    if wrong:
        return (
            "fail",
            f"search index misses or misplaces {len(wrong)} of {len(sample)} sampled entries{REBUILD_ADVICE}",
        )
    behind = store.pending(conn, position)
    lag = f", {behind} entries behind the log (indexed while the node runs)" if behind else ""
    return "ok", f"search index: {documents} documents, matching entries up to id {position}{lag}"


@contextlib.contextmanager
def reading(index: SearchIndex) -> Iterator[None]:
    """Reads of `index` in the block: a panic of tantivy reading a damaged segment marks the index `damaged`
    (the indexer rebuilds it) and is answered 503 search_index_building instead of ending the request."""
    try:
        yield
    except BaseException as exc:
        if not is_panic(exc):
            raise
        index.damaged = True
        raise SearchIndexBuilding(
            "the search index is damaged; the node is rebuilding it from the log", retry_after=REPAIR_RETRY_S
        ) from None


def ensure_serving(conn: Conn, index: SearchIndex | None) -> None:
    """Raise SearchIndexBuilding unless `index` answers searches: opened, and seen near the log's head once."""
    if index is None:
        raise SearchIndexBuilding("the search index could not be opened; see the node's log", retry_after=60)
    if index.damaged:
        raise SearchIndexBuilding(
            "the search index is damaged; the node is rebuilding it from the log", retry_after=REPAIR_RETRY_S
        )
    if index.serving:
        return
    with reading(index):
        position = index.state()[0]
    if store.pending(conn, position, cap=SERVING_LAG) > SERVING_LAG:
        head = store.highest_entry(conn)  # ids are log positions: head - position bounds the entries left
        raise SearchIndexBuilding(
            f"the search index is being built (at entry id {position} of {head}); searches with words are"
            " answered once it is",
            retry_after=-(-(head - position) // BUILD_RATE),
        )
    index.serving = True


def page(
    conn: Conn,
    index: SearchIndex | None,
    q: SearchQuery,
    since_ms: int | None,
    sight: Sight,
    clauses: Sequence[Clause] | None = None,
) -> Hits:
    """Entry ids of a search page with words from the index as it stands, with the position it answered at: only
    entries `sight` sees (of `q.space` when it names spaces, which the caller has checked `sight` sees), filtered by
    the index's `space` field, so a page is full and `next_offset` exact however many matches lie in other spaces.

    `clauses` are `q.q` parsed (node/search_index/query.py), parsed here when not given.

    Raises SearchIndexBuilding while the index cannot answer (`ensure_serving`). Trust (node-local, not in the
    index) sorts and filters through the trust cache read on `conn`: node/search_index/ranking.py.
    """
    ensure_serving(conn, index)
    assert index is not None
    words = parse(q.q or "") if clauses is None else clauses
    spaces, hidden = space_filter(conn, sight, q.space)
    filters = Filters(
        entry_type=q.entry_type,
        performative=q.performative,
        author=q.author,
        truth_state=q.truth_state,
        tags=[unicodedata.normalize("NFC", t) for t in q.tags],
        min_confidence=q.min_confidence,
        since_ms=since_ms,
        include_synthetic=q.include_synthetic,
        spaces=spaces,
        hidden_spaces=hidden,
    )
    with reading(index):
        return index.search(words, filters, q.limit, q.offset, ranking.for_query(conn, q))


def space_filter(conn: Conn, sight: Sight, wanted: Sequence[str]) -> tuple[list[str] | None, list[str]]:
    """The `space` filters of a search (`Filters.spaces`, `Filters.hidden_spaces`): the spaces it asks for; else,
    for a reader who may not see some space holding entries here, whichever is shorter of the spaces it sees (and
    the public federation) or the spaces it does not; nothing for the operator, or on a node none of whose
    spaces is hidden from the reader (then no filter costs nothing: docs/performance.md, "Spaces")."""
    if wanted:
        return list(wanted), []
    if sight.everything:
        return None, []
    seen = [PUBLIC_SPACE, *sorted(sight.spaces)]
    if not sight.spaces:
        return seen, []  # one term: as cheap as no filter
    held = space_store.spaces_with_entries(conn, MAX_HIDDEN_TERMS)
    if held is None:  # more spaces than terms worth excluding one by one
        return seen, []
    hidden = sorted(set(held) - sight.spaces)
    return (None, hidden) if len(hidden) <= len(seen) else (seen, [])


MAX_HIDDEN_TERMS = 64  # a reader's search excludes at most this many spaces one by one (`space_filter`)


class Indexer:
    """The background task keeping a node's index caught up; woken after every commit of the node's writer.

    It commits the index in batches paced by `pace`: at most one commit per `pace.commit_s` while writes keep
    coming, or per `pace.flush_s` while a search waits for a position (`reach`), so the number of index
    commits stays bounded whatever the write or search load (a backlog is indexed in full batches back to back).
    Each commit reloads the index's reader before its position is published in `position`, so a search that
    sees a position sees every entry up to it.
    """

    def __init__(
        self,
        db: Database,
        index: SearchIndex,
        pace: Pace | None = None,
        on_delay: Callable[[float], None] | None = None,
        reopen: Callable[[], Awaitable[SearchIndex]] | None = None,
    ) -> None:
        self.db = db
        self.index = index
        self.pace = pace or Pace()
        self.on_delay = on_delay  # told each round's commit-to-searchable delay, in seconds (a metric)
        # Opens the index again after a failed round or a missing folder (`repair`): the node's own opener, which
        # repairs a damaged folder and hands the new index to the node's searches.
        self.reopen = reopen
        self.position = Watermark(index.state()[0])
        self.ages = CommitAges()
        self.wake = asyncio.Event()
        self.flush = asyncio.Event()  # a search waits for a position: commit at the flush pace
        self.batches = 0  # index commits
        self.flushes = 0  # searches that asked for a flush
        self.failures = 0  # indexing rounds that failed (each logged once per distinct problem: `_trouble`)
        self.repairs = 0  # times the index was opened again because its folder was gone or broken
        self.last_commit = -math.inf  # time.monotonic() at the start of the last index commit
        self.ready = False  # caught up with the log once since `run` began (a first build can take minutes)
        self.stopping = False
        self._trouble: str | None = None  # the problem last logged, until a round succeeds again
        self.epoch_now: str | None = None  # an epoch the index was not built for (`epoch_is`), until a round follows it

    def committed(self, at: float) -> None:
        """The node's writer committed at `at` (time.monotonic()): there may be entries to index."""
        self.ages.committed(at)
        self.wake.set()

    async def catch_up(self) -> int:
        """Index the entries past the index's position, batch by batch, until a batch is not full (what was
        committed before its read is then searchable); returns the entries indexed."""
        self.ages.start()  # a round that fails keeps them: the next round reports their delay
        done = 0
        while await self._redo():
            pass
        while True:
            rows = await self.db.read(partial(rows_after, position=self.index.state()[0]))
            if rows:
                self.last_commit = time.monotonic()  # the pace counts from a commit's start: it takes ~0.1 s (fsync)
                await asyncio.to_thread(self.index.apply, rows, rows[-1].seq)  # reloads the reader
                self.batches += 1
                self.position.advance(rows[-1].seq)
                done += len(rows)
            if len(rows) < BATCH:
                break
        delay = self.ages.finish(done, time.monotonic())
        if delay is not None and self.on_delay is not None:
            self.on_delay(delay)
        return done

    async def _redo(self) -> bool:
        """Redo the documents of a batch of addresses a void switch changed below the index's position
        (node/store/void.py): deleted, and added again when `entries` holds them; whether a full batch was done."""
        last, addresses, found = await self.db.read(partial(store.redo, limit=BATCH))
        if not addresses:
            return False
        position = self.index.state()[0]
        rows = [Row(*r) for r in found if int(r[0]) <= position]  # ids above it: the catch-up indexes them
        await asyncio.to_thread(self.index.apply, rows, position, addresses)
        await self.db.write(partial(store.redone_txn, last_id=last))
        return len(addresses) == BATCH

    async def reach(self, position: int, timeout_s: float) -> bool:
        """Wait until searches see `position` (asking for a flush), at most `timeout_s`; whether they do.

        No wait before the index is `ready`: a first build does not end within a search's patience."""
        if self.position.position >= position:
            return True
        if not self.ready:
            return False
        self.flushes += 1
        self.flush.set()
        self.wake.set()
        return await self.position.reach(position, timeout_s)

    async def lag(self) -> int:
        """Entries committed but not yet in the index (past the position searches see)."""
        position = self.position.position
        return await self.db.read(lambda c: store.pending(c, position), quick=True)

    def stop(self) -> None:
        """Make `run` return at its next round. Cancelling alone is not enough on Python 3.11: `asyncio.wait_for`
        drops a cancellation that arrives as the event it waits for is set (a commit during shutdown)."""
        self.stopping = True
        self.wake.set()
        self.flush.set()

    async def run(self) -> None:
        """Catch up now, then each time a commit (or the idle poll) says there may be more, at the pace, until
        `stop`. A round that fails, or finds the index's folder gone, opens the index again (`repair`)."""
        while not self.stopping:
            self.wake.clear()  # before catching up: a commit during it wakes the next round
            try:
                if not (self.index.path / "meta.json").exists():
                    await self.repair("its folder is gone")
                elif self.index.damaged:
                    await self.repair("reading it failed (a damaged segment)")
                elif self.epoch_now is not None:
                    await self._follow_epoch()
                await self.catch_up()
                self.ready = True
                if self._trouble is not None:
                    log.info("search indexing works again at entry id %d", self.position.position)
                    self._trouble = None
            except BaseException as exc:  # a tantivy panic too (is_panic), not a cancellation
                if not is_fault(exc):
                    raise
                if not self.db.is_open:
                    return
                self.failures += 1
                await self._failed(exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), IDLE_POLL_SECONDS)
            await self._keep_pace()

    def epoch_is(self, epoch: str) -> None:
        """The node's epoch watch (node/ops/history.py) tells what the store epoch is now: an index built for another
        is rebuilt from the log at the next round. Its database was brought back under this process (a PostgreSQL
        point-in-time recovery, a failover: docs/decisions.md record 94); the log it indexed may have lost its end,
        and positions past the loss name other entries now."""
        if stamp_for(epoch) != self.index.stamp:
            self.epoch_now = epoch
            self.wake.set()

    async def _follow_epoch(self) -> None:
        epoch, self.epoch_now = self.epoch_now, None
        if epoch is not None and stamp_for(epoch) != self.index.stamp:  # a repair meanwhile opened it for `epoch`
            await self.repair(f"the store epoch changed to {epoch} (its database was brought back)")

    async def _failed(self, exc: BaseException) -> None:
        """A failed round: logged once per distinct problem (not once per retry), then the index opened again."""
        problem = _one_line(exc)
        if problem != self._trouble:
            log.warning("search indexing failed (%s); opening the index at %s again", problem, self.index.path)
            self._trouble = problem
        try:
            await self.repair(None)
        except BaseException as again:  # a repair that fails too is the next round's failure
            if not is_fault(again):
                raise

    async def repair(self, reason: str | None) -> None:
        """Close the index and open it again through `reopen` (a damaged or missing folder is rebuilt from the
        log: the position starts again from what the new index covers). `reason` is logged when given."""
        if self.reopen is None:
            raise RuntimeError("this indexer cannot open its index again")
        if reason is not None:
            log.warning("search index at %s: %s; rebuilding it from the log", self.index.path, reason)
        await asyncio.to_thread(_drop, self.index)  # a writer whose folder is gone may fail to close
        self.index = await self.reopen()
        self.repairs += 1
        self.position.restart(self.index.state()[0])

    async def _keep_pace(self) -> None:
        """Return when the next commit may start: sooner when a search starts waiting meanwhile."""
        while not self.stopping:
            remaining = self.pace.next_commit(self.last_commit, self.position.waiting > 0) - time.monotonic()
            if remaining <= 0:
                return
            self.flush.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.flush.wait(), remaining)
