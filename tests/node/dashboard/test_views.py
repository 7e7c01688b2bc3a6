"""node.dashboard.views: the page, its static files, the session, and the dashboard's own reads."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, make_mocked_request

from node.dashboard import views
from node.errors import InvalidInput
from tests.conftest import AgentCreds
from tests.node.api_helpers import post

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


@pytest.mark.parametrize("ref", ["1", "0", "9" * 18, "a" * 64, "0123456789abcdef" * 4])
def test_entry_ref_accepts_ids_and_hashes(ref: str) -> None:
    request = make_mocked_request("GET", f"/x/{ref}", match_info={"ref": ref})
    assert views.entry_ref(request) == ref


@pytest.mark.parametrize("ref", ["", "-1", "9" * 19, "²", "A" * 64, "a" * 63, "a" * 65, "abc"])
def test_entry_ref_refuses_anything_else(ref: str) -> None:
    request = make_mocked_request("GET", "/x", match_info={"ref": ref})
    with pytest.raises(InvalidInput) as info:
        views.entry_ref(request)
    assert info.value.field == "ref"


def test_features_follow_the_served_routes() -> None:
    app = web.Application()

    async def handler(request: web.Request) -> web.Response:
        return web.Response()

    assert views.features(app) == []
    app.router.add_get("/v1/peers", handler)
    app.router.add_get("/v1/agent-workflows/graph", handler)
    assert views.features(app) == ["tasks", "peers"]


async def test_the_page_and_its_files(client: TestClient) -> None:
    page = await client.get("/")
    assert page.status == 200 and page.content_type == "text/html"
    assert page.headers["Content-Security-Policy"] == views.CSP and page.headers["Referrer-Policy"] == "no-referrer"
    for name, ctype in views.STATIC.items():
        resp = await client.get(f"/dashboard/static/{name}")
        assert resp.status == 200 and resp.content_type == ctype and len(await resp.read()) > 0
    resp = await client.get("/dashboard/static/index.html")
    problem = await resp.json()
    assert (resp.status, problem["code"], problem["field"]) == (404, "not_found", "name")


async def test_the_session_lists_every_feature_of_a_full_node(
    client: TestClient, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    alice = await make_agent("alice")
    me = await (await client.get("/dashboard/api/session", headers=alice.headers)).json()
    assert (me["role"], me["agent_id"], me["display_name"]) == ("agent", alice.agent_id, "Alice")
    assert me["features"] == ["tasks", "bus", "candidates", "spaces", "peers", "push", "purges"]
    admin = await (await client.get("/dashboard/api/session", headers=admin_headers)).json()
    assert (admin["role"], admin["agent_id"], admin["display_name"]) == ("admin", None, None)


async def test_agents_provenance_and_graph(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    entry = await post(client, alice, content="a drawn entry")
    agents = (await (await client.get("/dashboard/api/agents", headers=alice.headers)).json())["agents"]
    assert [a["local_name"] for a in agents] == ["alice"]
    prov = await (await client.get(f"/dashboard/api/entries/{entry['id']}/provenance", headers=alice.headers)).json()
    assert prov["signature_valid"] and prov["record_hash"] == entry["record_hash"]
    svg = await client.get(f"/dashboard/api/entries/{entry['record_hash']}/graph.svg", headers=alice.headers)
    assert svg.status == 200 and svg.content_type == "image/svg+xml" and "a drawn entry" in await svg.text()
    for path, status, code, field in [
        ("/dashboard/api/entries/424242/provenance", 404, "entry_not_found", "ref"),
        ("/dashboard/api/entries/424242/graph.svg", 404, "entry_not_found", "ref"),
        ("/dashboard/api/entries/xyz/graph.svg", 422, "validation_error", "ref"),
        (f"/dashboard/api/entries/{entry['id']}/graph.svg?hops=0", 422, "validation_error", "$.hops"),
        (f"/dashboard/api/entries/{entry['id']}/graph.svg?direction=up", 422, "validation_error", "$.direction"),
    ]:
        resp = await client.get(path, headers=alice.headers)
        problem = await resp.json()
        assert (resp.status, problem["code"], problem.get("field")) == (status, code, field), path


def test_the_routes() -> None:
    assert [r.handler.__name__ for r in views.ROUTES] == [
        "session",
        "agents",
        "agent_keys",
        "provenance",
        "entry_graph",
    ]
    assert views.GraphQuery().hops == 1
