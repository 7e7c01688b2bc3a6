"""node.routes: the REST handlers of the six primitives, agents and node info, through a real server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from node import routes
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import get_json, post, problem

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def call(client: TestClient, method: str, path: str, who: Any, status: int, **kw: Any) -> Any:
    headers = who if isinstance(who, dict) else who.headers
    resp = await client.request(method, path, headers={**headers, **kw.pop("headers", {})}, **kw)
    data = await resp.json(content_type=None) if resp.status != 204 else None
    assert resp.status == status, data
    return data


async def test_post_entry_and_its_replay(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    first = await post(client, alice, headers={"Idempotency-Key": "k1"}, content="once")
    again = await post(client, alice, 200, headers={"Idempotency-Key": "k1"}, content="whatever the body says")
    assert again == first and first["author_id"] == alice.agent_id
    same_key_in_body = await post(client, alice, content="twice", idempotency_key="k2")
    assert (await post(client, alice, 200, content="x", idempotency_key="k2"))["id"] == same_key_in_body["id"]


async def test_post_entries_is_all_or_nothing(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    item = {"entry_type": "finding", "performative": "inform"}
    body = {"entries": [{**item, "content": "a", "idempotency_key": "a"}, {**item, "content": "b"}]}
    posted = await call(client, "POST", "/v1/entries/batch", alice, 201, json=body)
    assert [r["created"] for r in posted["results"]] == [True, True]
    replay = await call(client, "POST", "/v1/entries/batch", alice, 200, json={"entries": body["entries"][:1]})
    assert replay["results"][0] == {"created": False, "entry": posted["results"][0]["entry"]}
    bad = {"entries": [{**item, "content": "c"}, {**item, "content": ""}]}
    problem(await call(client, "POST", "/v1/entries/batch", alice, 422, json=bad), 422, "validation_error",
            "$.entries[1].content")  # fmt: skip
    headers = {"Idempotency-Key": "k"}
    data = await call(client, "POST", "/v1/entries/batch", alice, 422, json=body, headers=headers)
    problem(data, 422, "idempotency_header_in_batch", "Idempotency-Key")
    count = await node.db.read(lambda c: c.execute("SELECT count(*) FROM entries").fetchone()[0])
    assert count == 2


async def test_reading_entries(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    a = await post(client, alice, content="first")
    b = await post(client, alice, content="second", links=[{"target": str(a["id"]), "link_type": "supports"}])
    one = await get_json(client, f"/v1/entries/{a['record_hash']}", alice)
    assert [e["id"] for e in one["entries"]] == [a["id"]] and len(one["links"]) == 1
    both = await get_json(client, "/v1/entries", alice, params={"ids": f"{a['id']},{b['record_hash']}"})
    assert {e["id"] for e in both["entries"]} == {a["id"], b["id"]}
    missing = await get_json(client, "/v1/entries", alice, params={"ids": "424242"})
    assert missing["entries"] == [] and missing["missing"] == ["424242"]
    problem(await get_json(client, "/v1/entries/424242", alice, 404), 404, "entry_not_found", "ref")
    problem(await get_json(client, f"/v1/entries/{a['id']}", alice, 422, params={"ids": "1"}), 422,
            "validation_error", "$.ids")  # fmt: skip
    problem(await get_json(client, "/v1/entries", alice, 422), 422, "validation_error", "$.ids")


async def test_search_and_links(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    a = await post(client, alice, content="the kettle is descaled")
    b = await post(client, bob, content="the kettle leaks")
    found = await get_json(client, "/v1/search", alice, params={"q": "kettle", "author": bob.agent_id})
    assert [e["id"] for e in found["entries"]] == [b["id"]] and found["limit"] == 20
    body = {"source": str(b["id"]), "target": a["record_hash"], "link_type": "contradicts"}
    link = await call(client, "POST", "/v1/links", bob, 201, json=body, headers={"Idempotency-Key": "l1"})
    assert (link["source"], link["target"], link["resolved"]) == (b["record_hash"], a["record_hash"], True)
    assert await call(client, "POST", "/v1/links", bob, 200, json=body, headers={"Idempotency-Key": "l1"}) == link
    body = {"source": str(a["id"]), "target": str(a["id"]), "link_type": "supports"}
    assert (await call(client, "POST", "/v1/links", alice, 422, json=body))["status"] == 422


async def test_subscriptions(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    sub = await call(client, "POST", "/v1/subscriptions", alice, 201, json={"tags": ["b", "a", "a"]})
    assert sub["tags"] == ["a", "b"] and sub["agent_id"] == alice.agent_id and not sub["directed"]
    assert await call(client, "POST", "/v1/subscriptions", alice, 200, json={"tags": ["a", "b"]}) == sub
    listed = await call(client, "GET", "/v1/subscriptions", alice, 200)
    assert listed == {"subscriptions": [sub]}
    assert await call(client, "GET", "/v1/subscriptions", bob, 200) == {"subscriptions": []}
    problem(await call(client, "DELETE", f"/v1/subscriptions/{sub['id']}", bob, 404), 404, "subscription_not_found")
    problem(await call(client, "DELETE", "/v1/subscriptions/x1", alice, 422), 422, "validation_error", "sub_id")
    problem(await call(client, "DELETE", "/v1/subscriptions/" + "9" * 19, alice, 422), 422, "validation_error",
            "sub_id")  # fmt: skip
    await call(client, "DELETE", f"/v1/subscriptions/{sub['id']}", alice, 204)
    assert await call(client, "GET", "/v1/subscriptions", alice, 200) == {"subscriptions": []}


async def test_inbox_and_ack(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    entry = await post(client, alice, content="for bob", directed_to=[bob.agent_id], performative="request")
    inbox = await call(client, "GET", "/v1/inbox", bob, 200)
    [note] = inbox["notifications"]
    assert (note["entry_id"], note["tier"], note["reason"], note["attempt"]) == (entry["id"], 1, "directed_request", 1)
    assert "content" not in note and inbox["lease_seconds"] == 60
    assert await call(client, "GET", "/v1/inbox", bob, 200) == {"notifications": [], "lease_seconds": 60}
    ids = [note["notification_id"]]
    assert await call(client, "POST", "/v1/inbox/ack", alice, 200, json={"ids": ids}) == {"acknowledged": 0}
    assert await call(client, "POST", "/v1/inbox/ack", bob, 200, json={"ids": ids}) == {"acknowledged": 1}
    problem(await call(client, "GET", "/v1/inbox", bob, 422, params={"since": "yesterday"}), 422,
            "validation_error", "$.since")  # fmt: skip


async def test_node_info_and_health(client: TestClient, node: Node) -> None:
    info = await (await client.get("/v1/node")).json()
    assert info["node_id"] == node.node_id and info["software"] and info["limits"]["max_batch_entries"] == 100
    assert await (await client.get("/healthz")).json() == {"status": "ok"}


async def test_agents(client: TestClient, admin_headers: dict[str, str], make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    agent = await call(client, "GET", f"/v1/agents/{alice.agent_id}", alice, 200)
    assert (agent["agent_id"], agent["display_name"], agent["entry_count"]) == (alice.agent_id, "Alice", 0)
    created = await call(client, "POST", "/v1/agents", admin_headers, 201, json={"name": "carol"})
    assert created["name"] == "carol" and created["api_key"].startswith("bbs_")
    carol = {"Authorization": f"Bearer {created['api_key']}"}
    rotated = await call(client, "POST", "/v1/agents/carol/api-key", admin_headers, 201)
    assert rotated["agent_id"] == created["agent_id"] and rotated["api_key"] != created["api_key"]
    assert (await client.get("/v1/inbox", headers=carol)).status == 401  # the old key stops working
    assert (await client.get("/v1/inbox", headers={"Authorization": f"Bearer {rotated['api_key']}"})).status == 200
    problem(await call(client, "POST", "/v1/agents/nobody/api-key", admin_headers, 404), 404, "agent_not_found")


def test_the_route_table() -> None:
    names = [route.handler.__name__ for route in routes.ROUTES]
    assert names == [
        "post_entry", "post_entries", "get_entries", "get_entry", "search", "post_link", "post_subscription",
        "list_subscriptions", "delete_subscription", "get_inbox", "ack_inbox", "node_info", "list_agents", "get_agent",
        "create_agent", "rotate_api_key", "post_key_event", "signed_versions", "rotate_signing_key",
        "revoke_signing_key", "recover_agent", "rotate_node_key", "node_key", "void_records", "healthz",
    ]  # fmt: skip
    assert {route.path for route in routes.ROUTES if route.idempotent} == {"/v1/entries", "/v1/links"}
