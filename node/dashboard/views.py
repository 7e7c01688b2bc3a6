"""Dashboard HTTP handlers: the page, its two static files, and the few reads the REST API lacks.

Everything else the page shows comes from the ordinary REST API (`/v1/search`, `/v1/entries/...`),
called by the page with the same bearer key an agent would use.
"""

from __future__ import annotations

import asyncio
from importlib import resources
from typing import TYPE_CHECKING, Annotated

import msgspec
from aiohttp import web

from identity.schema import LinkType
from node.dashboard import data, graphs, store
from node.errors import InvalidInput, NotFound
from node.spaces.store import sight_of
from node.web.appkeys import NODE
from node.web.auth import principal
from node.web.http import Route, decode_query, json_response
from wire.api import MAX_HOPS, Direction, ReadQuery

if TYPE_CHECKING:
    from node.service import Node

STATIC = {"app.js": "text/javascript", "app.css": "text/css"}
# The page runs only its own script and style; graphs arrive as SVG markup with presentation attributes.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self';"
    " base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class GraphQuery(msgspec.Struct, forbid_unknown_fields=True):
    """Parameters of the neighbourhood drawing: how far to walk, along which link types, in which direction."""

    hops: Annotated[int, msgspec.Meta(ge=1, le=MAX_HOPS)] = 1
    link_types: Annotated[list[LinkType], msgspec.Meta(max_length=8)] = []
    direction: Direction = "both"


class Session(msgspec.Struct):
    """Who the page is signed in as."""

    role: str
    agent_id: str | None
    display_name: str | None
    node_id: str
    features: list[str]


def _node(request: web.Request) -> Node:
    return request.app[NODE]


def _asset(name: str) -> bytes:
    return resources.files("node.dashboard").joinpath("static", name).read_bytes()


def entry_ref(request: web.Request) -> str:
    """The `{ref}` path parameter: a local id (digits) or a record hash (64 lowercase hex)."""
    ref = request.match_info["ref"]
    is_id = ref.isascii() and ref.isdigit() and len(ref) <= 18
    is_hash = len(ref) == 64 and all(c in "0123456789abcdef" for c in ref)
    if not (is_id or is_hash):
        raise InvalidInput("ref must be an entry's local id or its 64-hex record hash", field="ref")
    return ref


async def page(request: web.Request) -> web.Response:
    """The single HTML page; it holds no data until the user signs in."""
    return web.Response(body=_asset("index.html"), content_type="text/html", charset="utf-8", headers=_HEADERS)


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in STATIC:
        raise NotFound(f"no dashboard file {name}", code="not_found", field="name")
    return web.Response(body=_asset(name), content_type=STATIC[name], charset="utf-8", headers=_HEADERS)


async def session(request: web.Request) -> web.Response:
    who = principal(request)
    node = _node(request)
    name = None
    if who.agent_id is not None:
        names = await node.db.read(lambda c: store.display_names(c, [who.agent_id or ""]))
        name = names.get(who.agent_id)
    return json_response(
        Session(
            role=who.role,
            agent_id=who.agent_id,
            display_name=name,
            node_id=node.node_id,
            features=features(request.app),
        )
    )


# An optional view appears when the app serves the REST route its data comes from.
FEATURE_ROUTES = {
    "tasks": "/v1/agent-workflows/graph",
    "bus": "/v1/agent-workflows/messages",
    "candidates": "/v1/default-mode/candidates",
    "spaces": "/v1/spaces",
    "peers": "/v1/peers",
    "push": "/v1/push/endpoints",
    "purges": "/v1/admin/purges",
}


def features(app: web.Application) -> list[str]:
    """The optional views whose backends this node serves (the page shows a tab for each)."""
    served = {r.canonical for r in app.router.resources()}
    return [name for name, path in FEATURE_ROUTES.items() if path in served]


async def agents(request: web.Request) -> web.Response:
    node = _node(request)
    return json_response(await node.db.read(lambda c: data.agents(c, node.now_ms())))


async def agent_keys(request: web.Request) -> web.Response:
    """An agent's key history, by the service call behind GET /v1/agents/{agent_id}, with its void records counted
    for the admin."""
    node = _node(request)
    agent = await node.agents.get(request.match_info["agent_id"])
    assert agent.key_history is not None  # `agent_out` always reads it (None only in other answers' shapes)
    voided = await node.db.read(lambda c: data.void_count(c, agent.agent_id)) if principal(request).is_admin else None
    return json_response(data.AgentKeys(agent.agent_id, agent.display_name, agent.key_history, voided))


async def provenance(request: web.Request) -> web.Response:
    ref = entry_ref(request)
    viewer = principal(request).agent_id
    found = await _node(request).db.read(lambda c: data.provenance(c, ref, sight_of(c, viewer)))
    if found is None:
        raise NotFound(f"no entry {ref}", code="entry_not_found", field="ref")
    return json_response(found)


async def entry_graph(request: web.Request) -> web.Response:
    ref = entry_ref(request)
    q = decode_query(request, GraphQuery)
    node = _node(request)
    result = await node.reads.read(
        [ref],
        ReadQuery(hops=q.hops, link_types=q.link_types, direction=q.direction, include_synthetic=True),
        principal(request).agent_id,
    )
    if result.missing:
        raise NotFound(f"no entry {ref}", code="entry_not_found", field="ref")
    focus = next(e.record_hash for e in result.entries if ref in (str(e.id), e.record_hash))
    authors = sorted({e.author_id for e in result.entries})
    names = await node.db.read(lambda c: store.display_names(c, authors))
    svg = await asyncio.to_thread(
        graphs.neighbourhood_svg, focus, result.entries, result.links, names, result.truncated
    )
    return web.Response(text=svg, content_type="image/svg+xml", headers={"Cache-Control": "no-store"})


ROUTES: list[Route] = [
    Route("GET", "/dashboard/api/session", session, "Who the dashboard is signed in as", "any"),
    Route("GET", "/dashboard/api/agents", agents, "Agents with their activity", "any"),
    Route("GET", "/dashboard/api/agents/{agent_id}/keys", agent_keys, "An agent's key history", "any"),
    Route("GET", "/dashboard/api/entries/{ref}/provenance", provenance, "An entry's provenance", "any"),
    Route(
        "GET",
        "/dashboard/api/entries/{ref}/graph.svg",
        entry_graph,
        "An entry's neighbourhood as SVG",
        "any",
        query=GraphQuery,
    ),
]
