"""node.workflows.routes: the REST handlers under /v1/agent-workflows, through real servers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp.test_utils import TestClient

from identity import keys
from node.workflows import routes
from sync.auth import sign_headers
from tests.conftest import AgentCreds
from tests.node.api_helpers import problem
from tests.node.workflows.helpers import WF, declare
from tests.sync.conftest import PeerNode

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
MakePeer = Callable[..., Awaitable[PeerNode]]


async def call(client: TestClient, method: str, path: str, who: AgentCreds, status: int, **kw: Any) -> Any:
    resp = await client.request(method, WF + path, headers={**who.headers, **kw.pop("headers", {})}, **kw)
    data = await resp.json(content_type=None)
    assert resp.status == status, data
    return data


async def test_messages(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    body = {"message_type": "hello", "to_agent": bob.agent_id}
    sent = await call(client, "POST", "/messages", alice, 201, json=body, headers={"Idempotency-Key": "m"})
    assert await call(client, "POST", "/messages", alice, 200, json=body, headers={"Idempotency-Key": "m"}) == sent
    read = await call(client, "GET", "/messages", bob, 200, params={"agent": bob.agent_id})
    assert read == {"messages": [sent], "next_cursor": None}
    mine = {**body, "from_agent": bob.agent_id}  # from_agent, when given, must be the caller
    assert (await call(client, "POST", "/messages", alice, 403, json=mine))["status"] == 403


async def test_tasks_lease_release_and_complete(client: TestClient, make_agent: MakeAgent) -> None:
    boss, worker, other = await make_agent("boss"), await make_agent("worker"), await make_agent("other")
    task = await declare(client, boss, {"key": "paint", "title": "Paint the shed"}, 201)
    assert (await declare(client, boss, {"key": "paint", "title": "Paint the shed"}, 200))["id"] == task["id"]
    assert (await call(client, "GET", f"/tasks/{task['id']}", worker, 200))["key"] == "paint"
    assert (await call(client, "GET", "/tasks/paint", worker, 200))["id"] == task["id"]
    ready = await call(client, "GET", "/tasks/ready", worker, 200)
    assert [t["key"] for t in ready["tasks"]] == ["paint"] and ready["next_after"] is None
    resp = await client.post(f"{WF}/tasks/paint/lease", headers=worker.headers)  # no body: the defaults
    leased = await resp.json()
    assert resp.status == 201 and leased["status"] == "processing" and leased["lease"]["holder"] == worker.agent_id
    problem(await call(client, "POST", "/tasks/paint/lease", other, 409, json={}), 409, "lease_held", "task_id")
    token = (await call(client, "POST", "/tasks/paint/lease", worker, 200, json={"seconds": 60}))["lease"]["lease_id"]
    body = {"checkpoint": {"coat": 1}, "lease": token}
    released = await call(client, "POST", "/tasks/paint/release", worker, 200, json=body)
    assert released["lease"] is None and released["checkpoint"] == {"coat": 1}
    token = (await call(client, "POST", "/tasks/paint/lease", other, 201))["lease"]["lease_id"]
    done = await call(client, "POST", "/tasks/paint/complete", other, 200, json={"lease": token})
    assert done["status"] == "done" and done["lease"] is None
    problem(await call(client, "GET", "/tasks/unknown-task", worker, 404), 404, "task_not_found", "task_id")
    problem(await call(client, "POST", "/tasks/paint/lease", worker, 422, json={"seconds": 5}), 422,
            "validation_error", "$.seconds")  # fmt: skip


async def test_the_graph_in_three_formats(client: TestClient, make_agent: MakeAgent) -> None:
    boss = await make_agent("boss")
    await declare(client, boss, {"key": "a"})
    await declare(client, boss, {"key": "b", "depends_on": ["a"]})
    g = await call(client, "GET", "/graph", boss, 200)
    assert [n["key"] for n in g["nodes"]] == ["a", "b"] and g["edges"][0]["from_key"] == "a"
    dot = await client.get(f"{WF}/graph", params={"format": "dot"}, headers=boss.headers)
    assert dot.content_type == "text/vnd.graphviz" and (await dot.text()).startswith("digraph tasks {")
    mermaid = await client.get(f"{WF}/graph", params={"format": "mermaid"}, headers=boss.headers)
    assert mermaid.content_type == "text/plain" and (await mermaid.text()).startswith("flowchart LR")


async def pull(into: PeerNode, source: PeerNode) -> None:
    puller = into.puller()
    while (await puller.pull_once(source.config)).more:
        pass


async def peer_lease(asker: PeerNode, home: PeerNode, body: dict[str, Any], key: keys.SigningKey) -> tuple[int, Any]:
    raw = msgspec.json.encode(body)
    url = home.url + routes.PREFIX + "/peer/lease"
    headers = {**sign_headers(key, "POST", url, raw), "Content-Type": "application/json"}
    async with asker.session.post(url, data=raw, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_peer_lease(make_peer: MakePeer) -> None:
    home, asking = await make_peer("home"), await make_peer("asking")
    await home.add_peer(asking)
    await asking.add_peer(home)
    boss = await home.node.agents.create("boss", "Boss")
    async with home.session.post(
        home.url + WF + "/tasks", json={"key": "index"}, headers={"Authorization": f"Bearer {boss.api_key}"}
    ) as resp:
        assert resp.status == 201
    worker = await asking.agent("worker")
    await pull(home, asking)  # the worker's identity document: it names `asking` as its home node
    ask = {"task_key": "index", "agent_id": worker}
    status, grant = await peer_lease(asking, home, ask | {"request_id": "1" * 16}, asking.node.key)
    assert status == 201 and grant["record"]["holder"] == worker and grant["task"]["lease"]["holder"] == worker
    status, again = await peer_lease(asking, home, ask | {"request_id": "2" * 16}, asking.node.key)
    assert status == 200 and again["record"]["holder"] == worker  # extended
    stranger = keys.SigningKey.generate()
    status, refused = await peer_lease(asking, home, ask | {"request_id": "3" * 16}, stranger)
    assert (status, refused["code"]) == (403, "unknown_peer")
    status, bad = await peer_lease(asking, home, {"task_key": "index"}, asking.node.key)
    assert (status, bad["field"]) == (422, "$.agent_id")
    await pull(asking, home)  # the task is known at `asking` now, homed at `home`
    ask_there = {"task_key": "index", "agent_id": boss.agent_id, "request_id": "4" * 16}
    status, not_home = await peer_lease(home, asking, ask_there, home.node.key)
    assert (status, not_home["code"], not_home["field"]) == (503, "not_lease_authority", "$.task_key")


def test_the_route_table() -> None:
    assert [route.handler.__name__ for route in routes.ROUTES] == [
        "post_message", "get_messages", "post_task", "get_ready", "get_task", "lease_task", "release_task",
        "complete_task", "get_graph", "peer_lease", "peer_task_event",
    ]  # fmt: skip
    assert all(route.path.startswith(routes.PREFIX) for route in routes.ROUTES)
