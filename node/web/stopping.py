"""Stopping a background task from an aiohttp cleanup context, without losing a stop meant for the one stopping it."""

from __future__ import annotations

import asyncio


async def stop_task(task: asyncio.Task[object]) -> None:
    """Cancel `task` and wait until it has ended.

    Its own `CancelledError` is the expected end and is not raised; a cancellation of the task doing the waiting is.
    `suppress(CancelledError)` around `await task` cannot tell the two apart: a context stopping its work while its
    own task was being stopped (a `leader_only` term ending as the app stops) dropped that stop and ran on, and the
    app's cleanup then waited for it without end."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
