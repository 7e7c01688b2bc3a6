"""REST route of trust (POST /v1/trust/refresh): call node/trust/service.py's `Trust.refresh`, format."""

from __future__ import annotations

from aiohttp import web

from node.trust.service import TrustRefresh
from node.web.appkeys import NODE
from node.web.http import Route, json_response


async def refresh_now(request: web.Request) -> web.Response:
    """POST /v1/trust/refresh: recompute the trust cache now if the log grew since the last run."""
    return json_response(await request.app[NODE].trust.refresh())


ROUTES: list[Route] = [
    Route(
        "POST",
        "/v1/trust/refresh",
        refresh_now,
        "Recompute trust scores and community confidence now (a no-op when no record arrived since)",
        "any",
        responses={200: TrustRefresh},
        tag="trust",
    )
]
