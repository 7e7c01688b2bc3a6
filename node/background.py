"""Work a node's app repeats while it runs (trust refresh, notification expiry), as aiohttp cleanup contexts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from node import trust
from node.appkeys import NODE, SEARCH_INDEXER
from node.metrics import metrics_of
from node.search_index.indexer import Indexer
from node.service import Node

EXPIRY_SWEEP_SECONDS = 60  # how late a notification past its 7 days may still read as pending, at most
TWIN_CHECK_SECONDS = 1.0  # how long after an earlier declaration arrives a later twin's holders are told, at most

CleanupContext = Callable[[web.Application], AsyncIterator[None]]


def periodic(
    name: str, seconds: float, run: Callable[[Node], Awaitable[object]], log: logging.Logger
) -> CleanupContext:
    """A cleanup_ctx that runs `run(node)` at start-up and then every `seconds` until the app stops.

    A failed round is logged (unless the node is merely closing underneath the app) and the next round tries
    again.
    """

    async def context(app: web.Application) -> AsyncIterator[None]:
        node = app[NODE]

        async def loop() -> None:
            while True:
                try:
                    await run(node)
                except Exception:
                    if node.db.is_open:  # not merely the node closing underneath the app
                        log.exception("%s failed", name)
                await asyncio.sleep(seconds)

        task = asyncio.create_task(loop(), name=name)
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return context


# Refresh the trust cache every trust.REFRESH_SECONDS (a failed refresh leaves the previous cache in place).
trust_refresh = periodic(
    "trust refresh", trust.REFRESH_SECONDS, lambda node: node.trust.refresh(), logging.getLogger("bbs.trust")
)
# Mark expired notifications every EXPIRY_SWEEP_SECONDS (polls that lease do it too).
expiry_sweep = periodic(
    "notification expiry sweep",
    EXPIRY_SWEEP_SECONDS,
    lambda node: node.inbox.expire_notifications(),
    logging.getLogger("bbs.notify"),
)
# Tell the holders and declarers of tasks that became later twins (node/workflows/twins.py), every second.
twin_notices = periodic(
    "task twin notices",
    TWIN_CHECK_SECONDS,
    lambda node: node.workflows.notice_twins(),
    logging.getLogger("bbs.leases"),
)


# A search with words waits (bounded) for the index to cover the highest entry id at request time, so that it sees
# every write acknowledged before it. Interim: issue 24's freshness work replaces this with a rate-limited flush.
FRESH_WAIT_SECONDS = 2.0
FRESH_POLL_SECONDS = 0.005


async def search_indexing(app: web.Application) -> AsyncIterator[None]:
    """Keep the node's search index caught up (node/search_index/indexer.py), woken after each commit."""
    node = app[NODE]
    if node.search_index is None:
        yield
        return
    worker = Indexer(node.db, node.search_index)
    app[SEARCH_INDEXER] = worker
    loop = asyncio.get_running_loop()

    def after_commit() -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed
            loop.call_soon_threadsafe(worker.wake.set)

    node.db.after_commit.append(after_commit)
    index = node.search_index

    async def wait_for_index(target: int) -> None:
        """Until the index covers entry id `target`, at most FRESH_WAIT_SECONDS (then the search answers as is)."""
        deadline = loop.time() + FRESH_WAIT_SECONDS
        while index.state()[0] < target and loop.time() < deadline and not worker.stopping:
            worker.wake.set()
            await asyncio.sleep(FRESH_POLL_SECONDS)

    node.reads.wait_for_index = wait_for_index
    metrics = metrics_of(app)
    position = metrics.gauge("bbs_search_index_position", "Highest entry id the search index covers")
    lag = metrics.gauge("bbs_search_index_lag_entries", "Entries committed but not yet in the search index")
    documents = metrics.gauge("bbs_search_index_documents", "Entries in the search index")
    answered = metrics.gauge(
        "bbs_searches_answered", "Searches since start: with words (index), by filters alone (sql)", ["path"]
    )

    async def refresh() -> None:
        index = node.search_index
        if index is None:
            return
        position.set(index.state()[0])
        lag.set(await worker.lag())
        documents.set(index.documents())
        for path, count in node.reads.answered.items():
            answered.labels(path).set(count)

    metrics.on_scrape(refresh)
    task = asyncio.create_task(worker.run(), name="search indexing")
    yield
    node.reads.wait_for_index = None
    node.db.after_commit.remove(after_commit)
    worker.stop()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
