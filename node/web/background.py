"""Work a node's app repeats while it runs (trust refresh, notification expiry), as aiohttp cleanup contexts.

Work done once per node runs only in the process leading it (`leader_only`, node/store/leader.py): several `bbs
serve` processes may serve one PostgreSQL database; on SQLite the one process always leads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from node.errors import SearchIndexBuilding
from node.ops import history
from node.ops.metrics import metrics_of
from node.search_index import indexer
from node.search_index.index import SearchIndex
from node.search_index.indexer import Indexer
from node.store.db import leader_fence
from node.store.leader import Term
from node.trust import service as trust
from node.web.appkeys import NODE, SEARCH_INDEXER
from node.workflows import service as workflows
from sync.store import RoundFailures, StoreUnavailable
from wire.stopping import raise_if_stopped_since, stop_task, stops_pending

if TYPE_CHECKING:
    from node.service import Node

EXPIRY_SWEEP_SECONDS = 60  # how late a notification past its 7 days may still read as pending, at most
START_RETRY_S = 2.0  # how often leader work whose start found the store unavailable tries again within its term
TWIN_CHECK_SECONDS = 1.0  # how long after an earlier declaration arrives a later twin's holders are told, at most

CleanupContext = Callable[[web.Application], AsyncIterator[None]]
log = logging.getLogger("bbs.leader")


@dataclass
class _TermRun:
    """Leader work in one term (`leader_only`): the term, its failed starts counted as one run, the started context
    (None until a start succeeds), and whether to try starting it again."""

    term: Term
    starts: RoundFailures
    started: AsyncIterator[None] | None = None
    again: bool = False


def leader_only(context: CleanupContext) -> CleanupContext:
    """`context` run only while this process leads the node (docs/decisions.md record 87): started when a term
    begins (at start-up, as before, when the process leads then), stopped when it ends (the lead lost, or given up on
    stopping), started again at the next. Its tasks run under the term's fence: every write they submit is refused
    unless the stored epoch is still the term's (`leader_fence`). A start that finds the store unavailable is tried
    again every START_RETRY_S while the term lasts; one that fails otherwise (a bug) is logged and the work stays off
    until the next term."""

    async def gated(app: web.Application) -> AsyncIterator[None]:
        leadership = app[NODE].leadership
        name = getattr(context, "__name__", "leader work")

        async def opened(term: Term) -> _TermRun:
            """The work's run in `term`, after a first try at starting it (its failed starts counted as one run)."""
            run = _TermRun(term, RoundFailures(log, f"{name}'s start (epoch {term.epoch})"))
            await begin(run)
            return run

        async def begin(run: _TermRun) -> None:
            """One try at starting the work in `run`'s term: `started` set, or `again` when the store was unavailable
            (a database server restarting under a term that outlived it)."""
            started = context(app)
            term = run.term
            with leader_fence(term.fence.check if term.fence is not None else None):  # its tasks copy the fence
                try:
                    await anext(started)
                except StoreUnavailable as exc:
                    run.starts.failed(exc)
                    run.again = True
                    return
                except Exception:
                    log.exception("%s could not start (epoch %d); it stays off until the next term", name, term.epoch)
                    run.again = False
                    return
            run.starts.passed()
            run.started, run.again = started, False

        async def begun(run: _TermRun) -> None:
            """Later tries at starting the work while the term lasts (every START_RETRY_S), until one starts it."""
            while run.again and not run.term.ended.is_set():
                before = stops_pending()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(START_RETRY_S):
                        await run.term.ended.wait()
                raise_if_stopped_since(before)  # a stop that came with the term's end is not lost in the wake
                if run.term.ended.is_set():
                    return
                await begin(run)

        async def end(started: AsyncIterator[None] | None) -> None:
            if started is not None:
                with contextlib.suppress(StopAsyncIteration):
                    await anext(started)

        async def terms(run: _TermRun | None) -> None:
            try:
                while True:
                    if run is None:
                        run = await opened(await leadership.next_term())
                    await begun(run)
                    await run.term.ended.wait()
                    stopping, run = run.started, None
                    before = stops_pending()
                    await end(stopping)
                    # the app stopped while the work did: a context that swallowed that stop must not keep this on
                    raise_if_stopped_since(before)
            finally:
                if run is not None:
                    await end(run.started)

        first = leadership.term
        task = asyncio.create_task(
            terms(await opened(first) if first is not None else None), name=f"{name} while leading"
        )
        yield
        await stop_task(task)

    # named as `context`, without `__wrapped__`: the feature lists this context, and node/app.py's wrapper points here
    gated.__name__ = gated.__qualname__ = f"leader_only({getattr(context, '__name__', 'context')})"
    gated.__doc__ = context.__doc__
    return gated


def periodic(
    name: str, seconds: float, run: Callable[[Node], Awaitable[object]], log: logging.Logger
) -> CleanupContext:
    """A cleanup_ctx that runs `run(node)` at start-up and then every `seconds` until the app stops.

    A failed round is logged (unless the node is merely closing underneath the app) and the next round tries
    again.
    """

    async def context(app: web.Application) -> AsyncIterator[None]:
        node = app[NODE]

        rounds = RoundFailures(log, name)

        async def loop() -> None:
            while True:
                try:
                    await run(node)
                    rounds.passed()
                except Exception as exc:
                    if node.db.is_open:  # not merely the node closing underneath the app
                        rounds.failed(exc)
                await asyncio.sleep(seconds)

        task = asyncio.create_task(loop(), name=name)
        yield
        await stop_task(task)

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
# The lease fence's node-wide check on PostgreSQL (node/workflows/fence.py, docs/decisions.md record 88): a process
# joining the node is vouched for, and one that grants nothing checks in after a change of the database's history,
# within this many seconds.
LEASE_FENCE_CHECK_SECONDS = 5.0
lease_fence_check = periodic(
    "lease fence check",
    LEASE_FENCE_CHECK_SECONDS,
    lambda node: workflows.check_fence(node.workflows),
    logging.getLogger("bbs.leases"),
)
# The key fence's entries whose rotation's commit was never known (a cancelled wait, a connection lost at COMMIT, a
# mark that could not be written: node/store/key_fence.py) are marked or forgotten while serving, not only at the
# next start: every process, for its own folder's fence (nothing is read while every entry is settled).
KEY_FENCE_SETTLE_SECONDS = 30.0
key_fence_settle = periodic(
    "key fence settle",
    KEY_FENCE_SETTLE_SECONDS,
    lambda node: node.node_keys.settle(),
    logging.getLogger("bbs.node"),
)
# The store epoch follows the PostgreSQL database's history, and this process's search index and sync store follow the
# store epoch (node/ops/history.py): every process, a quick read each round.
store_epoch_watch = periodic(
    "store epoch watch",
    history.EPOCH_WATCH_SECONDS,
    lambda node: node.epoch_watch.look(),
    logging.getLogger("bbs.node"),
)
# Tell the holders and declarers of tasks that became later twins (node/workflows/twins.py), every second.
twin_notices = periodic(
    "task twin notices",
    TWIN_CHECK_SECONDS,
    lambda node: node.workflows.notice_twins(),
    logging.getLogger("bbs.leases"),
)


async def search_indexing(app: web.Application) -> AsyncIterator[None]:
    """Keep the node's search index caught up (node/search_index/indexer.py), woken after each commit."""
    node = app[NODE]
    if node.search_index is None:
        yield
        return
    metrics = metrics_of(app)
    delay = metrics.histogram(
        "bbs_search_index_delay_seconds",
        "Seconds from a commit to its entries being searchable (each indexing round's oldest commit)",
        buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    )

    async def reopen() -> SearchIndex:
        """The index opened again (repaired when damaged: indexer.open_repaired), handed to the node's searches."""
        opened = await node.db.read(lambda c: indexer.open_repaired(node.data.root, c))
        if opened.problem is not None:
            indexer.log.warning("search index at %s: %s", opened.index.path, indexer.repair_note(opened))
        node.search_index = node.reads.index = opened.index
        return opened.index

    worker = Indexer(node.db, node.search_index, on_delay=delay.observe, reopen=reopen)
    app[SEARCH_INDEXER] = worker
    node.reads.indexer = worker
    loop = asyncio.get_running_loop()

    def after_commit() -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed
            loop.call_soon_threadsafe(worker.committed, time.monotonic())

    node.db.after_commit.append(after_commit)
    node.epoch_watch.listeners.append(worker.epoch_is)  # an index built for another epoch is rebuilt
    position = metrics.gauge("bbs_search_index_position", "Highest entry id the search index covers")
    lag = metrics.gauge("bbs_search_index_lag_entries", "Entries committed but not yet in the search index")
    lag_s = metrics.gauge("bbs_search_index_lag_seconds", "Age of the oldest commit whose entries are not searchable")
    documents = metrics.gauge("bbs_search_index_documents", "Entries in the search index")
    commits = metrics.gauge("bbs_search_index_commits", "Index commits since start (paced: docs/operations.md)")
    failures = metrics.gauge("bbs_search_indexing_failures", "Indexing rounds that failed since start (each retried)")
    repairs = metrics.gauge(
        "bbs_search_index_repairs", "Times the search index was opened again (a failed round, a missing folder)"
    )
    answered = metrics.gauge(
        "bbs_searches_answered", "Searches since start: with words (index), by filters alone (sql)", ["path"]
    )
    waits = metrics.gauge(
        "bbs_search_fresh_waits",
        "Searches that had to see newer entries than the index held, by outcome (none: it held them already)",
        ["outcome"],
    )

    async def refresh() -> None:
        index = node.search_index
        if index is None:
            return
        with contextlib.suppress(SearchIndexBuilding), indexer.reading(index):  # damaged: the indexer repairs it
            position.set(index.state()[0])
            documents.set(index.documents())
        behind = await worker.lag()
        lag.set(behind)
        lag_s.set(worker.ages.age(time.monotonic()) if behind else 0.0)
        commits.set(worker.batches)
        failures.set(worker.failures)
        repairs.set(worker.repairs)
        for path, count in node.reads.answered.items():
            answered.labels(path).set(count)
        for outcome, count in node.reads.fresh_waits.items():
            waits.labels(outcome).set(count)

    metrics.on_scrape(refresh)
    task = asyncio.create_task(worker.run(), name="search indexing")
    yield
    node.db.after_commit.remove(after_commit)
    node.epoch_watch.listeners.remove(worker.epoch_is)
    node.reads.indexer = None
    worker.stop()
    await stop_task(task)
