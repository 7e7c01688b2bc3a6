"""The application factory: one Node, its routes, its background tasks."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from node import __version__, agent_auth, limits, metrics, peer_routes
from node.appkeys import LIMIT, NODE
from node.auth import guard
from node.background import periodic
from node.default_mode.routes import ROUTES as DEFAULT_MODE_ROUTES
from node.http import Route, error_middleware, json_response, openapi, security_headers
from node.logging_setup import request_log_middleware
from node.routes import ROUTES
from node.service import Node
from node.trust import ROUTES as TRUST_ROUTES
from node.trust import background_refresh as trust_refresh
from node.workflows import routes as workflow_routes

MAX_BODY_BYTES = 1024 * 1024
EXPIRY_SWEEP_SECONDS = 60  # how late a notification past its 7 days may still read as pending, at most
log = logging.getLogger("bbs.notify")
ROUTE_TABLES: list[list[Route]] = [ROUTES]
ROUTE_TABLES.append(DEFAULT_MODE_ROUTES)  # governed memory: /v1/default-mode
ROUTE_TABLES.append(TRUST_ROUTES)  # trust scores: on-demand refresh
ROUTE_TABLES.append(agent_auth.ROUTES)  # key-proof sessions
ROUTE_TABLES.append(peer_routes.PEER_ROUTES)  # federation: peers, digest, peer-signed sync
ROUTE_TABLES.append(workflow_routes.ROUTES)  # agent workflows: bus, tasks, leases, graph


def all_routes() -> list[Route]:
    """Every REST route of the node, from each feature's table."""
    return [route for table in ROUTE_TABLES for route in table]


def create_app(
    node: Node, rate_limit: limits.RateLimit | None = None, sync: peer_routes.SyncSettings | None = None
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
    metrics.install(app)
    routes = all_routes()
    for route in routes:
        app.router.add_route(route.method, route.path, guard(route, agent_auth.authenticator(node)))
    document = openapi(routes, title="Agent BBS", version=__version__)

    async def openapi_json(request: web.Request) -> web.Response:
        return json_response(document)

    app.router.add_get("/openapi.json", openapi_json)
    from node import dashboard  # HTML and SVG routes, kept out of /openapi.json

    dashboard.setup(app, agent_auth.authenticator(node))
    app.cleanup_ctx.append(_lifecycle)
    app.cleanup_ctx.append(trust_refresh)
    app.cleanup_ctx.append(expiry_sweep)
    peer_routes.install(app, sync)  # after _lifecycle: the puller stops before the node closes
    return app


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    node = app[NODE]
    if not node.db.is_open:
        node.open()
    yield
    node.close()


# cleanup_ctx: mark expired notifications every EXPIRY_SWEEP_SECONDS (polls that lease do it too).
expiry_sweep = periodic("notification expiry sweep", EXPIRY_SWEEP_SECONDS, Node.expire_notifications, log)


def build(data_dir: Path) -> web.Application:
    """Application for a data folder (initialised if empty)."""
    from node.datadir import initialise

    initialise(data_dir)
    return create_app(Node(data_dir))
