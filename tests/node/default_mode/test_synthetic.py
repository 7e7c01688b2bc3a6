"""Synthetic (truth_state simulation) entries are hidden from read and search unless include_synthetic=true."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from tests.conftest import AgentCreds


async def _post(client: TestClient, who: AgentCreds, content: str, truth: str) -> dict[str, Any]:
    resp = await client.post(
        "/v1/entries",
        json={"entry_type": "finding", "performative": "inform", "content": content, "truth_state": truth},
        headers=who.headers,
    )
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def test_synthetic_hidden_by_default_in_read_and_search(
    client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice = await make_agent("alice")
    fact = await _post(client, alice, "rooftop solar output measured", "fact")
    hypo = await _post(client, alice, "rooftop solar output may double", "hypothesis")
    sim = await _post(client, alice, "rooftop solar output simulated", "simulation")
    h = alice.headers

    async def ids(path: str, **params: str) -> list[int]:
        resp = await client.get(path, params=params, headers=h)
        assert resp.status == 200, await resp.text()
        return sorted(e["id"] for e in (await resp.json())["entries"])

    every = sorted([fact["id"], hypo["id"], sim["id"]])
    ref_list = f"{fact['id']},{hypo['id']},{sim['id']}"
    assert await ids("/v1/search", q="rooftop") == [fact["id"], hypo["id"]]
    assert await ids("/v1/search", q="rooftop", include_synthetic="true") == every
    assert await ids("/v1/search") == [fact["id"], hypo["id"]]
    assert await ids("/v1/entries", ids=ref_list) == [fact["id"], hypo["id"]]
    assert await ids("/v1/entries", ids=ref_list, include_synthetic="true") == every
    assert await ids(f"/v1/entries/{sim['record_hash']}") == []
    assert await ids(f"/v1/entries/{sim['record_hash']}", include_synthetic="true") == [sim["id"]]
    # traversal does not leak them either
    resp = await client.post(
        "/v1/links", json={"source": str(fact["id"]), "target": str(sim["id"]), "link_type": "responds_to"}, headers=h
    )
    assert resp.status == 201
    assert await ids(f"/v1/entries/{fact['id']}", hops="1") == [fact["id"]]
    assert await ids(f"/v1/entries/{fact['id']}", hops="1", include_synthetic="true") == [fact["id"], sim["id"]]


async def test_search_filters_on_truth_state(
    client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice = await make_agent("alice")
    await _post(client, alice, "tides measured at noon", "fact")
    hypo = await _post(client, alice, "tides may follow the moon", "hypothesis")
    sim = await _post(client, alice, "tides simulated for a year", "simulation")
    resp = await client.get("/v1/search", params={"truth_state": "hypothesis"}, headers=alice.headers)
    assert [e["id"] for e in (await resp.json())["entries"]] == [hypo["id"]]
    resp = await client.get(
        "/v1/search", params={"truth_state": "simulation", "include_synthetic": "true"}, headers=alice.headers
    )
    assert [e["id"] for e in (await resp.json())["entries"]] == [sim["id"]]
    resp = await client.get("/v1/search", params={"truth_state": "opinion"}, headers=alice.headers)
    assert resp.status == 422 and (await resp.json())["field"] == "$.truth_state[0]"
