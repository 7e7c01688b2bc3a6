"""The task graph over a real server: upsert by key, forward references, ready means ready, cycles, convergence."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds
from tests.node.workflows.helpers import SEED_PLAN, WF, count_records, declare, lease, ready_keys

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def test_seed_example_graph_is_ready_for_doctor_pass_only(client: TestClient, make_agent: MakeAgent) -> None:
    supervisor, agent2 = await make_agent("supervisor"), await make_agent("agent-2")
    for task in SEED_PLAN:
        await declare(client, supervisor, task, 201)
    assert await ready_keys(client, supervisor) == ["doctor-pass", "write-adr"]
    status, body = await lease(client, agent2, "write-adr")
    assert status == 201, body
    assert body["status"] == "processing" and body["lease"]["holder"] == agent2.agent_id
    assert await ready_keys(client, supervisor) == ["doctor-pass"]
    # publish-digest waits on both unfinished prerequisites, write-adr on nothing
    resp = await client.get(f"{WF}/tasks/publish-digest", headers=supervisor.headers)
    assert (await resp.json())["waiting_on"] == ["doctor-pass", "write-adr"]


async def test_ready_response_has_no_status_field(client: TestClient, make_agent: MakeAgent) -> None:
    a = await make_agent("a")
    await declare(client, a, {"key": "solo", "title": "Alone", "checkpoint": {"step": 1}})
    resp = await client.get(f"{WF}/tasks/ready", headers=a.headers)
    (task,) = (await resp.json())["tasks"]
    assert "status" not in task and "lease" not in task
    assert task["checkpoint"] == {"step": 1}


async def test_forward_reference_resolves_when_the_task_appears(client: TestClient, make_agent: MakeAgent) -> None:
    a = await make_agent("a")
    await declare(client, a, {"key": "deploy", "title": "Deploy", "depends_on": ["build"]})
    assert await ready_keys(client, a) == []  # its prerequisite does not exist yet: not ready
    graph = await (await client.get(f"{WF}/graph", headers=a.headers)).json()
    assert graph["missing"] == ["build"]
    assert graph["edges"] == [
        {"type": "precedes", "from_key": "build", "to_key": "deploy", "from_id": None, "to_id": graph["nodes"][0]["id"]}
    ]
    build = await declare(client, a, {"key": "build", "title": "Build"}, 201)
    assert await ready_keys(client, a) == ["build"]
    graph = await (await client.get(f"{WF}/graph", headers=a.headers)).json()
    assert graph["missing"] == [] and graph["edges"][0]["from_id"] == build["id"]
    await declare(client, a, {"key": "build", "status": "completed"}, 200)
    assert await ready_keys(client, a) == ["deploy"]


async def test_redeclaring_the_same_plan_converges(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    a = await make_agent("a")
    first = [await declare(client, a, task) for task in SEED_PLAN]
    events = await count_records(node, "task_event")
    again = [await declare(client, a, task, 200) for task in SEED_PLAN]
    assert await count_records(node, "task_event") == events  # nothing changed: nothing appended
    assert [t["id"] for t in again] == [t["id"] for t in first]
    # dependency order in a declaration does not matter; a real change appends exactly one event
    await declare(client, a, {"key": "publish-digest", "depends_on": ["write-adr", "doctor-pass", "write-adr"]}, 200)
    assert await count_records(node, "task_event") == events
    await declare(client, a, {"key": "publish-digest", "title": "Publish the weekly digest"}, 200)
    assert await count_records(node, "task_event") == events + 1


async def test_checkpoint_is_merged_not_replaced(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    a = await make_agent("a")
    await declare(client, a, {"key": "crawl", "title": "Crawl", "checkpoint": {"page": 1, "seen": {"a": 1}}})
    task = await declare(client, a, {"key": "crawl", "checkpoint": {"page": 2, "seen": {"b": 2}}})
    assert task["checkpoint"] == {"page": 2, "seen": {"a": 1, "b": 2}}
    task = await declare(client, a, {"key": "crawl", "checkpoint": {"seen": None}})
    assert task["checkpoint"] == {"page": 2}
    events = await count_records(node, "task_event")
    await declare(client, a, {"key": "crawl", "checkpoint": {"page": 2, "gone": None}}, 200)
    assert await count_records(node, "task_event") == events


async def test_dependency_cycles_are_refused(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    a = await make_agent("a")
    await declare(client, a, {"key": "a1", "title": "A1", "depends_on": ["a2"]})
    await declare(client, a, {"key": "a2", "title": "A2", "depends_on": ["a3"]})
    events = await count_records(node, "task_event")
    for body in (
        {"key": "a3", "title": "A3", "depends_on": ["a1"]},  # closes a1 -> a2 -> a3 -> a1 through a new task
        {"key": "a2", "depends_on": ["a1"]},
        {"key": "a1", "depends_on": ["a1"]},
    ):
        resp = await client.post(f"{WF}/tasks", json=body, headers=a.headers)
        problem = await resp.json()
        assert resp.status == 409 and problem["code"] == "dependency_cycle", problem
        assert problem["field"] == "$.depends_on"
    assert await count_records(node, "task_event") == events
    await declare(client, a, {"key": "a3", "title": "A3", "depends_on": ["a4"]}, 201)  # no cycle: fine


async def test_task_by_id_or_key_and_unknown(client: TestClient, make_agent: MakeAgent) -> None:
    a = await make_agent("a")
    made = await declare(client, a, {"key": "k1", "title": "K"})
    by_id = await (await client.get(f"{WF}/tasks/{made['id']}", headers=a.headers)).json()
    by_key = await (await client.get(f"{WF}/tasks/k1", headers=a.headers)).json()
    assert by_id == by_key == made
    for ref, status, code in (
        ("nope", 404, "task_not_found"),
        ("99999", 404, "task_not_found"),
        ("b%20d", 422, "invalid_task_ref"),
    ):
        resp = await client.get(f"{WF}/tasks/{ref}", headers=a.headers)
        assert resp.status == status and (await resp.json())["code"] == code


async def test_ready_pages_in_id_order(client: TestClient, make_agent: MakeAgent) -> None:
    a = await make_agent("a")
    for i in range(5):
        await declare(client, a, {"key": f"t{i}", "title": f"T{i}"})
    seen: list[str] = []
    after = None
    while True:
        params = {"limit": "2"} | ({"after": str(after)} if after is not None else {})
        page = await (await client.get(f"{WF}/tasks/ready", params=params, headers=a.headers)).json()
        seen += [t["key"] for t in page["tasks"]]
        after = page["next_after"]
        if after is None:
            break
    assert seen == [f"t{i}" for i in range(5)]


async def test_graph_formats(client: TestClient, make_agent: MakeAgent) -> None:
    a, b = await make_agent("a"), await make_agent("b")
    for task in SEED_PLAN:
        await declare(client, a, task)
    await lease(client, b, "write-adr")
    graph = await (await client.get(f"{WF}/graph", headers=a.headers)).json()
    states = {n["key"]: n["state"] for n in graph["nodes"]}
    assert states == {
        "import-contract": "done",
        "scan-repo": "done",
        "doctor-pass": "ready",
        "write-adr": "leased",
        "publish-digest": "blocked",
    }
    ids = {n["key"]: n["id"] for n in graph["nodes"]}
    assert {(e["from_id"], e["to_id"]) for e in graph["edges"]} == {
        (ids["import-contract"], ids["doctor-pass"]),
        (ids["scan-repo"], ids["doctor-pass"]),
        (ids["scan-repo"], ids["write-adr"]),
        (ids["doctor-pass"], ids["publish-digest"]),
        (ids["write-adr"], ids["publish-digest"]),
    }
    assert all(e["type"] == "precedes" for e in graph["edges"])
    resp = await client.get(f"{WF}/graph", params={"format": "dot"}, headers=a.headers)
    dot = await resp.text()
    assert resp.content_type == "text/vnd.graphviz" and dot.startswith("digraph tasks {")
    assert '"scan-repo" -> "write-adr";' in dot
    resp = await client.get(f"{WF}/graph", params={"format": "mermaid"}, headers=a.headers)
    mermaid = await resp.text()
    assert mermaid.startswith("flowchart LR")
    assert f"t{ids['write-adr']} --> t{ids['publish-digest']}" in mermaid
    assert ":::leased" in mermaid


async def test_drawings_escape_titles_and_show_undeclared_prerequisites(
    client: TestClient, make_agent: MakeAgent
) -> None:
    a = await make_agent("a")
    await declare(client, a, {"key": "q", "title": 'say "hi" <b> & \\ back', "depends_on": ["ghost"]})
    dot = await (await client.get(f"{WF}/graph", params={"format": "dot"}, headers=a.headers)).text()
    assert '\\"hi\\"' in dot and "\\\\ back" in dot
    assert '"ghost" [label="ghost\\n[not declared]", style=dashed];' in dot
    assert '"ghost" -> "q";' in dot
    mermaid = await (await client.get(f"{WF}/graph", params={"format": "mermaid"}, headers=a.headers)).text()
    assert "#quot;hi#quot; #lt;b#gt; #amp;" in mermaid and '"hi"' not in mermaid
    assert 'm0["ghost (not declared)"]:::missing' in mermaid and "m0 --> t" in mermaid
