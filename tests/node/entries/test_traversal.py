"""Graph traversal at hops 0..3 in each direction, with link-type filters, checked against a reference walk."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import get_json, link, post

MakeAgent = Callable[[str], Awaitable[AgentCreds]]

# source -> target, link type. A chain D->C->B->A, a fan into A, one edge out of A, and a pending target X.
EDGES = [
    ("B", "A", "supports"),
    ("C", "B", "supports"),
    ("D", "C", "supports"),
    ("E", "A", "contradicts"),
    ("F", "A", "responds_to"),
    ("A", "G", "derived_from"),
    ("G", "X", "depends_on"),
]
PRESENT = "ABCDEFG"


def reference(start: str, hops: int, direction: str, types: list[str]) -> tuple[set[str], set[tuple[str, str, str]]]:
    """The neighbourhood by definition: walk `hops` steps; links incident to the walked nodes are returned."""
    edges = [e for e in EDGES if not types or e[2] in types]
    reached, frontier, walked = {start}, {start}, set()
    for depth in range(max(hops, 1)):
        adjacent = {
            e
            for e in edges
            if (direction in ("outbound", "both") and e[0] in frontier)
            or (direction in ("inbound", "both") and e[1] in frontier)
        }
        walked |= adjacent
        if depth >= hops:
            break
        frontier = {n for e in adjacent for n in e[:2]} - reached
        reached |= frontier
    return reached & set(PRESENT), walked


@pytest.fixture
async def graph(client: TestClient, make_agent: MakeAgent) -> dict[str, Any]:
    alice = await make_agent("alice")
    x_hash = "ab" * 32  # never arrives
    made: dict[str, dict[str, Any]] = {}
    made["A"] = await post(client, alice, content="A: the claim")
    made["G"] = await post(client, alice, content="G: a source A derives from")
    for name in "BCDEF":
        out = [(t, kind) for s, t, kind in EDGES if s == name]
        made[name] = await post(
            client,
            alice,
            content=f"{name}: entry",
            links=[{"target": made[t]["record_hash"], "link_type": kind} for t, kind in out],
        )
    await link(client, alice, source=str(made["A"]["id"]), target=str(made["G"]["id"]), link_type="derived_from")
    await link(client, alice, source=str(made["G"]["id"]), target=x_hash, link_type="depends_on")
    names = {e["record_hash"]: n for n, e in made.items()} | {x_hash: "X"}
    return {"alice": alice, "made": made, "names": names}


async def walk(client: TestClient, graph: dict[str, Any], start: str, **params: str) -> tuple[set[str], set[tuple]]:
    body = await get_json(client, f"/v1/entries/{graph['made'][start]['id']}", graph["alice"], params=params)
    names = graph["names"]
    entries = {names[e["record_hash"]] for e in body["entries"]}
    links = {(names[x["source"]], names[x["target"]], x["link_type"]) for x in body["links"]}
    assert len(links) == len(body["links"])
    assert body["truncated"] is False
    return entries, links


async def test_hand_checked_cases(client: TestClient, graph: dict[str, Any]) -> None:
    assert await walk(client, graph, "B", hops="0", include_links="false") == ({"B"}, set())
    assert await walk(client, graph, "B", hops="0", direction="outbound") == ({"B"}, {("B", "A", "supports")})
    assert (await walk(client, graph, "B", hops="2", direction="outbound"))[0] == {"B", "A", "G"}
    assert (await walk(client, graph, "B", hops="3", direction="inbound"))[0] == {"B", "C", "D"}
    assert (await walk(client, graph, "B", hops="2", direction="both"))[0] == set("ABCEFG") | {"D"}
    assert (await walk(client, graph, "D", hops="3", direction="outbound", link_types="supports"))[0] == set("ABCD")
    assert (await walk(client, graph, "A", hops="1", direction="inbound", link_types="contradicts,responds_to"))[0] == {
        "A",
        "E",
        "F",
    }
    # the pending link to X is walked; X itself is not an entry here
    entries, links = await walk(client, graph, "G", hops="1", direction="outbound")
    assert entries == {"G"} and links == {("G", "X", "depends_on")}
    body = await get_json(client, f"/v1/entries/{graph['made']['G']['id']}", graph["alice"], params={"hops": "1"})
    assert {x["target"]: x["resolved"] for x in body["links"]}[
        next(h for h, n in graph["names"].items() if n == "X")
    ] is False


@pytest.mark.parametrize("start", ["A", "B", "D", "G"])
async def test_every_hops_direction_and_filter(client: TestClient, graph: dict[str, Any], start: str) -> None:
    filters = [[], ["supports"], ["contradicts", "responds_to"], ["derived_from", "depends_on"]]
    for hops, direction, types in itertools.product(range(4), ["outbound", "inbound", "both"], filters):
        params = {"hops": str(hops), "direction": direction}
        if types:
            params["link_types"] = ",".join(types)
        got = await walk(client, graph, start, **params)
        assert got == reference(start, hops, direction, types), (start, hops, direction, types)


async def test_include_links_false_returns_no_links(client: TestClient, graph: dict[str, Any]) -> None:
    for hops in range(4):
        entries, links = await walk(client, graph, "B", hops=str(hops), include_links="false")
        assert links == set()
        assert entries == reference("B", hops, "both", [])[0]


async def test_several_seeds_and_search_neighbourhood(client: TestClient, graph: dict[str, Any]) -> None:
    made, alice, names = graph["made"], graph["alice"], graph["names"]
    body = await get_json(
        client,
        "/v1/entries",
        alice,
        params={"ids": f"{made['D']['id']},{made['F']['record_hash']}", "hops": "1", "direction": "outbound"},
    )
    assert {names[e["record_hash"]] for e in body["entries"]} == {"D", "C", "F", "A"}
    body = await get_json(client, "/v1/search", alice, params={"q": "claim", "hops": "1", "direction": "inbound"})
    assert names[body["entries"][0]["record_hash"]] == "A"  # the match first, then its neighbourhood
    assert {names[e["record_hash"]] for e in body["entries"]} == {"A", "B", "E", "F"}
    assert {(names[x["source"]], names[x["target"]]) for x in body["links"]} == {("B", "A"), ("E", "A"), ("F", "A")}
    body = await get_json(client, "/v1/search", alice, params={"q": "claim"})
    assert body["links"] == [] and len(body["entries"]) == 1


async def test_a_walk_stops_at_the_neighbourhood_limit(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    from node.entries import store
    from wire.api import LinkSpec, PostEntry

    alice = await make_agent("alice")
    hub = await post(client, alice, content="the hub everyone cites")
    for i in range(store.MAX_NEIGHBOURHOOD + 5):  # through the service layer: faster than HTTP, same path
        await node.entries.post(
            alice.agent_id,
            PostEntry(
                entry_type="finding",
                performative="confirm",
                content=f"citation {i}",
                links=[LinkSpec(target=hub["record_hash"], link_type="supports")],
            ),
            None,
        )
    body = await get_json(client, f"/v1/entries/{hub['id']}", alice, params={"hops": "1", "include_links": "false"})
    assert body["truncated"] is True
    assert len(body["entries"]) == store.MAX_NEIGHBOURHOOD
    # links are bounded too: the hub's 1,005 incident links are cut at the limit
    body = await get_json(client, f"/v1/entries/{hub['id']}", alice, params={"hops": "0"})
    assert body["truncated"] is True and len(body["entries"]) == 1
    assert len(body["links"]) == store.MAX_WALKED_LINKS
    assert [x["id"] for x in body["links"]] == sorted(x["id"] for x in body["links"])
    body = await get_json(client, f"/v1/entries/{hub['id']}", alice, params={"hops": "0", "include_links": "false"})
    assert body["truncated"] is False and body["links"] == []
