"""The application factory: one Node, the features of node/features.py, the dashboard and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

from node import __version__
from node.agents import sessions as agent_auth
from node.features import FEATURES, all_routes
from node.federation.routes import SyncSettings
from node.ops import metrics
from node.ops.logging_setup import request_log_middleware
from node.service import Node
from node.store import conn as neutral
from node.web import limits
from node.web.appkeys import LIMIT, NODE, SYNC_SETTINGS
from node.web.auth import guard
from node.web.background import CleanupContext
from node.web.http import error_middleware, json_response, openapi, security_headers

MAX_BODY_BYTES = 1024 * 1024
log = logging.getLogger("bbs.app")


def create_app(
    node: Node, rate_limit: limits.RateLimit | None = None, sync: SyncSettings | None = None
) -> web.Application:
    """Build the aiohttp application around an opened or unopened Node (opened on startup, closed on cleanup).

    `rate_limit` bounds requests per bearer credential (none when not given) and `sync` says how the node
    pulls from its peers (defaults when not given); `bbs serve` passes both from its config."""
    limit = rate_limit or limits.RateLimit()
    app = web.Application(
        middlewares=[request_log_middleware, error_middleware, limits.middleware(limit)],
        client_max_size=MAX_BODY_BYTES,
    )
    app.on_response_prepare.append(security_headers)
    app[LIMIT] = limit
    app[NODE] = node
    app[SYNC_SETTINGS] = sync or SyncSettings()
    metrics.install(app)
    routes = all_routes()
    for route in routes:
        app.router.add_route(route.method, route.path, guard(route, agent_auth.authenticator(node)))

    async def openapi_json(request: web.Request) -> web.Response:
        return json_response(openapi_document())

    app.router.add_get("/openapi.json", openapi_json)
    from node import dashboard  # HTML and SVG routes, kept out of /openapi.json

    dashboard.setup(app, agent_auth.authenticator(node))
    app.cleanup_ctx.append(_lifecycle)  # first: every feature's background work stops before the node closes
    for feature in FEATURES:
        if feature.setup is not None:
            feature.setup(app)
        if node.db.pg_url is None:
            app.cleanup_ctx.extend(feature.background)
        else:  # a feature whose store module is not on PostgreSQL yet must not stop the node from starting
            app.cleanup_ctx.extend(_off_if_unported(feature.name, context) for context in feature.background)
    return app


@functools.cache
def openapi_document() -> dict[str, Any]:
    """`/openapi.json`, from the route table (`all_routes`, the same in every app): made once per process, at its
    first request, so neither a start nor each app a test builds pays msgspec's schema work (0.3 s or more)."""
    return openapi(all_routes(), title="Agent BBS", version=__version__)


def _off_if_unported(name: str, context: CleanupContext) -> CleanupContext:
    """`context`, except that a PostgreSQL error while it starts (a statement of a store module not yet ported:
    docs/decisions.md record 80) is logged as an error naming the feature and leaves its background work off, where
    it would stop the node. Its requests still answer with the error."""

    @functools.wraps(context)  # `__wrapped__` names the feature's own context (tests/node/test_features.py)
    async def guarded(app: web.Application) -> AsyncIterator[None]:
        started = context(app)
        try:
            await anext(started)
        except neutral.DatabaseError as exc:
            log.error("%s: not available on PostgreSQL yet, its background work is off (%s)", name, exc)
            yield
            return
        try:
            yield
        finally:
            with contextlib.suppress(StopAsyncIteration):
                await anext(started)

    return guarded


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    """Open the node, wake the long-polls on every commit (other processes' too, on PostgreSQL: record 85) and join
    the choice of its leader (node/store/leader.py) before any feature's background work starts; give the lead up,
    stop listening and close the node after all of it stopped."""
    node = app[NODE]
    if not node.db.is_open:
        node.open()
    loop = asyncio.get_running_loop()
    pending = False  # a wake is scheduled on the loop: commits meanwhile need no other (one loop wake-up)

    def woken() -> None:
        nonlocal pending
        pending = False  # first: a commit from now on schedules a wake of its own
        node.feed.wake()
        node.sync.wake()

    def after_commit() -> None:  # on the writer thread, or the LISTEN thread for another process's commit
        nonlocal pending
        if not pending:
            pending = True
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(woken)

    # The long-polls of /v1/feed and of the sync changes feed wake on a commit; the search indexer and the push
    # dispatcher add their own listeners. On PostgreSQL, other processes' commits call them too (record 85).
    node.db.after_commit.append(after_commit)
    node.db.wakeups.start(node.db.pg_url)
    await node.leadership.start()
    yield
    try:
        await node.leadership.stop()  # raises a stop of this cleanup that came while it waited, once it has ended
    finally:
        node.db.wakeups.stop()
        node.db.after_commit.remove(after_commit)
        try:
            if node.side is not None:
                await node.side.close()
        finally:
            node.close()


def build(data_dir: Path) -> web.Application:
    """Application for a data folder (initialised if empty)."""
    from node.ops.datadir import initialise

    initialise(data_dir)
    return create_app(Node(data_dir))
