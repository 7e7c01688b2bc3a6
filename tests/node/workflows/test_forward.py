"""node.workflows.forward: a lease asked at one node is granted only by the task's home node, over a signed request.

The nodes are real (tests/sync/conftest.py's make_peer); a home node that misbehaves is a small aiohttp server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer, unused_port

from identity import keys
from node.errors import BBSError
from node.workflows import forward
from node.workflows.leases import LeaseAuthorityUnreachable
from tests.sync.conftest import PeerNode

MakePeer = Callable[..., Awaitable[PeerNode]]
INVALID = b'{"code": "validation_error", "detail": "bad seconds", "title": "Invalid input"}'


async def pair(make_peer: MakePeer) -> tuple[PeerNode, PeerNode]:
    home, asking = await make_peer("home"), await make_peer("asking")
    await home.add_peer(asking)
    await asking.add_peer(home)
    return home, asking


async def declare(peer: PeerNode, key: str) -> None:
    agent = await peer.node.agents.create("boss", "Boss")
    async with peer.session.post(
        peer.url + "/v1/agent-workflows/tasks", json={"key": key}, headers={"Authorization": f"Bearer {agent.api_key}"}
    ) as resp:
        assert resp.status == 201, await resp.text()


async def test_the_home_node_grants_and_extends(make_peer: MakePeer) -> None:
    home, asking = await pair(make_peer)
    await declare(home, "index")
    worker = await asking.agent("worker")
    record, granted = await forward.request_lease(asking.node.db, asking.node.key, home.node_id, "index", worker, 120)
    assert granted
    assert (record["kind"], record["event"], record["task_key"], record["holder"]) == (
        "task_event",
        "lease",
        "index",
        worker,
    )
    assert record["author_id"] == home.node_id  # signed by the lease authority
    record, granted = await forward.request_lease(asking.node.db, asking.node.key, home.node_id, "index", worker, 600)
    assert not granted and record["holder"] == worker


async def test_the_home_nodes_refusals_are_relayed(make_peer: MakePeer) -> None:
    home, asking = await pair(make_peer)
    await declare(home, "index")
    first, second = await asking.agent("first"), await asking.agent("second")
    await forward.request_lease(asking.node.db, asking.node.key, home.node_id, "index", first, 120)
    with pytest.raises(BBSError) as info:
        await forward.request_lease(asking.node.db, asking.node.key, home.node_id, "index", second, 120)
    assert (info.value.status, info.value.code, info.value.field) == (409, "lease_held", "task_id")
    with pytest.raises(BBSError) as info:
        await forward.request_lease(asking.node.db, asking.node.key, home.node_id, "no-such-task", first, 120)
    assert (info.value.status, info.value.field) == (404, "task_id")


async def test_a_home_node_that_is_not_a_peer_is_unreachable(make_peer: MakePeer) -> None:
    asking = await make_peer("asking")
    stranger = keys.SigningKey.generate().did
    with pytest.raises(LeaseAuthorityUnreachable) as info:
        await forward.request_lease(asking.node.db, asking.node.key, stranger, "index", await asking.agent("w"), 120)
    assert (info.value.status, info.value.code, info.value.field) == (503, "lease_authority_unreachable", "task_id")
    assert "not a peer" in info.value.detail


async def test_a_home_node_that_does_not_answer_is_unreachable(make_peer: MakePeer) -> None:
    asking = await make_peer("asking")
    home = keys.SigningKey.generate().did
    async with asking.session.post(
        asking.url + "/v1/peers", json={"url": f"http://127.0.0.1:{unused_port()}", "node_id": home},
        headers=asking.admin,
    ) as resp:  # fmt: skip
        assert resp.status == 201
    with pytest.raises(LeaseAuthorityUnreachable) as info:
        await forward.request_lease(asking.node.db, asking.node.key, home, "index", await asking.agent("w"), 120)
    assert "cannot reach it" in info.value.detail


@pytest.fixture
async def odd_home(make_peer: MakePeer) -> AsyncIterator[Callable[[int, bytes], Awaitable[tuple[PeerNode, str]]]]:
    """A 'home node' answering every lease request with a fixed status and body."""
    servers: list[TestServer] = []

    async def start(status: int, body: bytes) -> tuple[PeerNode, str]:
        async def answer(request: web.Request) -> web.Response:
            return web.Response(status=status, body=body, content_type="application/json")

        app = web.Application()
        app.router.add_post(forward.PEER_LEASE_PATH, answer)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        asking = await make_peer(f"asking{len(servers)}")
        home = keys.SigningKey.generate().did
        url = str(server.make_url("")).rstrip("/")
        async with asking.session.post(
            asking.url + "/v1/peers", json={"url": url, "node_id": home}, headers=asking.admin
        ) as resp:
            assert resp.status == 201
        return asking, home

    yield start
    for server in servers:
        await server.close()


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (
            422,
            b'{"code": "validation_error", "detail": "bad seconds", "title": "Invalid input"}',
            (422, "validation_error"),
        ),
        (401, b'{"code": "bad_signature", "detail": "no"}', (503, "lease_authority_unreachable")),
        (403, b'{"code": "unknown_peer"}', (503, "lease_authority_unreachable")),
        (500, b'{"code": "internal_error"}', (503, "lease_authority_unreachable")),
        (502, b"<html>bad gateway</html>", (503, "lease_authority_unreachable")),
        (200, b"not json", (503, "lease_authority_unreachable")),
        (201, b'{"record": {}}', (503, "lease_authority_unreachable")),
        (404, b"not json either", (503, "lease_authority_unreachable")),
    ],
)
async def test_what_a_misbehaving_home_node_answers(
    odd_home: Callable[[int, bytes], Awaitable[tuple[PeerNode, str]]], status: int, body: bytes, expected: Any
) -> None:
    asking, home = await odd_home(status, body)
    with pytest.raises(BBSError) as info:
        await forward.request_lease(asking.node.db, asking.node.key, home, "index", await asking.agent("w"), 120)
    assert (info.value.status, info.value.code) == expected
    assert info.value.field == "task_id"
    if status == 500:
        assert "HTTP 500, internal_error" in info.value.detail
    if status == 422:
        assert (info.value.detail, info.value.title) == ("bad seconds", "Invalid input")
