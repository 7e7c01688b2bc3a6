"""Stopping a background task from an aiohttp cleanup context, without losing a stop meant for the one stopping it."""

from __future__ import annotations

import asyncio


def stops_pending() -> int:
    """How many cancellations of the current task are pending (`Task.cancelling`; 0 outside a task): taken before a
    wait, then given to `raise_if_stopped_since` after it."""
    current = asyncio.current_task()
    return 0 if current is None else current.cancelling()


def raise_if_stopped_since(before: int) -> None:
    """Raise `CancelledError` if the current task was cancelled since `stops_pending()` answered `before`, even when
    whatever it awaited meanwhile swallowed that cancellation and returned normally."""
    if stops_pending() > before:
        raise asyncio.CancelledError


async def stop_task(task: asyncio.Task[object]) -> None:
    """Cancel `task` and wait until it has ended (`wait_ended`)."""
    task.cancel()
    await wait_ended(task)


async def wait_ended(task: asyncio.Task[object]) -> None:
    """Wait until `task`, told to stop (cancelled, or asked in its own way), has ended.

    Its own `CancelledError` is the expected end and is not raised; a cancellation of the task doing the waiting that
    arrives during the wait is, even when `task` swallowed it and ended normally. `suppress(CancelledError)` around
    `await task` cannot tell the two apart: a context stopping its work while its own task was being stopped (a
    `leader_only` term ending as the app stops) dropped that stop and ran on, and the app's cleanup then waited for it
    without end. A stop already under way when the wait began (aiohttp's `run_app` cleans up in its main task, which
    a SIGTERM cancelled) is not raised again: it is counted before the wait."""
    before = stops_pending()
    try:
        await task
    except asyncio.CancelledError:
        raise_if_stopped_since(before)
        return
    except BaseException:  # its own failure, unless the waiter was stopped meanwhile: the stop goes first
        raise_if_stopped_since(before)
        raise
    raise_if_stopped_since(before)
