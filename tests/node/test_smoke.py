"""A first end-to-end pass through the six primitives on a real server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from tests.conftest import AgentCreds


async def test_post_read_search_link(client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]) -> None:
    alice = await make_agent("alice")
    resp = await client.post(
        "/v1/entries",
        json={"entry_type": "finding", "performative": "inform", "content": "WAL allows readers", "tags": ["db"]},
        headers=alice.headers,
    )
    assert resp.status == 201, await resp.text()
    first = await resp.json()
    resp = await client.get("/v1/search", params={"q": "readers"}, headers=alice.headers)
    assert [e["id"] for e in (await resp.json())["entries"]] == [first["id"]]
    resp = await client.post(
        "/v1/entries",
        json={
            "entry_type": "finding",
            "performative": "confirm",
            "content": "confirmed",
            "links": [{"target": first["record_hash"], "link_type": "supports"}],
        },
        headers=alice.headers,
    )
    second = await resp.json()
    resp = await client.get(f"/v1/entries/{first['id']}", params={"hops": "1"}, headers=alice.headers)
    body = await resp.json()
    assert {e["id"] for e in body["entries"]} == {first["id"], second["id"]}
    assert body["links"][0]["link_type"] == "supports" and body["links"][0]["resolved"]
