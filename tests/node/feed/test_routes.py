"""GET /v1/feed on a real aiohttp server: agent authentication, validation, long-poll and OpenAPI."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from tests.conftest import AgentCreds
from tests.node.api_helpers import post


async def test_the_feed_pages_entries_in_arrival_order(
    client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice = await make_agent("alice")
    first = await post(client, alice, content="one")
    second = await post(client, alice, content="two", scope="local")  # local entries are the node's own reads
    resp = await client.get("/v1/feed", params={"after": "0", "limit": "1"}, headers=alice.headers)
    assert resp.status == 200
    page = await resp.json()
    assert [e["id"] for e in page["entries"]] == [first["id"]] and page["head"] == second["id"]
    resp = await client.get("/v1/feed", params={"after": str(page["next"])}, headers=alice.headers)
    assert [e["content"] for e in (await resp.json())["entries"]] == ["two"]


async def test_a_waiting_request_receives_a_post_made_while_it_waits(
    client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice = await make_agent("alice")
    waiting = asyncio.ensure_future(client.get("/v1/feed", params={"wait_ms": "25000"}, headers=alice.headers))
    await asyncio.sleep(0.2)
    posted = await post(client, alice, content="while you waited")
    resp = await asyncio.wait_for(waiting, 10)
    assert [e["id"] for e in (await resp.json())["entries"]] == [posted["id"]]


async def test_bad_queries_are_422_naming_the_parameter(
    client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice = await make_agent("alice")
    for params, field in [
        ({"after": "-1"}, "$.after"),
        ({"after": "soon"}, "$.after"),
        ({"limit": "0"}, "$.limit"),
        ({"limit": "201"}, "$.limit"),
        ({"wait_ms": "25001"}, "$.wait_ms"),
        ({"include_synthetic": "perhaps"}, "$.include_synthetic"),
        ({"since": "2026-01-01T00:00:00Z"}, "$.since"),
    ]:
        resp = await client.get("/v1/feed", params=params, headers=alice.headers)
        assert resp.status == 422, params
        assert resp.content_type == "application/problem+json"
        problem = await resp.json()
        assert problem["field"] == field and problem["code"] == "validation_error", problem


async def test_the_feed_needs_an_agent(client: TestClient, admin_headers: dict[str, str]) -> None:
    resp = await client.get("/v1/feed")
    assert resp.status == 401 and (await resp.json())["code"] == "unauthorized"
    resp = await client.get("/v1/feed", headers=admin_headers)
    assert resp.status == 403 and (await resp.json())["code"] == "agent_key_required"


async def test_openapi_describes_the_feed(client: TestClient) -> None:
    document = await (await client.get("/openapi.json")).json()
    operation = document["paths"]["/v1/feed"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"after", "limit", "wait_ms", "include_synthetic"}
