"""check_url: what a push endpoint may be; register keeps one row per (agent, URL) and a per-agent limit."""

from __future__ import annotations

import pytest

from node.errors import Conflict, Forbidden, InvalidInput
from node.push.endpoints import Origin, PushEndpoints, check_url
from node.service import Node
from wire.push import MAX_PUSH_ENDPOINTS, PushEndpointIn

OWN = [Origin("0.0.0.0", 8420)]


@pytest.mark.parametrize("url", ["http://127.0.0.1:9000/p", "http://192.168.1.5:80/p", "https://agent.example/p"])
def test_loopback_private_and_public_urls_pass(url: str) -> None:
    assert check_url(url, own=[Origin("127.0.0.1", 8420)], peers=[], allowlist=[]) == url


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("http://10.0.0.2:8420/p", InvalidInput),  # a wildcard bind: any host on the node's port is the node
        ("http://peer.example:8420/p", InvalidInput),
        ("http://[fe80::1%25eth0]:80/p", InvalidInput),
        ("http://x:y@h:1/p", InvalidInput),
        ("http://h:1/p#frag", InvalidInput),
        ("http://other.example:9/p", Forbidden),
    ],
)
def test_refused_urls(url: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        check_url(url, own=OWN, peers=["http://peer.example:8420"], allowlist=["http://h:1/", "http://peer"])


async def test_register_updates_by_url_and_limits_endpoints(node: Node) -> None:
    store = PushEndpoints(node.db, node.now_ms)
    first, created = await store.register("did:key:a", PushEndpointIn(url="http://h:1/0"))
    again, created_again = await store.register("did:key:a", PushEndpointIn(url="http://h:1/0", tiers=[1, 2]))
    assert created and not created_again and first.id == again.id and again.tiers == {1, 2}
    for i in range(1, MAX_PUSH_ENDPOINTS):
        await store.register("did:key:a", PushEndpointIn(url=f"http://h:1/{i}"))
    with pytest.raises(Conflict):
        await store.register("did:key:a", PushEndpointIn(url="http://h:1/x"))
    assert len(await store.of_agent("did:key:a")) == MAX_PUSH_ENDPOINTS and await store.of_agent("did:key:b") == []
    assert again.wants(2, "subscription") and not first.wants(2, "subscription")
