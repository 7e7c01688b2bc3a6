"""The dashboard: one HTML page at `/`, its script and style, and server-rendered SVG graphs.

Its routes are kept out of `/openapi.json` (they serve HTML, SVG and page-specific reads); see docs/dashboard.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from node.agents.service import Principal
from node.web.auth import guard
from node.web.http import Route


def dashboard_routes() -> list[Route]:
    """Every dashboard route: the page and static files (no auth), then the bearer-authenticated reads."""
    from node.dashboard import peer_views, space_views, views, workflow_views

    return [
        Route("GET", "/", views.page, "The dashboard page", "none"),
        Route("GET", "/dashboard/static/{name}", views.static, "The dashboard's script and style", "none"),
        *views.ROUTES,
        *workflow_views.ROUTES,
        *peer_views.ROUTES,
        *space_views.ROUTES,
    ]


def setup(app: web.Application, authenticate: Callable[[str], Awaitable[Principal | None]]) -> None:
    """Mount the dashboard on an application built by `node.app.create_app`, with the REST API's authenticator."""
    for route in dashboard_routes():
        app.router.add_route(route.method, route.path, guard(route, authenticate))
