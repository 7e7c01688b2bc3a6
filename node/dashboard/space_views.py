"""Dashboard reads of spaces (issue 37; docs/spaces.md): the spaces the signed-in agent is a member of, or every
space the node holds to its admin (the operator reads every space it holds: docs/spaces.md, the threat model), and
one space's members. Both ask `node.spaces.service.Spaces`, the same calls as `GET /v1/spaces[/{space_id}]`."""

from __future__ import annotations

from aiohttp import web

from node.spaces.routes import space_id_of
from node.web.appkeys import NODE
from node.web.auth import principal
from node.web.http import Route, json_response


def _viewer(request: web.Request) -> str | None:
    """The agent the page is signed in as; None for the node's admin (the operator)."""
    who = principal(request)
    return None if who.is_admin else who.agent_id


async def spaces(request: web.Request) -> web.Response:
    return json_response(await request.app[NODE].spaces.list_of(_viewer(request)))


async def space(request: web.Request) -> web.Response:
    return json_response(await request.app[NODE].spaces.show(_viewer(request), space_id_of(request)))


ROUTES: list[Route] = [
    Route(
        "GET", "/dashboard/api/spaces", spaces, "Spaces the signed-in agent is a member of (every space: admin)", "any"
    ),
    Route("GET", "/dashboard/api/spaces/{space_id}", space, "A space and its members", "any"),
]
