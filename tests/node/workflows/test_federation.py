"""Leases across real nodes: only the home node grants; others forward to it or refuse, never double-grant."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import unused_port

from identity import canonical, keys, records
from node import projections
from node.service import Node
from sync.auth import sign_headers
from tests.node.workflows.helpers import WF, count_records
from tests.sync.conftest import PeerNode

MakePeer = Callable[..., Awaitable[PeerNode]]


async def call(peer: PeerNode, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with peer.session.request(method, peer.url + path, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def agent_key(peer: PeerNode, name: str) -> tuple[str, str]:
    created = await peer.node.create_agent(name, name.title())
    return created.agent_id, created.api_key


async def pair(make_peer: MakePeer) -> tuple[PeerNode, PeerNode]:
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    return a, b


async def pull(into: PeerNode, source: PeerNode) -> None:
    """One real sync step: `into` pulls `source`'s changes feed until caught up."""
    puller = into.puller()
    while (await puller.pull_once(source.config)).more:
        pass


async def test_lease_is_forwarded_to_the_home_node(make_peer: MakePeer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="bbs.leases")
    a, b = await pair(make_peer)
    _, boss = await agent_key(a, "boss")
    wa_id, wa = await agent_key(a, "worker-a")
    wb_id, wb = await agent_key(b, "worker-b")
    wb2_id, wb2 = await agent_key(b, "worker-b2")
    status, task = await call(a, "POST", f"{WF}/tasks", boss, {"key": "index", "title": "Build the index"})
    assert status == 201 and task["home_node"] == a.node_id
    await pull(b, a)
    status, seen = await call(b, "GET", f"{WF}/tasks/index", wb)
    assert status == 200 and seen["home_node"] == a.node_id

    status, leased = await call(b, "POST", f"{WF}/tasks/index/lease", wb, {"seconds": 120})
    assert status == 201, leased
    assert leased["lease"]["holder"] == wb_id
    # the grant was made and signed by the home node, and both nodes now exclude the task from ready
    grant = await a.node.db.read(
        lambda c: c.execute("SELECT author_id, holder FROM task_events WHERE event = 'lease'").fetchall()
    )
    assert [tuple(r) for r in grant] == [(a.node_id, wb_id)]
    decided = [r.getMessage() for r in caplog.records if r.name == "bbs.leases"]
    assert any(m.startswith(f"lease granted for {b.node_id}: task index to {wb_id}") for m in decided), decided
    for peer, token in ((a, wa), (b, wb)):
        status, ready = await call(peer, "GET", f"{WF}/tasks/ready", token)
        assert ready["tasks"] == []
    # nobody else gets it, on either node
    status, problem = await call(a, "POST", f"{WF}/tasks/index/lease", wa, {})
    assert status == 409 and problem["code"] == "lease_held"
    status, problem = await call(b, "POST", f"{WF}/tasks/index/lease", wb2, {})
    assert status == 409 and problem["code"] == "lease_held", problem
    # the holder extends through its own node
    status, extended = await call(b, "POST", f"{WF}/tasks/index/lease", wb, {"seconds": 600})
    assert status == 200 and extended["lease"]["expires_at"] > leased["lease"]["expires_at"]
    # completion is the holder's own record; it reaches the home node by sync
    status, done = await call(b, "POST", f"{WF}/tasks/index/complete", wb, {"checkpoint": {"pages": 12}})
    assert status == 200 and done["status"] == "done"
    await pull(a, b)
    status, there = await call(a, "GET", f"{WF}/tasks/index", wa)
    assert there["status"] == "done" and there["lease"] is None and there["checkpoint"] == {"pages": 12}
    assert wa_id != wb2_id


async def test_partition_refuses_and_never_doubles(make_peer: MakePeer) -> None:
    a, b = await pair(make_peer)
    _, boss = await agent_key(a, "boss")
    wa_id, wa = await agent_key(a, "worker-a")
    _, wb = await agent_key(b, "worker-b")
    await call(a, "POST", f"{WF}/tasks", boss, {"key": "report", "title": "Write the report"})
    await pull(b, a)
    home_url = a.url
    dead = f"http://127.0.0.1:{unused_port()}"
    async with b.session.post(b.url + "/v1/peers", json={"url": dead, "node_id": a.node_id}, headers=b.admin) as r:
        assert r.status == 201
    before = await count_records(b.node, "task_event")
    status, problem = await call(b, "POST", f"{WF}/tasks/report/lease", wb, {"seconds": 60})
    assert status == 503 and problem["code"] == "lease_authority_unreachable", problem
    assert problem["field"] == "task_id" and a.node_id in problem["detail"]
    assert await count_records(b.node, "task_event") == before  # nothing granted, nothing stored
    # meanwhile the home node grants the lease to its own worker
    status, _ = await call(a, "POST", f"{WF}/tasks/report/lease", wa, {"seconds": 600})
    assert status == 201
    # the partition heals: B's worker is refused by the home node, not granted a second lease
    async with b.session.post(b.url + "/v1/peers", json={"url": home_url, "node_id": a.node_id}, headers=b.admin) as r:
        assert r.status == 201
    status, problem = await call(b, "POST", f"{WF}/tasks/report/lease", wb, {"seconds": 60})
    assert status == 409 and problem["code"] == "lease_held", problem
    await pull(b, a)
    status, seen = await call(b, "GET", f"{WF}/tasks/report", wb)
    assert seen["lease"]["holder"] == wa_id
    status, ready = await call(b, "GET", f"{WF}/tasks/ready", wb)
    assert ready["tasks"] == []  # leased on the home node: excluded here too


async def test_home_node_not_a_peer_is_refused(node: Node, make_agent: Any, client: Any) -> None:
    """A task first declared on a node this one has never heard of: refused with a 503, nothing stored."""
    elsewhere = keys.SigningKey.generate()  # another node's id
    author = keys.SigningKey.generate()
    record = records.sign(
        {
            "kind": "task_event",
            "schema_version": "v1",
            "author_id": author.did,
            "created_at": canonical.now_created_at(),
            "event": "declare",
            "task_key": "remote-job",
            "node_id": elsewhere.did,
            "title": "Declared on another node",
        },
        author,
    )
    record_hash, decoded = records.check(record)
    await node.db.write(
        lambda c: projections.append(c, record, record_hash, decoded, origin=elsewhere.did, now_ms=node.now_ms())
    )
    worker = await make_agent("worker")
    resp = await client.get(f"{WF}/tasks/ready", headers=worker.headers)
    assert [t["key"] for t in (await resp.json())["tasks"]] == ["remote-job"]  # it is ready: leasing it is not ours
    before = await count_records(node, "task_event")
    resp = await client.post(f"{WF}/tasks/remote-job/lease", json={"seconds": 60}, headers=worker.headers)
    problem = await resp.json()
    assert resp.status == 503 and problem["code"] == "lease_authority_unreachable", problem
    assert elsewhere.did in problem["detail"]
    assert await count_records(node, "task_event") == before


async def test_peer_lease_endpoint_requires_a_peer_signature(make_peer: MakePeer) -> None:
    a = await make_peer("a")
    async with aiohttp.ClientSession() as session:
        resp = await session.post(
            a.url + f"{WF}/peer/lease", json={"task_key": "x", "agent_id": a.node_id, "seconds": 60}
        )
        problem = await resp.json()
    assert resp.status == 401 and problem["code"] == "signature_required"


async def test_peer_lease_endpoint_validates_a_peers_request(make_peer: MakePeer) -> None:
    a, b = await pair(make_peer)
    url = a.url + f"{WF}/peer/lease"
    for body, status, field in (
        (b"{not json", 400, None),
        (b'{"task_key": "123", "agent_id": "x"}', 422, "$.task_key"),
        (b'{"task_key": "nope", "agent_id": "' + b.node_id.encode() + b'", "seconds": 10}', 422, "$.seconds"),
        (b'{"task_key": "nope", "agent_id": "' + b.node_id.encode() + b'"}', 404, "task_id"),
    ):
        headers = sign_headers(b.node.key, "POST", url, body) | {"Content-Type": "application/json"}
        async with b.session.post(url, data=body, headers=headers) as resp:
            problem = await resp.json()
        assert resp.status == status, problem
        if field is not None:
            assert problem["field"] == field, problem


async def test_a_node_that_is_not_home_does_not_refuse_a_completion_by_its_own_graph(
    node: Node, make_agent: Any, client: Any
) -> None:
    """This node's copy shows a dependency not done, but the completion may have reached the home node already:
    only the home node decides whether an agent without a lease may complete (as only it grants leases)."""
    elsewhere, author = keys.SigningKey.generate(), keys.SigningKey.generate()
    record = records.sign(
        {
            "kind": "task_event",
            "schema_version": "v1",
            "author_id": author.did,
            "created_at": canonical.now_created_at(),
            "event": "declare",
            "task_key": "remote-after",
            "node_id": elsewhere.did,
            "title": "Waits on a task this node has not seen done",
            "depends_on": ["remote-first"],
        },
        author,
    )
    record_hash, decoded = records.check(record)
    await node.db.write(
        lambda c: projections.append(c, record, record_hash, decoded, origin=elsewhere.did, now_ms=node.now_ms())
    )
    worker = await make_agent("worker")
    resp = await client.post(f"{WF}/tasks/remote-after/complete", json={}, headers=worker.headers)
    assert resp.status == 200 and (await resp.json())["status"] == "done"
