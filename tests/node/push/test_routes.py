"""Push endpoints over REST, and pushes to a receiving agent in a real process (scenarios.bench.push_receiver.py).

Failure cases (endpoint down, slow, 500s, a receiver expecting another node's signature) lose nothing: the
inbox still holds every notification, whatever the pushes did.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from identity import keys
from node.app import create_app
from node.federation.routes import SyncSettings
from node.push.routes import configure
from node.push.sender import PushSettings
from node.service import Node
from node.web.appkeys import PUSH, PUSH_SETTINGS
from tests.conftest import AgentCreds
from tests.node.api_helpers import post
from tests.node.push.conftest import receiver
from wire.push_auth import sign_push

FAST = PushSettings(
    coalesce_s=0.05,
    timeout_s=0.5,
    retries=1,
    backoff_s=0.01,
    backoff_cap_s=0.02,
    breaker_threshold=3,
    breaker_cooldown_s=60,
)
Maker = Callable[[str], Awaitable[AgentCreds]]


@pytest.fixture
async def app_client(aiohttp_client: Callable[..., Awaitable[TestClient]], node: Node) -> TestClient:
    app = create_app(node, sync=SyncSettings(pull=False))
    app[PUSH_SETTINGS] = FAST
    return await aiohttp_client(app)


async def register(client: TestClient, who: AgentCreds, url: str, status: int = 201, **fields: Any) -> dict[str, Any]:
    resp = await client.post("/v1/push/endpoints", json={"url": url, **fields}, headers=who.headers)
    body: dict[str, Any] = await resp.json()
    assert resp.status == status, body
    return body


async def inbox_ids(client: TestClient, who: AgentCreds) -> list[int]:
    resp = await client.get("/v1/inbox", params={"limit": "200"}, headers=who.headers)
    return [n["entry_id"] for n in (await resp.json())["notifications"]]


async def test_register_list_update_and_delete(app_client: TestClient, make_agent: Maker) -> None:
    bob = await make_agent("bob")
    made = await register(app_client, bob, "http://127.0.0.1:9999/push")
    assert made["tiers"] == [1] and made["reasons"] == [] and made["state"]["breaker"] == "closed"
    again = await register(app_client, bob, "http://127.0.0.1:9999/push", 200, tiers=[1, 2], reasons=["directed"])
    assert again["id"] == made["id"] and again["tiers"] == [1, 2] and again["reasons"] == ["directed"]
    listed = await (await app_client.get("/v1/push/endpoints", headers=bob.headers)).json()
    assert [e["id"] for e in listed["endpoints"]] == [made["id"]]
    alice = await make_agent("alice")
    resp = await app_client.delete(f"/v1/push/endpoints/{made['id']}", headers=alice.headers)
    assert resp.status == 404 and (await resp.json())["code"] == "push_endpoint_not_found"
    assert (await app_client.delete(f"/v1/push/endpoints/{made['id']}", headers=bob.headers)).status == 204
    listed = await (await app_client.get("/v1/push/endpoints", headers=bob.headers)).json()
    assert listed["endpoints"] == []


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({"url": "ftp://127.0.0.1:21/x"}, "validation_error", "$.url"),
        ({"url": "http://user:pw@127.0.0.1:9/x"}, "invalid_push_url", "$.url"),
        ({"url": "http://127.0.0.1:99999/x"}, "invalid_push_url", "$.url"),
        ({"url": "http://127.0.0.1:9/x", "tiers": [3]}, "validation_error", "$.tiers[0]"),
        ({"url": "http://127.0.0.1:9/x", "reasons": ["gossip"]}, "validation_error", "$.reasons[0]"),
        ({"url": "http://127.0.0.1:9/x", "extra": 1}, "validation_error", "$.extra"),
    ],
)
async def test_bad_endpoints_are_refused_and_nothing_is_stored(
    app_client: TestClient, make_agent: Maker, body: dict[str, Any], code: str, field: str
) -> None:
    bob = await make_agent("bob")
    resp = await app_client.post("/v1/push/endpoints", json=body, headers=bob.headers)
    problem = await resp.json()
    assert resp.status == 422 and resp.content_type == "application/problem+json", problem
    assert (problem["code"], problem["field"]) == (code, field)
    assert (await (await app_client.get("/v1/push/endpoints", headers=bob.headers)).json())["endpoints"] == []


async def test_the_nodes_own_origin_and_its_peers_are_refused(
    app_client: TestClient, make_agent: Maker, admin_headers: dict[str, str]
) -> None:
    bob = await make_agent("bob")
    own = str(app_client.make_url("/hook"))
    problem = await register(app_client, bob, own, 422)
    assert problem["code"] == "push_url_refused"
    problem = await register(app_client, bob, own.replace("127.0.0.1", "localhost"), 422)
    assert problem["code"] == "push_url_refused"
    peer = keys.SigningKey.generate()
    resp = await app_client.post(
        "/v1/peers", json={"url": "http://10.1.2.3:8420", "node_id": peer.did}, headers=admin_headers
    )
    assert resp.status == 201
    assert (await register(app_client, bob, "http://10.1.2.3:8420/push", 422))["code"] == "push_url_refused"
    await register(app_client, bob, "http://10.1.2.3:8421/push")  # a private address on another port is fine


async def test_an_allowlist_restricts_endpoints(
    aiohttp_client: Callable[..., Awaitable[TestClient]], node: Node, make_agent: Maker
) -> None:
    app = create_app(node, sync=SyncSettings(pull=False))
    configure(app, "http://192.168.1., https://agents.example/", "127.0.0.1", (8420, None))
    client = await aiohttp_client(app)
    bob = await make_agent("bob")
    problem = await register(client, bob, "http://127.0.0.1:9000/push", 403)
    assert (problem["code"], problem["field"]) == ("push_url_not_allowed", "$.url")
    await register(client, bob, "http://192.168.1.20:9000/push")
    assert (await register(client, bob, "http://127.0.0.1:8420/x", 422))["code"] == "push_url_refused"


async def test_a_directed_request_is_pushed_as_metadata_and_stays_in_the_inbox(
    app_client: TestClient, node: Node, make_agent: Maker
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    async with receiver(node.node_id) as rx:
        made = await register(app_client, bob, rx.url + "/bob")
        entry = await post(
            app_client, alice, performative="request", content="secret words", directed_to=[bob.agent_id]
        )
        got = await rx.wait_for(1)
        payload = got[0]["payload"]
        assert got[0]["path"] == "/bob" and payload["agent_id"] == bob.agent_id and payload["node_id"] == node.node_id
        [env] = payload["notifications"]
        assert (env["entry_id"], env["tier"], env["reason"]) == (entry["id"], 1, "directed_request")
        assert "secret words" not in json.dumps(got)  # metadata only, never content
        assert await inbox_ids(app_client, bob) == [entry["id"]]  # a push leases nothing
        listed = await (await app_client.get("/v1/push/endpoints", headers=bob.headers)).json()
        state = listed["endpoints"][0]["state"]
        assert state["messages_sent"] == 1 and state["notifications_pushed"] == 1
        # tier 2 is not wanted by this endpoint: a plain directed inform is not pushed
        await post(app_client, alice, content="fyi", directed_to=[bob.agent_id])
        test = await (await app_client.post(f"/v1/push/endpoints/{made['id']}/test", headers=bob.headers)).json()
        assert test["ok"] is True
        got = await rx.wait_for(2)
        assert got[1]["payload"] == {"test": True}


async def test_many_notifications_at_once_are_coalesced(app_client: TestClient, node: Node, make_agent: Maker) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    async with receiver(node.node_id) as rx:
        await register(app_client, bob, rx.url + "/bob", tiers=[1, 2])
        items = [
            {"entry_type": "finding", "performative": "request", "content": f"n{i}", "directed_to": [bob.agent_id]}
            for i in range(100)
        ]
        for start in range(0, 300, 100):
            batch = [{**item, "content": f"{item['content']}-{start}"} for item in items]
            resp = await app_client.post("/v1/entries/batch", json={"entries": batch}, headers=alice.headers)
            assert resp.status == 201

        def counted(got: list[dict]) -> int:
            return sum(len(g["payload"]["notifications"]) + g["payload"]["more"] for g in got)

        got = await rx.wait_for(1, lambda g: counted(g) == 300)
        assert len(got) <= 10  # 300 notifications, a handful of messages
        assert all(len(g["payload"]["notifications"]) <= FAST.max_per_message for g in got)
    assert len(await inbox_ids(app_client, bob)) == 200  # (the page limit) every one is still in the inbox


@pytest.mark.parametrize("how", ["500s", "slow", "wrong signature", "down"])
async def test_failing_endpoints_lose_nothing(
    app_client: TestClient, node: Node, make_agent: Maker, admin_headers: dict[str, str], how: str
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    args = {"500s": ["--status", "500"], "slow": ["--delay", "2"], "wrong signature": [], "down": []}[how]
    expected_node = keys.SigningKey.generate().did if how == "wrong signature" else node.node_id
    async with receiver(expected_node, *args) as rx:
        url = rx.url + "/bob"
        if how == "down":
            rx.proc.terminate()
            rx.proc.wait(10)
        await register(app_client, bob, url)
        posted = [
            (await post(app_client, alice, performative="request", content=f"r{i}", directed_to=[bob.agent_id]))["id"]
            for i in range(5)
        ]
        holder = app_client.app[PUSH]
        for _ in range(200):
            sender = next(iter(holder.running().senders.values()))
            if sender.state.breaker == "open" and not sender.busy:
                break
            await asyncio.sleep(0.05)
        state = sender.state
        assert state.breaker == "open" and state.messages_sent == 0 and state.attempts_failed >= FAST.breaker_threshold
        assert state.last_error
        if how != "down":
            assert await rx.received() == []
    assert sorted(await inbox_ids(app_client, bob)) == posted
    metrics = await (await app_client.get("/metrics", headers=admin_headers)).text()
    assert 'bbs_push_endpoints{breaker="open"} 1.0' in metrics
    status = await (await app_client.get("/v1/push/status", headers=admin_headers)).json()
    assert status["endpoints"][0]["state"]["breaker"] == "open"


async def test_the_reference_nlip_server_receives_pushes(app_client: TestClient, node: Node, make_agent: Maker) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    async with receiver(node.node_id, "--nlip-server") as rx:
        await register(app_client, bob, rx.url + "/nlip/")
        entry = await post(app_client, alice, performative="request", content="hi", directed_to=[bob.agent_id])
        got = await rx.wait_for(1)
        assert got[0]["payload"]["notifications"][0]["entry_id"] == entry["id"], got


async def test_a_push_replayed_to_a_sync_endpoint_is_refused(
    aiohttp_client: Callable[..., Awaitable[TestClient]], tmp_path: Path, node: Node, admin_headers: dict[str, str]
) -> None:
    """A node B that has A as its peer: a request signed by A's key under the push tag is not a sync request."""
    from node.ops.datadir import initialise

    token = initialise(tmp_path / "b")
    b = Node(tmp_path / "b")
    client = await aiohttp_client(create_app(b, sync=SyncSettings(pull=False)))
    b_admin = {"Authorization": f"Bearer {token}"}
    resp = await client.post("/v1/peers", json={"url": "http://127.0.0.1:9", "node_id": node.node_id}, headers=b_admin)
    assert resp.status == 201, await resp.text()
    url = str(client.make_url("/v1/sync/changes"))
    headers = sign_push(node.key, url, b"")
    resp = await client.get("/v1/sync/changes", headers=headers)
    problem = await resp.json()
    assert resp.status == 401 and problem["code"] == "bad_signature", problem
