"""node.federation.routes: peer administration, the digest, and the peer-signed sync endpoints of a real node."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient, unused_port

from identity import keys
from node.app import create_app
from node.cli import main
from node.federation import routes as peer_routes
from node.service import Node
from node.web import appkeys
from sync import messages as m
from sync.auth import sign_headers
from sync.negentropy import Negentropy, VectorStorage
from tests.conftest import AgentCreds
from wire.api import PostEntry

Client = Callable[..., Awaitable[TestClient]]
MakeAgent = Callable[[str], Awaitable[AgentCreds]]
PEER = keys.SigningKey.generate()


@pytest.fixture
async def served(aiohttp_client: Client, node: Node, admin_headers: dict[str, str]) -> TestClient:
    """A node that does not pull (no scheduler), with PEER configured."""
    client = await aiohttp_client(create_app(node, sync=peer_routes.SyncSettings(pull=False)))
    resp = await client.post(
        "/v1/peers", json={"url": "http://127.0.0.1:9", "node_id": PEER.did}, headers=admin_headers
    )
    assert resp.status == 201, await resp.text()
    return client


async def signed(
    client: TestClient, method: str, path: str, body: Any = None, key: keys.SigningKey = PEER
) -> tuple[int, dict[str, Any]]:
    raw = msgspec.json.encode(body) if body is not None else None
    headers = sign_headers(key, method, str(client.make_url(path)), raw)
    if raw is not None:
        headers["Content-Type"] = "application/json"
    resp = await client.request(method, path, data=raw, headers=headers)
    return resp.status, await resp.json(content_type=None)


async def post(node: Node, who: AgentCreds, content: str, **fields: Any) -> str:
    body = PostEntry(entry_type="finding", performative="inform", content=content, **fields)
    entry, _ = await node.entries.post(who.agent_id, body, None)
    return entry.record_hash


async def test_adding_listing_and_readdressing_peers(served: TestClient, admin_headers: dict[str, str]) -> None:
    peers = await (await served.get("/v1/peers", headers=admin_headers)).json()
    [peer] = peers["peers"]
    assert (peer["node_id"], peer["url"], peer["cursor_seq"], peer["reconciliations"]) == (
        PEER.did,
        "http://127.0.0.1:9",
        0,
        0,
    )
    assert peer["counters"] == {
        "saved": 0,
        "duplicate": 0,
        "invalid": 0,
        "pending_link": 0,
        "overflow": 0,
        "internal": 0,
        "waiting": 0,
        "dropped_waiting": 0,
        "void": 0,
        "too_new": 0,
        "invalid_reasons": {},
    }
    resp = await served.post(
        "/v1/peers", json={"url": "http://127.0.0.1:10/", "node_id": PEER.did}, headers=admin_headers
    )
    assert resp.status == 201 and (await resp.json())["url"].startswith("http://127.0.0.1:10")
    assert len((await (await served.get("/v1/peers", headers=admin_headers)).json())["peers"]) == 1


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({"url": "ftp://x:1", "node_id": PEER.did}, "validation_error", "$.url"),
        ({"url": "http://user:pw@host:1", "node_id": PEER.did}, "invalid_peer_url", "$.url"),
        ({"url": "http://host:0", "node_id": PEER.did}, "invalid_peer_url", "$.url"),
        ({"url": "http://host:1", "node_id": "not-a-did"}, "validation_error", "$.node_id"),
    ],
)
async def test_a_bad_peer_is_refused(
    served: TestClient, admin_headers: dict[str, str], body: dict[str, str], code: str, field: str
) -> None:
    resp = await served.post("/v1/peers", json=body, headers=admin_headers)
    problem = await resp.json()
    assert (resp.status, problem["code"], problem["field"]) == (422, code, field)


async def test_a_node_cannot_peer_with_itself(served: TestClient, node: Node, admin_headers: dict[str, str]) -> None:
    resp = await served.post("/v1/peers", json={"url": "http://h:1", "node_id": node.node_id}, headers=admin_headers)
    assert (resp.status, (await resp.json())["code"]) == (422, "self_peer")


async def test_the_digest_covers_federated_records_only(
    served: TestClient, node: Node, admin_headers: dict[str, str], make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    await post(node, alice, "shared")
    await post(node, alice, "kept here", scope="local")
    rows = await node.db.read(
        lambda c: c.execute("SELECT version FROM records WHERE scope = 'federation' ORDER BY version").fetchall()
    )
    expected = hashlib.sha256("".join(h + "\n" for (h,) in rows).encode()).hexdigest()
    digest = await (await served.get("/v1/sync/digest", headers=admin_headers)).json()
    assert digest == {"type": "digest", "v": 3, "node_id": node.node_id, "count": len(rows), "sha256": expected}


async def test_the_changes_feed_for_a_signed_peer(served: TestClient, node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    shared = await post(node, alice, "shared")
    await post(node, alice, "kept here", scope="local")
    status, page = await signed(served, "GET", "/v1/sync/changes?v=2&since=0&limit=1000")
    assert status == 200 and page["type"] == "changes" and page["node_id"] == node.node_id
    assert shared in [item["hash"] for item in page["items"]]
    assert all(item["record"]["scope"] == "federation" for item in page["items"] if item["record"]["kind"] == "entry")
    status, reset = await signed(served, "GET", f"/v1/sync/changes?v=2&since={page['head'] + 5}")
    assert (status, reset["type"], reset["reason"]) == (200, "reset", "cursor_ahead")
    status, problem = await signed(served, "GET", "/v1/sync/changes?v=2&limit=0")
    assert (status, problem["field"]) == (422, "$.limit")


@pytest.mark.parametrize("since", ["-1", str(2**63), str(2**64)])
async def test_a_cursor_outside_a_log_is_refused(served: TestClient, since: str) -> None:
    status, body = await signed(served, "GET", f"/v1/sync/changes?since={since}")
    assert (status, body["code"], body["field"]) == (422, "validation_error", "$.since")


async def test_fetch_by_hash_lists_the_missing(served: TestClient, node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    shared = await post(node, alice, "shared")
    local = await post(node, alice, "kept here", scope="local")
    status, found = await signed(served, "POST", "/v1/sync/fetch", {"type": "fetch", "hashes": [shared, local, shared]})
    assert status == 200 and [item["hash"] for item in found["items"]] == [shared]
    assert found["items"][0]["record"]["content"] == "shared"
    assert found["missing"] == [local]  # a local entry never leaves the node
    status, problem = await signed(served, "POST", "/v1/sync/fetch", {"type": "fetch", "hashes": []})
    assert (status, problem["code"], problem["field"]) == (422, "validation_error", "$.hashes")


async def test_reconcile_answers_one_round(served: TestClient, node: Node) -> None:
    first = Negentropy(VectorStorage([]), is_initiator=True).initiate().hex()
    status, reply = await signed(served, "POST", "/v1/sync/reconcile", {"type": "reconcile", "message": first})
    assert status == 200 and reply["type"] == "reconcile_reply" and reply["node_id"] == node.node_id
    status, problem = await signed(served, "POST", "/v1/sync/reconcile", {"type": "reconcile", "message": "ff00"})
    assert (status, problem["code"], problem["field"]) == (422, "bad_negentropy_message", "$.message")


async def test_sync_endpoints_refuse_anyone_but_a_configured_peer(served: TestClient) -> None:
    resp = await served.get("/v1/sync/changes?v=2")
    problem = await resp.json()
    assert (resp.status, problem["code"], problem["field"]) == (401, "signature_required", "Signature")
    status, problem = await signed(served, "GET", "/v1/sync/changes?v=2", key=keys.SigningKey.generate())
    assert (status, problem["code"], problem["title"]) == (403, "unknown_peer", "Not a peer")
    resp = await served.post("/v1/sync/fetch", data=b"{}", headers={"Content-Type": "text/plain"})
    assert (resp.status, (await resp.json())["code"]) == (415, "unsupported_media_type")
    headers = sign_headers(PEER, "GET", str(served.make_url("/v1/sync/changes?v=2")))
    assert (await served.get("/v1/sync/changes?v=2", headers=headers)).status == 200
    resp = await served.get("/v1/sync/changes?v=2", headers=headers)  # the same signature again
    assert (resp.status, (await resp.json())["code"]) == (401, "replayed_request")


async def test_install_and_the_scheduler(aiohttp_client: Client, node: Node) -> None:
    app = create_app(node, sync=peer_routes.SyncSettings(pull=False))
    assert app[appkeys.SYNC_SETTINGS] == peer_routes.SyncSettings(pull=False)
    await aiohttp_client(app)
    assert isinstance(app[appkeys.SYNC], peer_routes.SyncState) and app[appkeys.SYNC].scheduler is None


async def test_a_pulling_app_runs_its_scheduler_until_cleanup(aiohttp_client: Client, node: Node) -> None:
    app = create_app(node, sync=peer_routes.SyncSettings(pull=True, wait_ms=100, reconcile_every_s=1))
    client = await aiohttp_client(app)
    state = app[appkeys.SYNC]
    assert state.scheduler is not None and not state.server.closing.is_set()
    await client.close()
    assert state.scheduler is None and state.server.closing.is_set()


async def test_a_failing_peer_shows_in_peers_metrics_and_the_cli(
    aiohttp_client: Client, node: Node, admin_headers: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The puller's health of a peer (failures, backoff, throttled polls ...) in GET /v1/peers, /metrics and
    `bbs peers` (which reads the database, beside the running node)."""
    app = create_app(node, sync=peer_routes.SyncSettings(pull=True, wait_ms=100))
    client = await aiohttp_client(app)
    resp = await client.post("/v1/peers", json={"url": f"http://127.0.0.1:{unused_port()}", "node_id": PEER.did},
                             headers=admin_headers)  # fmt: skip
    assert resp.status == 201
    scheduler = app[appkeys.SYNC].scheduler
    assert scheduler is not None  # pull=True: the app runs one
    scheduler.poke()
    for _ in range(500):
        [status] = (await (await client.get("/v1/peers", headers=admin_headers)).json())["peers"]
        if status["health"]["failures"] >= 1:
            break
        await asyncio.sleep(0.02)
    assert status["health"]["failures"] >= 1 and status["health"]["consecutive_failures"] >= 1
    metrics = await (await client.get("/metrics", headers=admin_headers)).text()
    assert f'bbs_sync_failures_total{{peer="{PEER.did}"}}' in metrics
    assert f'bbs_sync_consecutive_failures{{peer="{PEER.did}"}}' in metrics
    assert main(["peers", "--data", str(node.data.root)]) == 0
    assert "  failures " in capsys.readouterr().out


def test_default_settings() -> None:
    assert peer_routes.SyncSettings() == peer_routes.SyncSettings(
        pull=True, wait_ms=20_000, reconcile_every_s=300.0, min_poll_ms=250
    )
    assert [route.handler.__name__ for route in peer_routes.PEER_ROUTES] == [
        "add_peer",
        "list_peers",
        "sync_digest",
        "sync_changes",
        "sync_fetch",
        "sync_bodies",
        "sync_reconcile",
    ]
    assert (m.PROTOCOL_VERSION, m.SYNC_VERSIONS) == (3, (2, 3))
