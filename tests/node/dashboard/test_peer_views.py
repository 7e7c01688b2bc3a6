"""node.dashboard.peer_views: one reconciliation with a peer, reported as agreement or what each side lacks."""

from __future__ import annotations

from typing import Any

from node.dashboard import peer_views
from tests.sync.conftest import PeerNode


async def agreement(peer: PeerNode, other: str) -> tuple[int, dict[str, Any]]:
    async with peer.session.post(f"{peer.url}/dashboard/api/peers/{other}/agreement", headers=peer.admin) as resp:
        return resp.status, await resp.json()


async def test_two_peers_agree_then_differ_then_catch_up(make_peer: Any) -> None:
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    writer = await b.agent("writer")
    for i in range(3):
        await b.post(writer, f"federated finding {i}")
    await a.puller().pull_once(b.config)
    status, report = await agreement(a, b.node_id)
    assert status == 200
    assert (report["peer"], report["in_agreement"], report["missing_here"], report["missing_there"]) == (
        b.node_id,
        True,
        0,
        0,
    )
    assert report["rounds"] >= 1 and report["checked_at"].endswith("Z")
    await a.post(await a.agent("local-writer"), "only on a so far")  # an agent document and an entry
    status, report = await agreement(a, b.node_id)
    assert (report["in_agreement"], report["missing_here"], report["missing_there"], report["fetched"]) == (
        False,
        0,
        2,
        0,
    )
    status, report = await agreement(b, a.node_id)  # from b's side: it lacks them, and fetches them now
    assert (report["missing_here"], report["fetched"]) == (2, 2)
    assert await a.digest() == await b.digest()
    status, report = await agreement(a, b.node_id)
    assert report["in_agreement"]


async def test_only_configured_peers_and_only_the_admin(make_peer: Any) -> None:
    a = await make_peer("a")
    stranger = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
    status, problem = await agreement(a, stranger)
    assert (status, problem["code"], problem["field"]) == (404, "peer_not_found", "node_id")
    agent = await a.node.agents.create("alice", "Alice")
    async with a.session.post(
        f"{a.url}/dashboard/api/peers/{stranger}/agreement", headers={"Authorization": f"Bearer {agent.api_key}"}
    ) as resp:
        assert (resp.status, (await resp.json())["code"]) == (403, "admin_required")


def test_the_route() -> None:
    [route] = peer_views.ROUTES
    assert (route.method, route.path, route.auth) == ("POST", "/dashboard/api/peers/{node_id}/agreement", "admin")
    assert peer_views.RECONCILE_TIMEOUT_S == 30
