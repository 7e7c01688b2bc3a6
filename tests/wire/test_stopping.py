"""wire.stopping: `stop_task` ends the task it stops quietly, and never drops a stop meant for the one waiting."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from wire.stopping import raise_if_stopped_since, stop_task, stops_pending, wait_ended


async def test_the_stopped_tasks_own_cancellation_is_not_raised() -> None:
    task = asyncio.create_task(asyncio.Event().wait())
    await asyncio.sleep(0)
    await stop_task(task)
    assert task.cancelled()


async def test_a_task_that_ends_on_its_own_when_told_to_stop_is_waited_for() -> None:
    finished = asyncio.Event()

    async def tidy() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)  # its own clean-up, then a normal end
            finished.set()

    task = asyncio.create_task(tidy())
    await asyncio.sleep(0)
    await stop_task(task)
    assert finished.is_set() and task.done() and not task.cancelled()


async def test_a_stop_of_the_waiting_task_reaches_it() -> None:
    """The waiter is cancelled while it waits for the task it stops (whose own end is slow): it ends cancelled, as
    `suppress(CancelledError)` around the wait would not let it."""
    slow_end = asyncio.Event()

    async def slow() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await slow_end.wait()
            raise

    inner = asyncio.create_task(slow())
    await asyncio.sleep(0)
    after: list[str] = []

    async def stopper() -> None:
        await stop_task(inner)
        after.append("went on")  # a dropped stop would run this

    outer = asyncio.create_task(stopper())
    for _ in range(3):  # the waiter waits, and the task it stopped is in its slow end
        await asyncio.sleep(0)
    assert not inner.done() and not outer.done()
    outer.cancel()
    async with asyncio.timeout(5):
        with pytest.raises(asyncio.CancelledError):
            await outer
    assert after == []
    assert inner.cancelled()  # the stop reached it through the wait, and its slow end was cut short


async def test_a_stop_already_under_way_is_not_raised_again() -> None:
    """aiohttp's `run_app` runs the cleanup contexts in its main task after a SIGTERM cancelled it: a stop_task there
    ends quietly, so each context's exit runs and the process exits cleanly (tests/ops/test_lifecycle.py)."""
    stopped: list[bool] = []

    async def main() -> None:
        try:
            await asyncio.Event().wait()
        finally:  # cancelled: the clean-up runs with the stop under way
            work = asyncio.create_task(asyncio.Event().wait())
            await asyncio.sleep(0)
            await stop_task(work)
            stopped.append(work.cancelled())

    task = asyncio.create_task(main())
    await asyncio.sleep(0)
    task.cancel()
    async with asyncio.timeout(5):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert stopped == [True]


async def test_a_stop_of_the_waiter_that_the_stopped_task_swallowed_still_reaches_the_waiter() -> None:
    """Cancelling the waiter only forwards the cancellation to the task it awaits; one that swallows it and returns
    would end the wait normally, and the waiter's stop would be lost."""

    async def stubborn() -> None:
        for _ in range(2):  # swallows the first stop (stop_task's) and the forwarded one
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()

    inner = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    after: list[str] = []

    async def stopper() -> None:
        await stop_task(inner)
        after.append("went on")

    outer = asyncio.create_task(stopper())
    for _ in range(3):
        await asyncio.sleep(0)
    outer.cancel()
    async with asyncio.timeout(5):
        with pytest.raises(asyncio.CancelledError):
            await outer
    assert after == [] and inner.done() and not inner.cancelled()


async def test_raise_if_stopped_since_sees_a_stop_that_what_was_awaited_swallowed() -> None:
    """The check `leader_only`'s terms make around ending a term's work: a stop swallowed by the awaited code is still
    raised, and no stop is raised when none came."""
    reached = asyncio.Event()
    outcomes: list[str] = []

    async def swallowing() -> None:
        reached.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()

    async def waiter() -> None:
        before = stops_pending()
        raise_if_stopped_since(before)  # nothing came yet: no raise
        outcomes.append("checked")
        await swallowing()
        raise_if_stopped_since(before)
        outcomes.append("ran on")

    task = asyncio.create_task(waiter())
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert outcomes == ["checked"]
    assert stops_pending() == 0  # the test's own task was never cancelled


async def test_a_stop_of_the_waiter_goes_before_the_tasks_failure_at_its_end() -> None:
    """The awaited task fails as it ends (uvicorn's exit turned into a RuntimeError): a stop of the waiter that came
    meanwhile is raised, not the failure that a caller may suppress; with no stop, the failure is raised."""

    async def fails_when_stopped() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("failed at its end") from None

    task = asyncio.create_task(fails_when_stopped())
    waiter = asyncio.create_task(wait_ended(task))
    await asyncio.sleep(0)  # the waiter waits for the task
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert isinstance(task.exception(), RuntimeError)

    alone = asyncio.create_task(fails_when_stopped())
    await asyncio.sleep(0)
    alone.cancel()
    with pytest.raises(RuntimeError, match="failed at its end"):
        await wait_ended(alone)
