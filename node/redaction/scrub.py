"""The scrub: once a redacted body's grace has passed (`redaction_grace_s`, default 24 h; 0 for an emergency), the
bytes it left on disk go (docs/operations.md, "Redaction"). First the dropped versions the redaction set aside
for the grace (`redacted_bodies`, so a redaction a revocation makes void can show them again: docs/decisions.md
record 69) are deleted. The log and projections deleted them in the redaction's
transaction with `secure_delete` on, which zeroes the freed cells and pages in the pages written then; what remains is
the WAL's older frames, emptied by a `wal_checkpoint(TRUNCATE)` retried until no reader holds an older snapshot, and
the search index's deleted documents, whose terms stay in their segment until the segment goes: the scrub adds again
the live documents of the segments that hold a dropped entry's document (`scrub_index`), so those segments hold only
deleted documents and tantivy drops them, at the cost of those segments' documents, not the index's (docs/decisions.md
record 71). A redaction's answers hide at once; only the bytes wait for the grace. On PostgreSQL, which has no
`secure_delete` and keeps a deleted row's bytes until its table is rewritten, the disk step is `scrub_postgresql`
instead of the checkpoint: VACUUM FULL of the tables that held the bodies, pg_statistic rewritten, the WAL segment
switched away from and removed (docs/decisions.md record 78).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from node.redaction import store
from node.search_index import indexer
from node.search_index import store as index_store
from node.search_index.index import Row, SearchIndex, is_fault
from node.store.conn import Conn
from node.web.appkeys import NODE
from sync.store import RoundFailures
from wire.stopping import stop_task

if TYPE_CHECKING:
    from node.service import Node

log = logging.getLogger("bbs.redaction")
IDLE_S = 5.0  # how often the scrubber looks for due scrubs when none is near
CHECKPOINT_TRIES = 200  # a checkpoint blocked by readers is tried this many times ...
CHECKPOINT_PAUSE_S = 0.05  # ... each waiting this long for them (a reader holds its snapshot for one read)
PG_LOCK_TIMEOUT_MS = 2000  # how long a PostgreSQL table rewrite waits for readers before the scrub waits for later
SCAN = 50_000  # document ids of a segment read at a time, looking for a dropped entry's document
# Documents added again per index commit: each commit costs an fsync and a look at merges, and holds the index's
# lock (the indexer waits) while its batch is indexed, about a second for this many (docs/performance.md)
REWRITE_BATCH = 10_000
ROUNDS = 3  # targeted rewrites tried (a merge may move documents meanwhile) before every document is added again


def checkpoint(path: str) -> bool:
    """Empty the WAL of the database at `path` into it, trying again while readers hold older snapshots."""
    return store.checkpoint(path, CHECKPOINT_TRIES, CHECKPOINT_PAUSE_S)


async def scrub_due(node: Node) -> list[str]:
    """Scrub the addresses whose grace has passed: the search index deletes their documents (whether or not its
    indexer has yet) and drops the segments that held them (`scrub_index`), then the WAL is checkpointed and
    truncated; the addresses scrubbed."""
    cutoff = node.now_ms() - node.redactions.grace_s * 1000
    due = await node.db.read(lambda conn: store.due_scrubs(conn, cutoff))
    if not due:
        return []
    # the versions set aside for the grace (a void redaction would have restored them) go first, zeroed by
    # secure_delete, so the checkpoint below carries their deletion into the database file
    await node.db.write(lambda conn: store.forget_set_aside_txn(conn, due))
    index = node.search_index
    if index is not None and index.writer is not None:
        await asyncio.to_thread(index.rewrite, [], due)  # their documents deleted (the indexer may not have yet)
        node.redactions.rewritten += await scrub_index(node, index)  # ... and the segments holding them go
    if node.db.pg_url is not None:
        return await scrub_postgresql(node, node.db.pg_url, due)
    done = await asyncio.to_thread(checkpoint, str(node.data.db_path))
    if not done:
        log.warning("the WAL could not be checkpointed (readers held it); the scrub of %d records waits", len(due))
        return []
    now = node.now_ms()
    await node.db.write(lambda conn: store.mark_scrubbed_txn(conn, due, now))
    # the row just written is in the WAL again: checkpoint once more so the WAL file holds nothing of the scrub
    await asyncio.to_thread(checkpoint, str(node.data.db_path))
    return due


async def scrub_postgresql(node: Node, url: str, due: list[str]) -> list[str]:
    """The scrub's disk part on PostgreSQL (docs/decisions.md record 78): the tables that held the bodies rewritten,
    their statistics renewed, the WAL segment that logged them switched away from and removed (`store.scrub_pg`).
    The node's role must be allowed to (`store.pg_scrub_refusal`: else a warning names what is missing and the scrub
    waits, `bbs doctor` counting it). The addresses scrubbed."""
    refusal = await asyncio.to_thread(store.scrub_pg, url, store.SCRUB_TABLES_PG, PG_LOCK_TIMEOUT_MS)
    if refusal is not None:
        log.warning("the scrub of %d records waits: %s", len(due), refusal)
        return []
    now = node.now_ms()
    await node.db.write(lambda conn: store.mark_scrubbed_txn(conn, due, now))  # an address: no secret in the WAL
    return due


def _rows_after(position: int, conn: Conn) -> list[Row]:
    return indexer.rows_after(conn, position)


async def held_with_dropped(node: Node, index: SearchIndex) -> tuple[int, list[int]] | None:
    """(segments holding a deleted document of a version the log no longer holds, the ids of the entries whose
    documents share those segments), or None when the index's segments cannot be told (`SearchIndex.segments`).
    Only segments with deleted documents are read; each document id once (its `seq` fast field). A document of an
    entry made void (still in the log) does not count: its terms are no secret, and a revoked key's entries spread
    over every segment would make each scrub a whole rewrite."""
    snap = await asyncio.to_thread(index.segments)
    if snap is None:
        return None
    found, keep = 0, []
    for segment in snap.segments:
        if not segment.deleted:
            continue  # deletes are committed before this look: a dropped entry's document is a deleted one
        ids: set[int] = set()
        for start in range(0, segment.max_doc, SCAN):
            try:
                chunk = await asyncio.to_thread(snap.ids, segment, start, start + SCAN)
            except BaseException as exc:  # a tantivy panic (a segment not as meta.json said): no targeted scrub
                if not is_fault(exc):
                    raise
                log.warning("reading the search index's segment %d failed (%s)", segment.ord, exc)
                return None
            ids.update(i for i in chunk if i is not None)
        logged = await node.db.read(functools.partial(index_store.logged, ids=sorted(ids)))
        if len(logged) < len(ids):  # a version that left the log: its terms must leave the index
            found += 1
            keep += sorted(await node.db.read(functools.partial(index_store.present, ids=sorted(ids))))
    return found, keep


async def scrub_index(node: Node, index: SearchIndex) -> int:
    """Drop every segment that holds a deleted document of a dropped version (redacted, purged, evicted): its live
    documents are added again, in batches (`SearchIndex.rewrite`), so it holds only deleted documents and tantivy
    drops it, with their terms. Costs the indexing of those segments' documents, not of the index (docs/operations.md,
    "Redaction"); a merge that ends meanwhile is caught by the next look (at most ROUNDS), and an index whose
    segments cannot be told is rewritten whole (`rewrite_index`). Returns the documents added again."""
    done = 0
    for _ in range(ROUNDS):
        held = await held_with_dropped(node, index)
        if held is None:
            break
        found, ids = held
        if not found:
            return done
        for start in range(0, len(ids), REWRITE_BATCH):
            chunk = ids[start : start + REWRITE_BATCH]
            rows = [Row(*r) for r in await node.db.read(functools.partial(index_store.entries_at, ids=chunk))]
            await asyncio.to_thread(index.rewrite, rows)
            done += len(rows)
        if not ids:  # a segment of deleted documents only: a commit lets it go
            await asyncio.to_thread(index.rewrite, [])
    log.warning("the scrub could not tell which search index segments hold dropped documents; adding every one again")
    return done + await rewrite_index(node, index)


async def rewrite_index(node: Node, index: SearchIndex) -> int:
    """Add every entry's document again, in batches (`SearchIndex.rewrite`): each segment then holds only deleted
    documents and is dropped, with the terms of the deleted documents it held. Searches keep their answers all along
    (a document is replaced in the commit that deletes it). Costs a rebuild's indexing time (docs/operations.md,
    "Redaction"); returns the documents added again."""
    position, done = 0, 0
    while True:
        rows = await node.db.read(functools.partial(_rows_after, position))
        if not rows:
            return done
        await asyncio.to_thread(index.rewrite, rows)
        position, done = rows[-1].seq, done + len(rows)


@dataclass
class IndexScrubs:
    """How far a process's own search index has been scrubbed (`scrub_own_index`): the newest drop it covered and the
    addresses dropped at that very millisecond. In memory: a process started anew looks at every drop once."""

    since_ms: int = -1
    at_mark: set[str] = field(default_factory=set)


async def scrub_own_index(node: Node, mark: IndexScrubs) -> list[str]:
    """The index half of the scrub in a process that does not lead the node (docs/decisions.md record 87): its own
    search index deletes the documents of every address dropped since `mark` whose grace has passed, and drops the
    segments that held them (`scrub_index`), whether or not the leader's scrub (the database half, which marks the
    drop done) has run. The addresses scrubbed here."""
    index = node.search_index
    if index is None or index.writer is None:
        return []
    cutoff = node.now_ms() - node.redactions.grace_s * 1000
    since = max(mark.since_ms, 0)
    rows = await node.db.read(lambda conn: store.drops_between(conn, since, cutoff))
    due = [address for address, _ms in rows if address not in mark.at_mark]
    if not due:
        return []
    await asyncio.to_thread(index.rewrite, [], due)  # their documents deleted (the indexer may not have yet)
    node.redactions.rewritten += await scrub_index(node, index)
    newest = rows[-1][1]
    kept = mark.at_mark if newest == mark.since_ms else set()
    mark.at_mark = kept | {address for address, ms in rows if ms == newest}
    mark.since_ms = newest
    return due


async def index_scrub_context(app: web.Application) -> AsyncIterator[None]:
    """On PostgreSQL, in every process: while it does not lead the node, its own search index is scrubbed
    (`scrub_own_index`) every IDLE_S seconds; the leading process's is `scrub_due`'s. On SQLite the one process
    leads: nothing."""
    node = app[NODE]
    if node.db.pg_url is None:
        yield
        return
    mark = IndexScrubs()
    rounds = RoundFailures(log, "the redaction scrub of this process's search index")

    async def loop() -> None:
        while True:
            try:
                if not node.leadership.leading:
                    await scrub_own_index(node, mark)
                rounds.passed()
            except Exception as exc:
                if node.db.is_open:
                    rounds.failed(exc)
            await asyncio.sleep(IDLE_S)

    task = asyncio.create_task(loop(), name="redaction scrub of the own index")
    yield
    await stop_task(task)


async def scrub_context(app: web.Application) -> AsyncIterator[None]:
    """The scrubber, while the app runs: woken by each redaction (`Redactions.wake`), else every IDLE_S seconds."""
    node = app[NODE]
    rounds = RoundFailures(log, "the redaction scrub")

    async def loop() -> None:
        while True:
            try:
                await scrub_due(node)
                rounds.passed()
            except Exception as exc:
                if node.db.is_open:
                    rounds.failed(exc)
            await node.redactions.wait_for_work(IDLE_S)

    task = asyncio.create_task(loop(), name="redaction scrub")
    yield
    await stop_task(task)
