"""The scrub: once a redacted body's grace has passed (`redaction_grace_s`, default 24 h; 0 for an emergency), the
bytes it left on disk go (docs/operations.md, "Redaction"). First the dropped versions the redaction set aside
for the grace (`redacted_bodies`, so a redaction a revocation makes void can show them again: docs/decisions.md
record 69) are deleted. The log and projections deleted them in the redaction's
transaction with `secure_delete` on, which zeroes the freed cells and pages in the pages written then; what remains is
the WAL's older frames, emptied by a `wal_checkpoint(TRUNCATE)` retried until no reader holds an older snapshot, and
the search index's deleted documents, whose terms and stored text stay in their segment until it is merged
(node/search_index/index.py `purge_deleted`). A redaction's answers hide at once; only the bytes wait for the grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from aiohttp import web

from node.redaction import store
from node.search_index import indexer
from node.search_index.index import Row, SearchIndex
from node.store.conn import Conn
from node.web.appkeys import NODE

if TYPE_CHECKING:
    from node.service import Node

log = logging.getLogger("bbs.redaction")
IDLE_S = 5.0  # how often the scrubber looks for due scrubs when none is near
CHECKPOINT_TRIES = 200  # a checkpoint blocked by readers is tried this many times ...
CHECKPOINT_PAUSE_S = 0.05  # ... each waiting this long for them (a reader holds its snapshot for one read)


def checkpoint(path: str) -> bool:
    """Empty the WAL of the database at `path` into it, trying again while readers hold older snapshots."""
    return store.checkpoint(path, CHECKPOINT_TRIES, CHECKPOINT_PAUSE_S)


async def scrub_due(node: Node) -> list[str]:
    """Scrub the addresses whose grace has passed: the search index deletes their documents (whether or not its
    indexer has yet) and drops the segments that held them (`rewrite_index`), then the WAL is checkpointed and
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
        await rewrite_index(node, index)  # ... and the segments holding them go
    done = await asyncio.to_thread(checkpoint, str(node.data.db_path))
    if not done:
        log.warning("the WAL could not be checkpointed (readers held it); the scrub of %d records waits", len(due))
        return []
    now = node.now_ms()
    await node.db.write(lambda conn: store.mark_scrubbed_txn(conn, due, now))
    # the row just written is in the WAL again: checkpoint once more so the WAL file holds nothing of the scrub
    await asyncio.to_thread(checkpoint, str(node.data.db_path))
    return due


def _rows_after(position: int, conn: Conn) -> list[Row]:
    return indexer.rows_after(conn, position)


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


async def scrub_context(app: web.Application) -> AsyncIterator[None]:
    """The scrubber, while the app runs: woken by each redaction (`Redactions.wake`), else every IDLE_S seconds."""
    node = app[NODE]

    async def loop() -> None:
        while True:
            try:
                await scrub_due(node)
            except Exception:
                if node.db.is_open:
                    log.exception("the redaction scrub failed")
            await node.redactions.wait_for_work(IDLE_S)

    task = asyncio.create_task(loop(), name="redaction scrub")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
