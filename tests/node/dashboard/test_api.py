"""The dashboard's HTTP surface over a real node: the page, static files, and its authenticated reads."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from aiohttp.test_utils import TestClient

from node.service import Node
from tests.node.dashboard.conftest import Seeded
from wire.api import PostEntry

SVG = "{http://www.w3.org/2000/svg}"


def svg_counts(text: str) -> tuple[int, int]:
    root = ET.fromstring(text)
    nodes = [g for g in root.iter(f"{SVG}g") if "node" in g.get("class", "").split()]
    edges = [p for p in root.iter(f"{SVG}path") if "edge" in p.get("class", "").split()]
    return len(nodes), len(edges)


async def test_page_and_static_files_are_served_with_a_strict_policy(client: TestClient) -> None:
    resp = await client.get("/")
    assert resp.status == 200 and resp.content_type == "text/html"
    assert "script-src 'self'" in resp.headers["Content-Security-Policy"]
    html = await resp.text()
    assert "/dashboard/static/app.js" in html and "<script>" not in html
    for name, ctype in (("app.js", "text/javascript"), ("app.css", "text/css")):
        r = await client.get(f"/dashboard/static/{name}")
        assert r.status == 200 and r.content_type == ctype
    missing = await client.get("/dashboard/static/..%2Fviews.py")
    assert missing.status == 404 and missing.content_type == "application/problem+json"
    assert (await client.get("/dashboard/static/index.html")).status == 404


async def test_dashboard_routes_stay_out_of_openapi(client: TestClient) -> None:
    paths = (await (await client.get("/openapi.json")).json())["paths"]
    assert "/v1/search" in paths
    assert not [p for p in paths if p == "/" or p.startswith("/dashboard")]


@pytest.mark.parametrize(
    "path",
    [
        "/dashboard/api/session",
        "/dashboard/api/agents",
        "/dashboard/api/entries/1/provenance",
        "/dashboard/api/entries/1/graph.svg",
    ],
)
async def test_reads_need_a_key(client: TestClient, path: str) -> None:
    resp = await client.get(path)
    assert resp.status == 401
    assert (await resp.json())["code"] == "unauthorized"
    bad = await client.get(path, headers={"Authorization": "Bearer bbs_0000000000000000_nope"})
    assert bad.status == 401


async def test_session_says_who_is_signed_in(
    client: TestClient, seeded: Seeded, admin_headers: dict[str, str], node: Node
) -> None:
    admin = await (await client.get("/dashboard/api/session", headers=admin_headers)).json()
    assert admin["role"] == "admin" and admin["agent_id"] is None and admin["node_id"] == node.node_id
    alice = await (await client.get("/dashboard/api/session", headers=seeded.alice.headers)).json()
    assert alice["role"] == "agent" and alice["agent_id"] == seeded.alice.agent_id
    assert alice["display_name"] == "Alice"


async def test_agents_with_activity(client: TestClient, seeded: Seeded, node: Node) -> None:
    await node.entries.post(
        seeded.alice.agent_id, PostEntry(entry_type="finding", performative="inform", content="latest"), None
    )
    agents = (await (await client.get("/dashboard/api/agents", headers=seeded.bob.headers)).json())["agents"]
    by_name = {a["display_name"]: a for a in agents}
    assert set(by_name) == {"Alice", "Bob"}
    assert by_name["Alice"]["entry_count"] == 6 and by_name["Bob"]["entry_count"] == 5
    assert by_name["Bob"]["link_count"] == 5  # four entry links and one link record; derived links not counted
    assert by_name["Alice"]["entries_last_7_days"] == 6
    assert by_name["Alice"]["local_name"] == "alice" and by_name["Alice"]["home_node"] == node.node_id
    assert by_name["Alice"]["last_active"].endswith("Z")


async def test_provenance_verifies_the_stored_record(client: TestClient, seeded: Seeded) -> None:
    resp = await client.get(f"/dashboard/api/entries/{seeded.ids['root']}/provenance", headers=seeded.bob.headers)
    p = await resp.json()
    assert resp.status == 200
    assert p["signature_valid"] is True and p["origin"] == "local" and p["author_display_name"] == "Alice"
    assert p["record"]["content"] == "The kettle draws 2.2 kW when boiling"
    by_hash = await client.get(f"/dashboard/api/entries/{p['record_hash']}/provenance", headers=seeded.bob.headers)
    assert (await by_hash.json())["entry_id"] == seeded.ids["root"]


async def test_graph_svg_draws_the_neighbourhood(client: TestClient, seeded: Seeded) -> None:
    url = f"/dashboard/api/entries/{seeded.ids['root']}/graph.svg"
    one = await client.get(url, headers=seeded.alice.headers)
    assert one.status == 200 and one.content_type == "image/svg+xml"
    assert one.headers["Content-Security-Policy"].startswith("default-src 'none'")  # opened directly: inert
    assert one.headers["X-Content-Type-Options"] == "nosniff"
    assert svg_counts(await one.text()) == (6, 5)
    two = await (await client.get(url + "?hops=2", headers=seeded.alice.headers)).text()
    assert svg_counts(two) == (9, 9)
    assert 'class="node type-finding retracted"' in two and 'data-type="retracted_by"' in two
    supports_only = await (await client.get(url + "?hops=3&link_types=supports", headers=seeded.alice.headers)).text()
    assert svg_counts(supports_only) == (3, 2)
    inbound = await (await client.get(url + "?direction=outbound", headers=seeded.alice.headers)).text()
    assert svg_counts(inbound) == (1, 0)


async def test_graph_escapes_entry_text(client: TestClient, make_agent, node: Node) -> None:  # type: ignore[no-untyped-def]
    mallory = await make_agent("mallory")
    entry, _ = await node.entries.post(
        mallory.agent_id,
        PostEntry(entry_type="finding", performative="inform", content='<script>alert(1)</script>" onload="x'),
        None,
    )
    text = await (await client.get(f"/dashboard/api/entries/{entry.id}/graph.svg", headers=mallory.headers)).text()
    root = ET.fromstring(text)  # well-formed XML: nothing from the entry broke out of its text node
    assert not list(root.iter(f"{SVG}script")) and not list(root.iter("script"))
    assert all(not k.startswith("on") for el in root.iter() for k in el.attrib)


@pytest.mark.parametrize(
    ("path", "status", "code", "field"),
    [
        ("/dashboard/api/entries/abc/graph.svg", 422, "validation_error", "ref"),
        ("/dashboard/api/entries/99999999999999999999999/graph.svg", 422, "validation_error", "ref"),
        ("/dashboard/api/entries/" + "A" * 64 + "/provenance", 422, "validation_error", "ref"),
        ("/dashboard/api/entries/999/graph.svg", 404, "entry_not_found", "ref"),
        ("/dashboard/api/entries/" + "a" * 64 + "/provenance", 404, "entry_not_found", "ref"),
        ("/dashboard/api/entries/1/graph.svg?hops=0", 422, "validation_error", "$.hops"),
        ("/dashboard/api/entries/1/graph.svg?hops=4", 422, "validation_error", "$.hops"),
        ("/dashboard/api/entries/1/graph.svg?hops=two", 422, "validation_error", "$.hops"),
        ("/dashboard/api/entries/1/graph.svg?link_types=likes", 422, "validation_error", "$.link_types[0]"),
        ("/dashboard/api/entries/1/graph.svg?direction=up", 422, "validation_error", "$.direction"),
        ("/dashboard/api/entries/1/graph.svg?colour=red", 422, "validation_error", "$.colour"),
        ("/dashboard/api/entries/1/graph.svg?hops=1&hops=2", 422, "validation_error", "$.hops"),
    ],
)
async def test_bad_graph_and_provenance_requests(
    client: TestClient, seeded: Seeded, path: str, status: int, code: str, field: str
) -> None:
    resp = await client.get(path, headers=seeded.alice.headers)
    body = await resp.json()
    assert (resp.status, body["code"], body.get("field")) == (status, code, field)


async def test_agents_carry_trust_from_the_trust_cache(
    client: TestClient, seeded: Seeded, admin_headers: dict[str, str]
) -> None:
    refreshed = await client.post("/v1/trust/refresh", headers=admin_headers)
    assert refreshed.status == 200, await refreshed.text()
    agents = (await (await client.get("/dashboard/api/agents", headers=admin_headers)).json())["agents"]
    alice = next(a for a in agents if a["display_name"] == "Alice")
    assert alice["confirms"] >= 1 and alice["disconfirms"] >= 1  # Bob both confirmed and contradicted her
    assert 0 < alice["trust"] < 1


async def test_agreement_check_refuses_bad_requests(
    client: TestClient, seeded: Seeded, admin_headers: dict[str, str]
) -> None:
    unknown = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
    url = f"/dashboard/api/peers/{unknown}/agreement"
    as_agent = await client.post(url, headers=seeded.alice.headers)
    assert (as_agent.status, (await as_agent.json())["code"]) == (403, "admin_required")
    missing = await client.post(url, headers=admin_headers)
    assert (missing.status, (await missing.json())["code"]) == (404, "peer_not_found")
    # A configured peer that does not answer: 503 with a stable code, nothing else changes.
    added = await client.post(
        "/v1/peers", json={"url": "http://127.0.0.1:9", "node_id": unknown}, headers=admin_headers
    )
    assert added.status == 201, await added.text()
    down = await client.post(url, headers=admin_headers)
    body = await down.json()
    assert (down.status, body["code"]) == (503, "peer_unreachable"), body


async def test_a_key_proof_session_token_signs_in_too(client: TestClient, node: Node) -> None:
    from tests.node.agents.test_sessions import challenge, own_key_agent, proof

    key = await own_key_agent(node)
    resp = await client.post("/v1/auth/session", json=proof(key, await challenge(client, key.did)))
    token = (await resp.json())["token"]
    me = await client.get("/dashboard/api/session", headers={"Authorization": f"Bearer {token}"})
    body = await me.json()
    assert (me.status, body["role"], body["agent_id"], body["display_name"]) == (200, "agent", key.did, "Roamer")
