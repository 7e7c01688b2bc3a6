"""Every class of bad input to the workflow API: a 4xx problem with a stable code and field, nothing stored."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds
from tests.node.workflows.helpers import WF, declare

MakeAgent = Callable[[str], Awaitable[AgentCreds]]

DID = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"


async def stored(node: Node) -> int:
    return int((await node.db.read(lambda c: c.execute("SELECT count(*) FROM records").fetchone()))[0])


BAD_TASKS: list[tuple[Any, int, str, str | None]] = [
    ({}, 422, "validation_error", "$.key"),
    ({"key": "123"}, 422, "validation_error", "$.key"),  # all digits: would read as a local id
    ({"key": "has space"}, 422, "validation_error", "$.key"),
    ({"key": "k" * 129}, 422, "validation_error", "$.key"),
    ({"key": "k", "title": ""}, 422, "validation_error", "$.title"),
    ({"key": "k", "title": "t" * 513}, 422, "validation_error", "$.title"),
    ({"key": "k", "depends_on": "other"}, 422, "validation_error", "$.depends_on"),
    ({"key": "k", "depends_on": ["ok", "not ok"]}, 422, "validation_error", "$.depends_on[1]"),
    ({"key": "k", "depends_on": [f"d{i}" for i in range(65)]}, 422, "validation_error", "$.depends_on"),
    ({"key": "k", "status": "finished"}, 422, "validation_error", "$.status"),
    ({"key": "k", "checkpoint": [1, 2]}, 422, "validation_error", "$.checkpoint"),
    ({"key": "k", "checkpoint": {"blob": "x" * 70_000}}, 422, "checkpoint_too_large", "$.checkpoint"),
    ({"key": "k", "owner": "me"}, 422, "validation_error", "$.owner"),
    ([{"key": "k"}], 422, "validation_error", "$"),
]


@pytest.mark.parametrize(("body", "status", "code", "field"), BAD_TASKS)
async def test_bad_task_declarations(
    client: TestClient, make_agent: MakeAgent, node: Node, body: Any, status: int, code: str, field: str | None
) -> None:
    a = await make_agent("a")
    before = await stored(node)
    resp = await client.post(f"{WF}/tasks", json=body, headers=a.headers)
    problem = await resp.json()
    assert resp.status == status and problem["code"] == code, problem
    assert resp.content_type == "application/problem+json"
    if field is not None:
        assert problem["field"] == field, problem
    assert await stored(node) == before


BAD_MESSAGES: list[tuple[Any, str, str]] = [
    ({}, "validation_error", "$.message_type"),
    ({"message_type": ""}, "validation_error", "$.message_type"),
    ({"message_type": "x", "to_agent": "Bob Smith"}, "validation_error", "$.to_agent"),
    ({"message_type": "x", "payload": "text"}, "validation_error", "$.payload"),
    ({"message_type": "x", "payload": {"blob": "x" * 70_000}}, "validation_error", "$.payload"),
    ({"message_type": "x", "payload": {"blob": "x" * 300_000}}, "validation_error", "$.payload"),
    ({"message_type": "x", "dependency_ids": [str(i) for i in range(33)]}, "validation_error", "$.dependency_ids"),
    ({"message_type": "x", "dependency_ids": [""]}, "validation_error", "$.dependency_ids[0]"),
    ({"message_type": "x", "project": ""}, "validation_error", "$.project"),
    ({"message_type": "x", "body": 5}, "validation_error", "$.body"),
    ({"message_type": "x", "consumed": True}, "validation_error", "$.consumed"),
]


@pytest.mark.parametrize(("body", "code", "field"), BAD_MESSAGES)
async def test_bad_messages(
    client: TestClient, make_agent: MakeAgent, node: Node, body: Any, code: str, field: str
) -> None:
    a = await make_agent("a")
    before = await stored(node)
    resp = await client.post(f"{WF}/messages", json=body, headers=a.headers)
    problem = await resp.json()
    assert resp.status == 422 and problem["code"] == code and problem["field"] == field, problem
    assert await stored(node) == before


BAD_QUERIES: list[tuple[str, dict[str, str], str]] = [
    ("/messages", {"agent": "did:web:bob"}, "$.agent"),
    ("/messages", {"order": "random"}, "$.order"),
    ("/messages", {"limit": "0"}, "$.limit"),
    ("/messages", {"limit": "201"}, "$.limit"),
    ("/messages", {"cursor": "abc"}, "$.cursor"),
    ("/messages", {"cursor": "1.99999999999999999999"}, "$.cursor"),
    ("/messages", {"since": "yesterday"}, "$.since"),
    ("/tasks/ready", {"limit": "1001"}, "$.limit"),
    ("/tasks/ready", {"after": "-1"}, "$.after"),
    ("/tasks/ready", {"after": "99999999999999999999"}, "$.after"),
    ("/graph", {"format": "png"}, "$.format"),
    ("/graph", {"limit": "0"}, "$.limit"),
]


@pytest.mark.parametrize(("path", "params", "field"), BAD_QUERIES)
async def test_bad_queries(
    client: TestClient, make_agent: MakeAgent, path: str, params: dict[str, str], field: str
) -> None:
    a = await make_agent("a")
    resp = await client.get(WF + path, params=params, headers=a.headers)
    problem = await resp.json()
    assert resp.status == 422 and problem["field"] == field, problem


@pytest.mark.parametrize("action", ["lease", "release", "complete"])
async def test_bad_task_action_bodies(client: TestClient, make_agent: MakeAgent, node: Node, action: str) -> None:
    a = await make_agent("a")
    await declare(client, a, {"key": "job", "title": "Job"})
    before = await stored(node)
    for body, field in (([1], "$"), ({"checkpoint": "x"} if action != "lease" else {"seconds": "x"}, None)):
        resp = await client.post(f"{WF}/tasks/job/{action}", json=body, headers=a.headers)
        problem = await resp.json()
        assert resp.status == 422, problem
        if field:
            assert problem["field"] == field
    resp = await client.post(
        f"{WF}/tasks/job/{action}", data=b"{not json", headers=a.headers | {"Content-Type": "application/json"}
    )
    assert resp.status == 400 and (await resp.json())["code"] == "invalid_json"
    resp = await client.post(
        f"{WF}/tasks/job/{action}", data=b"seconds=60", headers=a.headers | {"Content-Type": "text/plain"}
    )
    assert resp.status == 415
    for ref, status in (("missing-task", 404), ("1" * 19, 422), ("a b", 422)):
        resp = await client.post(f"{WF}/tasks/{ref}/{action}", json={}, headers=a.headers)
        assert resp.status == status, await resp.text()
    assert await stored(node) == before


async def test_authentication_is_required(client: TestClient, admin_headers: dict[str, str]) -> None:
    for method, path in (("POST", "/messages"), ("GET", "/messages"), ("POST", "/tasks"), ("GET", "/tasks/ready")):
        resp = await client.request(method, WF + path, json={})
        assert resp.status == 401, path
    resp = await client.post(f"{WF}/tasks", json={"key": "k"}, headers=admin_headers)
    assert resp.status == 403 and (await resp.json())["code"] == "agent_key_required"
    resp = await client.get(f"{WF}/tasks/ready", headers=admin_headers)  # reads are open to the admin too
    assert resp.status == 200


async def test_unknown_agent_filter_is_not_an_error(client: TestClient, make_agent: MakeAgent) -> None:
    a = await make_agent("a")
    resp = await client.get(f"{WF}/messages", params={"agent": DID}, headers=a.headers)
    assert resp.status == 200 and (await resp.json()) == {"messages": [], "next_cursor": None}
