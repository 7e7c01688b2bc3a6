"""node.dashboard.workflow_views: the task board, its DAG drawing, and the bus's projects."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from node.dashboard import workflow_views
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.dashboard.conftest import seed_workflows

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def test_the_task_board(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await seed_workflows(node, alice, bob)
    board = await (await client.get("/dashboard/api/tasks", headers=alice.headers)).json()
    rows = {t["key"]: t for t in board["tasks"]}
    assert [t["key"] for t in board["tasks"]] == ["design", "build", "docs", "test", "ship"]
    assert {k: t["state"] for k, t in rows.items()} == {
        "design": "done",
        "build": "leased",
        "docs": "ready",
        "test": "blocked",
        "ship": "blocked",
    }
    assert board["counts"] == {"done": 1, "leased": 1, "ready": 1, "blocked": 2}
    assert (rows["build"]["lease_holder"], rows["build"]["holder_name"]) == (bob.agent_id, "Bob")
    assert rows["build"]["lease_expires_at"].endswith("Z") and rows["docs"]["lease_expires_at"] is None
    assert rows["ship"]["depends_on"] == ["legal", "test"] and board["missing"] == ["legal"]
    assert board["truncated"] is False


async def test_the_task_dag_as_svg(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await seed_workflows(node, alice, bob)
    resp = await client.get("/dashboard/api/tasks/graph.svg", headers=alice.headers)
    svg = await resp.text()
    assert resp.status == 200 and resp.content_type == "image/svg+xml" and resp.headers["Cache-Control"] == "no-store"
    assert svg.startswith("<svg") and "build: Build the timer [leased] held by Bob until" in svg
    assert "legal" in svg  # the undeclared prerequisite is drawn too


async def test_an_empty_board(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    board = await (await client.get("/dashboard/api/tasks", headers=alice.headers)).json()
    assert board == {"tasks": [], "missing": [], "truncated": False, "counts": {}}
    resp = await client.get("/dashboard/api/tasks/graph.svg", headers=alice.headers)
    assert resp.status == 200 and re.match(r"<svg", await resp.text())
    assert await (await client.get("/dashboard/api/bus/projects", headers=alice.headers)).json() == {"projects": []}


async def test_bus_projects_newest_first(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await seed_workflows(node, alice, bob)
    projects = (await (await client.get("/dashboard/api/bus/projects", headers=bob.headers)).json())["projects"]
    assert [(p["project"], p["messages"]) for p in projects] == [("garden", 1), ("kettle", 2)]
    assert all(p["last_at"].endswith("Z") for p in projects)


def test_the_routes() -> None:
    assert [r.handler.__name__ for r in workflow_views.ROUTES] == ["task_board", "task_graph", "projects"]
    assert all(r.auth == "any" for r in workflow_views.ROUTES)
