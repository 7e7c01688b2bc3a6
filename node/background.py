"""Work a node's app repeats while it runs (trust refresh, notification expiry), as aiohttp cleanup contexts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from node.appkeys import NODE

if TYPE_CHECKING:
    from node.service import Node


def periodic(
    name: str, seconds: float, run: Callable[[Node], Awaitable[object]], log: logging.Logger
) -> Callable[[web.Application], AsyncIterator[None]]:
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
