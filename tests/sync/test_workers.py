"""The worker processes (sync/workers.py): started in the background, answers in order, a caller's exception
passed on, a broken pool given up for threads."""

from __future__ import annotations

import asyncio
import math
import os
import signal

import pytest

from sync import workers


async def _until_up(pool: workers.WorkerPool) -> None:
    for _ in range(600):
        if pool.up:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the workers did not start in 60 s")


async def test_a_call_that_does_not_wait_starts_the_workers_for_a_later_one() -> None:
    pool = workers.WorkerPool(2)
    try:
        assert await pool.run(math.sqrt, [(4.0,)], wait=False) is None  # not up yet: the caller's threads
        await _until_up(pool)
        assert await pool.run(math.sqrt, [(4.0,), (9.0,), (16.0,)], wait=False) == [2.0, 3.0, 4.0]
        assert pool.runs == 1
        with pytest.raises(ValueError, match="math domain error"):  # the function's own error, as on a thread
            await pool.run(math.sqrt, [(4.0,), (-1.0,)])
        assert not pool.failed and await pool.run(math.sqrt, [(25.0,)]) == [5.0]
    finally:
        pool.close()


async def test_a_killed_worker_gives_the_pool_up_for_good() -> None:
    pool = workers.WorkerPool(1)
    try:
        assert await pool.run(os.getpid, [()]) is not None
        (pid,) = await pool.run(os.getpid, [()]) or [0]
        os.kill(pid, signal.SIGKILL)
        assert await pool.run(math.sqrt, [(4.0,)]) is None and pool.failed
        assert await pool.run(math.sqrt, [(4.0,)]) is None  # not tried again for every call
    finally:
        pool.close()


def test_chunks_keep_the_order_and_cover_every_item() -> None:
    items = list(range(10))
    assert workers.chunks(items, 3) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert workers.chunks(items, 1) == [items]
    assert workers.chunks([], 2) == []
    assert workers.chunks(items, 0) == [items]


async def test_a_pool_closed_before_its_workers_are_up_says_so() -> None:
    pool = workers.WorkerPool(1)
    pool.start()
    pool.close()  # while its worker starts (its first task cancelled or not): `up` answers, it does not raise
    assert not pool.up and pool.failed
    assert await pool.run(math.sqrt, [(4.0,)]) is None
