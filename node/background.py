"""Work a node's app repeats while it runs (trust refresh, notification expiry), as aiohttp cleanup contexts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from node import trust
from node.appkeys import NODE
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
