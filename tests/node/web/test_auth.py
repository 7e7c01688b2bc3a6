"""node.web.auth: bearer tokens, the per-route guard, and the principal a handler reads."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest
from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestClient, make_mocked_request

from identity import keys
from node.agents import service as agents
from node.agents import sessions as agent_auth
from node.service import Node
from node.web.auth import agent_id, bearer_token, guard, principal
from node.web.http import Route, decode_query, error_middleware, json_response
from tests.conftest import AgentCreds
from wire.api import SessionIn

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


class Page(msgspec.Struct, forbid_unknown_fields=True):
    limit: int = 10


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("BEARER  abc ", "abc"),
        ("Bearer", None),
        ("Bearer ", None),
        ("Bearer    ", None),
        ("Basic dXNlcjpwYXNz", None),
        ("Token abc", None),
        ("", None),
    ],
)
def test_bearer_token(header: str, token: str | None) -> None:
    request = make_mocked_request("GET", "/", headers={"Authorization": header} if header else {})
    assert bearer_token(request) == token


async def whoami(request: web.Request) -> web.Response:
    who = principal(request)
    return json_response({"role": who.role, "agent_id": agent_id(request) if who.role == "agent" else None})


async def page(request: web.Request) -> web.Response:
    return json_response({"limit": decode_query(request, Page).limit})


async def open_door(request: web.Request) -> web.Response:
    return json_response({"ok": True})


@pytest.fixture
async def guarded(aiohttp_client: Callable[..., Awaitable[TestClient]], node: Node) -> TestClient:
    """A real app: the node's authenticator behind the guard, one route per kind of auth."""
    app = web.Application(middlewares=[error_middleware])
    authenticate = agent_auth.authenticator(node)
    routes = [
        Route("GET", "/agent", whoami, "agents only", "agent"),
        Route("GET", "/admin", whoami, "the admin only", "admin"),
        Route("GET", "/any", whoami, "agents or the admin", "any"),
        Route("GET", "/open", open_door, "anyone", "none"),
        Route("GET", "/peer", open_door, "peer-signed (checked by the handler)", "peer"),
        Route("GET", "/page", page, "a route with query parameters", "any", query=Page),
    ]
    for route in routes:
        app.router.add_route(route.method, route.path, guard(route, authenticate))
    return await aiohttp_client(app)


async def problem(resp: ClientResponse, status: int, code: str) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    body: dict[str, Any] = await resp.json(content_type=None)
    assert body["code"] == code, body
    return body


async def test_each_auth_kind_admits_its_principals(
    guarded: TestClient, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    alice = await make_agent("alice")
    resp = await guarded.get("/agent", headers=alice.headers)
    assert await resp.json() == {"role": "agent", "agent_id": alice.agent_id}
    assert await (await guarded.get("/admin", headers=admin_headers)).json() == {"role": "admin", "agent_id": None}
    assert (await (await guarded.get("/any", headers=alice.headers)).json())["role"] == "agent"
    assert (await (await guarded.get("/any", headers=admin_headers)).json())["role"] == "admin"
    await problem(await guarded.get("/agent", headers=admin_headers), 403, "agent_key_required")
    await problem(await guarded.get("/admin", headers=alice.headers), 403, "admin_required")


async def test_open_and_peer_routes_need_no_bearer(guarded: TestClient) -> None:
    for path in ("/open", "/peer"):
        resp = await guarded.get(path, headers={"Authorization": "Bearer nonsense"})
        assert resp.status == 200 and await resp.json() == {"ok": True}


@pytest.mark.parametrize("path", ["/agent", "/admin", "/any", "/page"])
async def test_a_missing_or_unknown_credential_is_401(guarded: TestClient, path: str) -> None:
    body = await problem(await guarded.get(path), 401, "unauthorized")
    assert body["detail"] == "send 'Authorization: Bearer <api key>'"
    resp = await guarded.get(path, headers={"Authorization": "Bearer bbs_0011223344556677_nope"})
    assert resp.headers["WWW-Authenticate"] == "Bearer"
    assert (await problem(resp, 401, "unauthorized"))["detail"] == "unknown or revoked key"
    await problem(await guarded.get(path, headers={"Authorization": "Bearer caf\u00e9"}), 401, "unauthorized")


async def test_a_route_without_query_parameters_refuses_any(guarded: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    body = await problem(await guarded.get("/agent?x=1", headers=alice.headers), 422, "validation_error")
    assert body["field"] == "$.x"
    body = await problem(await guarded.get("/open?y="), 422, "validation_error")
    assert body["field"] == "$.y"
    # a route that declares its query takes its own parameters and refuses others through its Struct
    assert await (await guarded.get("/page?limit=3", headers=alice.headers)).json() == {"limit": 3}
    body = await problem(await guarded.get("/page?colour=red", headers=alice.headers), 422, "validation_error")
    assert body["field"] == "$.colour"


async def test_authentication_comes_before_the_query_check(guarded: TestClient) -> None:
    await problem(await guarded.get("/agent?x=1"), 401, "unauthorized")


async def test_a_session_token_is_an_agent_principal(guarded: TestClient, node: Node) -> None:
    """A key-proof session (node.agents.sessions) passes the same guard as an API key."""
    key = keys.SigningKey.generate()
    record = agents.identity_record(key, "Carol", "", node.node_id)
    await node.db.write(
        lambda c: agents.register(c, name="carol", key=key, keep_key=False, record=record, now_ms=node.now_ms())
    )
    challenge = await agent_auth.issue_challenge(node, key.did)
    signature = key.sign(agent_auth.challenge_message(node.node_id, key.did, challenge.challenge))
    session = await agent_auth.open_session(
        node, SessionIn(agent_id=key.did, challenge=challenge.challenge, signature=signature)
    )
    resp = await guarded.get("/agent", headers={"Authorization": f"Bearer {session.token}"})
    assert await resp.json() == {"role": "agent", "agent_id": key.did}


def test_the_guard_keeps_the_handler_name_and_auth() -> None:
    """The rate limiter reads `auth` from the guarded handler; the name stays the operation id."""

    async def nobody(token: str) -> agents.Principal | None:
        return None

    wrapped = guard(Route("GET", "/x", whoami, "", "admin"), nobody)
    assert wrapped.__name__ == "whoami"
    assert wrapped.auth == "admin"  # type: ignore[attr-defined]
