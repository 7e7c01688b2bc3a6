"""Worker processes for CPU-bound work on many records: verifying a large sync page, signing a large batch.

One pool per process (`POOL`), spawned at first use and kept for the process's life. Work sent to it runs under the
workers' GILs, not the one the node's event loop, writer and indexer share: the Python half of a record's check or
signature then runs beside the store's Python instead of waiting for it (docs/decisions.md record 91). When the
workers cannot start or fail, `WorkerPool.run` answers None from then on and the caller does the work on its own
threads: a node works without them.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import BrokenExecutor, Future, ProcessPoolExecutor
from typing import Any, TypeVar

from identity import schema
from sync.store import Invalid, Verified
from sync.verify import accept_all, start_worker, verdicts

log = logging.getLogger("bbs.workers")
# One core is left to this process (its writer and event loop): on 2 cores, one worker.
PROCESSES = max(1, min(4, (os.cpu_count() or 1) - 1))

T = TypeVar("T")


def _warm() -> None:
    """A worker's first task: answering it means the worker has started and imported what the work needs."""


class WorkerPool:
    """Worker processes (`spawn`ed, not forked: fork would copy a threaded process's locks), started at the first
    `run` or `start`, kept until `close`."""

    def __init__(self, workers: int, start_method: str = "spawn") -> None:
        self.workers, self.start_method = workers, start_method
        self.failed = workers < 1
        self._pool: ProcessPoolExecutor | None = None
        self._started: Future[None] | None = None
        self.runs = 0  # `run` calls the workers answered

    def start(self) -> None:
        """Start the workers in the background if they are not (a failure to start gives the pool up)."""
        if self.failed or self._pool is not None:
            return
        try:
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context(self.start_method),
                initializer=start_worker,
                initargs=(dict(schema.RECORD_TYPES), os.getpid()),
            )
            self._started = self._pool.submit(_warm)
        except Exception as exc:
            self._give_up(exc)

    @property
    def up(self) -> bool:
        """Whether the workers have started (`run(..., wait=False)` uses them only then)."""
        started = self._started  # cancelled when the pool was closed before its workers were up
        return started is not None and started.done() and not started.cancelled() and started.exception() is None

    async def run(self, fn: Callable[..., T], calls: Sequence[tuple[Any, ...]], *, wait: bool = True) -> list[T] | None:
        """`fn(*args)` for each of `calls` on the workers, their answers in order; None if the pool is unusable,
        or (with `wait` false) if its workers have not started yet: it starts them then, for a later call. An
        exception `fn` raises reaches the caller, as it would from the caller's own threads."""
        self.start()
        if self.failed or self._pool is None or self._started is None or (not wait and not self._started.done()):
            return None
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wrap_future(self._started)
            done = await asyncio.gather(*(loop.run_in_executor(self._pool, fn, *args) for args in calls))
        except (BrokenExecutor, OSError) as exc:  # a failed spawn, a killed worker: the caller's threads from now on
            self._give_up(exc)
            return None
        self.runs += 1
        return list(done)

    def _give_up(self, exc: BaseException) -> None:
        log.warning("worker processes failed (%s: %s); the work runs on threads from now on", type(exc).__name__, exc)
        self.close()

    def close(self) -> None:
        """Stop the workers; `run` answers None from now on."""
        self.failed = True
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def chunks(items: Sequence[T], parts: int) -> list[Sequence[T]]:
    """`items` cut into at most `parts` runs of nearly equal length, in order."""
    step = max(1, -(-len(items) // max(1, parts)))
    return [items[i : i + step] for i in range(0, len(items), step)]


class VerifyPool(WorkerPool):
    """The pool, with the verification of a large sync page as one of its jobs."""

    async def verify(self, items: list[tuple[bytes, str | None, str | None]]) -> list[Verified | Invalid] | None:
        """`verify_record` of each item (body, claimed address, claimed version) in order, or None if the pool is
        unusable. A worker answers a passed record by its hash; it is decoded again here (`accept_all`)."""
        done = await self.run(verdicts, [(chunk,) for chunk in chunks(items, self.workers)])
        if done is None:
            return None
        return await asyncio.to_thread(accept_all, items, [answer for chunk in done for answer in chunk])


POOL = VerifyPool(PROCESSES)
