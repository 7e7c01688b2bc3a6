"""The retention job: while the node runs, every `INTERVAL_S` seconds each policy deletes its rows older than its
days in batches of `BATCH` (one short write transaction each, so posts and polls wait behind none of them) and
records what it removed (`retention_policies`). Every policy is off (0 days) unless configured
(`retain_delivered_notifications_days`, `retain_rejected_candidates_days`; docs/operations.md, "Retention")."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING

from aiohttp import web

from node.retention import store
from node.web.appkeys import NODE
from sync.store import RoundFailures
from wire.stopping import stop_task

if TYPE_CHECKING:
    from node.service import Node

log = logging.getLogger("bbs.retention")
INTERVAL_S = 3600.0  # how often the policies run
BATCH = 500  # rows deleted per write transaction
DAY_MS = 86_400_000


async def run_policies(node: Node, days: Mapping[str, int], *, batch: int = BATCH) -> dict[str, int]:
    """Apply each policy of `days` (policy -> days to keep; 0 or absent: off, nothing removed) once; the rows each
    removed. Every policy's setting is recorded, an off one too, so `bbs doctor` shows it."""
    removed: dict[str, int] = {}
    for policy in store.POLICIES:
        keep = days.get(policy, 0)
        now = node.now_ms()
        gone = 0
        if keep > 0:
            cutoff = now - keep * DAY_MS
            while True:
                n = await node.db.write(functools.partial(store.delete_batch_txn, policy=policy, cutoff_ms=cutoff,
                                                          limit=batch))  # fmt: skip
                gone += n
                if n < batch:
                    break
        await node.db.write(functools.partial(store.record_run_txn, policy=policy, days=keep, removed=gone, now_ms=now))
        removed[policy] = gone
    return removed


async def retention_context(app: web.Application) -> AsyncIterator[None]:
    """The retention job while the app runs: the node's policies (`Node.retention_days`) at start, then every
    INTERVAL_S seconds."""
    node = app[NODE]

    rounds = RoundFailures(log, "the retention job")

    async def loop() -> None:
        while True:
            try:
                removed = await run_policies(node, node.retention_days)
                rounds.passed()
                if any(removed.values()):
                    log.info("retention removed %s", removed)
            except Exception as exc:
                if node.db.is_open:
                    rounds.failed(exc)
            await asyncio.sleep(INTERVAL_S)

    task = asyncio.create_task(loop(), name="retention")
    yield
    await stop_task(task)
