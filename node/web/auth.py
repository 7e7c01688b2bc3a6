"""Bearer authentication for REST routes, applied per route from the route table."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from node.agents.service import Principal
from node.errors import Forbidden, InvalidInput, Unauthorized
from node.web.http import Handler, Route

PRINCIPAL: web.RequestKey[Principal] = web.RequestKey("principal", Principal)


def bearer_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def guard(route: Route, authenticate: Callable[[str], Awaitable[Principal | None]]) -> Handler:
    """Wrap a route's handler so it runs only for the principals its `auth` allows."""
    handler = route.handler
    if route.query is None:  # a route without query parameters refuses any, as the others refuse unknown ones
        handler = _no_query(handler)

    async def guarded(request: web.Request) -> web.StreamResponse:
        if route.auth in ("none", "peer"):
            return await handler(request)
        token = bearer_token(request)
        if token is None:
            raise Unauthorized("send 'Authorization: Bearer <api key>'", headers={"WWW-Authenticate": "Bearer"})
        principal: Principal | None = await authenticate(token)
        if principal is None:
            raise Unauthorized("unknown or revoked key", headers={"WWW-Authenticate": "Bearer"})
        if route.auth == "agent" and principal.role != "agent":
            raise Forbidden("this operation needs an agent's key, not the admin token", code="agent_key_required")
        if route.auth == "admin" and not principal.is_admin:
            raise Forbidden("this operation needs the admin token", code="admin_required")
        request[PRINCIPAL] = principal
        return await handler(request)

    guarded.__name__ = route.handler.__name__
    guarded.auth = route.auth  # type: ignore[attr-defined]  # read by the rate-limit middleware
    return guarded


def _no_query(handler: Handler) -> Handler:
    async def checked(request: web.Request) -> web.StreamResponse:
        for name in request.query:
            raise InvalidInput(f"unknown query parameter {name!r}: this route takes none", field=f"$.{name}")
        return await handler(request)

    return checked


def principal(request: web.Request) -> Principal:
    """The authenticated caller of this request."""
    return request[PRINCIPAL]


def agent_id(request: web.Request) -> str:
    """The authenticated agent's did."""
    value = principal(request).agent_id
    assert value is not None
    return value
