"""Leases over a real server: bounds, exclusivity, extension, expiry on a controllable clock, release, complete."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest
from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds, FakeClock
from tests.node.workflows.helpers import WF, count_records, declare, lease, ready_keys

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


@pytest.mark.parametrize(
    ("seconds", "status"), [(29, 422), (30, 201), (86_400, 201), (86_401, 422), (0, 422), (-5, 422), ("60", 422)]
)
async def test_lease_bounds(
    client: TestClient, make_agent: MakeAgent, node: Node, seconds: object, status: int
) -> None:
    a = await make_agent("a")
    await declare(client, a, {"key": "job", "title": "Job"})
    before = await count_records(node, "task_event")
    got, body = await lease(client, a, "job", seconds=seconds)
    assert got == status, body
    if status == 422:
        assert body["field"] == "$.seconds"
        assert await count_records(node, "task_event") == before  # nothing stored


async def test_default_lease_is_900_seconds(client: TestClient, make_agent: MakeAgent, clock: FakeClock) -> None:
    a = await make_agent("a")
    await declare(client, a, {"key": "job", "title": "Job"})
    resp = await client.post(f"{WF}/tasks/job/lease", headers=a.headers)  # no body at all: the defaults
    assert resp.status == 201
    clock.advance(899)
    assert (await (await client.get(f"{WF}/tasks/job", headers=a.headers)).json())["lease"] is not None
    clock.advance(1)
    task = await (await client.get(f"{WF}/tasks/job", headers=a.headers)).json()
    assert task["lease"] is None and task["status"] == "pending"


async def test_holder_extends_other_agent_gets_409(client: TestClient, make_agent: MakeAgent, clock: FakeClock) -> None:
    a, b = await make_agent("a"), await make_agent("b")
    await declare(client, a, {"key": "job", "title": "Job"})
    status, first = await lease(client, a, "job", seconds=60)
    assert status == 201
    status, problem = await lease(client, b, "job", seconds=60)
    assert status == 409 and problem["code"] == "lease_held" and problem["field"] == "task_id"
    clock.advance(50)
    status, extended = await lease(client, a, "job", seconds=60)
    assert status == 200 and extended["lease"]["expires_at"] > first["lease"]["expires_at"]
    clock.advance(30)  # past the first expiry, inside the extension
    status, problem = await lease(client, b, "job", seconds=60)
    assert status == 409
    assert await ready_keys(client, b) == []


async def test_expired_lease_frees_the_task_and_checkpoint_resumes(
    client: TestClient, make_agent: MakeAgent, clock: FakeClock
) -> None:
    crashed, rescuer = await make_agent("crashed"), await make_agent("rescuer")
    await declare(client, crashed, {"key": "migrate", "title": "Migrate rows"})
    status, leased = await lease(client, crashed, "migrate", seconds=30)
    assert status == 201
    token = leased["lease"]["lease_id"]
    progress = {"key": "migrate", "checkpoint": {"rows_done": 400, "cursor": "r400"}}
    await declare(client, crashed, progress, status=422)  # the holder names its lease (the fencing token)
    await declare(client, crashed, progress | {"lease": token})
    assert await ready_keys(client, rescuer) == []
    clock.advance(30)  # the worker is gone; nothing reaps, the lease simply stops being live
    assert await ready_keys(client, rescuer) == ["migrate"]
    resp = await client.post(f"{WF}/tasks/migrate/release", json={"lease": token}, headers=crashed.headers)
    assert resp.status == 409 and (await resp.json())["code"] == "lease_expired"
    # its stale token changes nothing: not the checkpoint, not the status, and it completes nothing
    for stale in ({"key": "migrate", "checkpoint": {"rows_done": 500}}, {"key": "migrate", "status": "done"}):
        problem = await declare(client, crashed, stale | {"lease": token}, status=409)
        assert (problem["code"], problem["field"]) == ("stale_lease", "$.lease")
    resp = await client.post(f"{WF}/tasks/migrate/complete", json={"lease": token}, headers=crashed.headers)
    assert resp.status == 409 and (await resp.json())["code"] == "stale_lease"
    status, task = await lease(client, rescuer, "migrate", seconds=120)
    assert status == 201 and task["lease"]["holder"] == rescuer.agent_id
    assert task["checkpoint"] == {"rows_done": 400, "cursor": "r400"}  # resume, not restart
    # the crashed worker comes back: its lease is gone and someone else holds the task
    resp = await client.post(f"{WF}/tasks/migrate/release", headers=crashed.headers)
    assert resp.status == 409 and (await resp.json())["code"] == "lease_not_held"
    resp = await client.post(
        f"{WF}/tasks/migrate/complete", json={"checkpoint": {"rows_done": 1000}}, headers=crashed.headers
    )
    assert resp.status == 409 and (await resp.json())["code"] == "lease_held"
    resp = await client.post(
        f"{WF}/tasks/migrate/complete",
        json={"checkpoint": {"rows_done": 1000, "cursor": None}, "lease": task["lease"]["lease_id"]},
        headers=rescuer.headers,
    )
    done = await resp.json()
    assert resp.status == 200 and done["status"] == "done" and done["lease"] is None
    assert done["checkpoint"] == {"rows_done": 1000}


async def test_release_ends_the_lease_early(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    a, b = await make_agent("a"), await make_agent("b")
    await declare(client, a, {"key": "job", "title": "Job"})
    resp = await client.post(f"{WF}/tasks/job/release", headers=a.headers)
    assert resp.status == 409 and (await resp.json())["code"] == "lease_not_held"
    _, leased = await lease(client, a, "job", seconds=600)
    token = leased["lease"]["lease_id"]
    resp = await client.post(f"{WF}/tasks/job/release", json={"lease": token}, headers=b.headers)
    assert resp.status == 409 and (await resp.json())["code"] == "lease_not_held"
    resp = await client.post(f"{WF}/tasks/job/release", json={"checkpoint": {"half": True}}, headers=a.headers)
    problem = await resp.json()
    assert (resp.status, problem["code"], problem["field"]) == (422, "lease_required", "$.lease")
    resp = await client.post(f"{WF}/tasks/job/release", json={"lease": "0" * 64}, headers=a.headers)
    assert resp.status == 409 and (await resp.json())["code"] == "stale_lease"
    resp = await client.post(f"{WF}/tasks/job/release", json={"lease": "x"}, headers=a.headers)
    assert resp.status == 422 and (await resp.json())["field"] == "$.lease"
    body = {"checkpoint": {"half": True}, "lease": token}
    resp = await client.post(f"{WF}/tasks/job/release", json=body, headers=a.headers)
    task = await resp.json()
    assert resp.status == 200 and task["lease"] is None and task["checkpoint"] == {"half": True}
    assert await ready_keys(client, b) == ["job"]
    status, task = await lease(client, b, "job", seconds=60)
    assert status == 201 and task["lease"]["holder"] == b.agent_id


async def test_complete_unblocks_dependents_and_closes_the_task(client: TestClient, make_agent: MakeAgent) -> None:
    a = await make_agent("a")
    await declare(client, a, {"key": "first", "title": "First"})
    await declare(client, a, {"key": "second", "title": "Second", "depends_on": ["first"]})
    status, problem = await lease(client, a, "second")
    assert status == 409 and problem["code"] == "task_not_ready"
    _, leased = await lease(client, a, "first")
    resp = await client.post(
        f"{WF}/tasks/first/complete", json={"lease": leased["lease"]["lease_id"]}, headers=a.headers
    )
    assert resp.status == 200
    assert await ready_keys(client, a) == ["second"]
    status, problem = await lease(client, a, "first")
    assert status == 409 and problem["code"] == "task_closed"


@pytest.mark.parametrize("event", ["release", "complete"])
async def test_a_retried_release_or_complete_with_its_idempotency_key_is_applied_once(
    client: TestClient, make_agent: MakeAgent, node: Node, event: str
) -> None:
    a = await make_agent("a")
    for key in ("job", "other"):
        await declare(client, a, {"key": key, "title": key})
    _, leased = await lease(client, a, "job", seconds=600)
    once = {**a.headers, "Idempotency-Key": f"{event}-1"}
    body = {"checkpoint": {"n": 1}, "lease": leased["lease"]["lease_id"]}
    resp = await client.post(f"{WF}/tasks/job/{event}", json=body, headers=once)
    first = await resp.json()
    assert resp.status == 200 and first["lease"] is None
    events = await count_records(node, "task_event")
    # the answer was lost: the same request again returns the task and appends nothing (its token is stale now)
    resp = await client.post(f"{WF}/tasks/job/{event}", json=body, headers=once)
    again = await resp.json()
    assert resp.status == 200, again
    assert (again["status"], again["checkpoint"], again["lease"]) == (first["status"], {"n": 1}, None)
    assert await count_records(node, "task_event") == events
    # without the key the retry is a new request, which finds no lease to end (a release needs one)
    if event == "release":
        resp = await client.post(f"{WF}/tasks/job/release", headers=a.headers)
        assert resp.status == 409 and (await resp.json())["code"] == "lease_not_held"
    # the key names that request: used for another task or another operation, it is refused and stores nothing
    await lease(client, a, "other", seconds=600)
    events = await count_records(node, "task_event")
    for path in (f"{WF}/tasks/other/{event}", f"{WF}/tasks/job/{'complete' if event == 'release' else 'release'}"):
        resp = await client.post(path, headers=once)
        problem = await resp.json()
        assert (resp.status, problem["code"], problem["field"]) == (409, "idempotency_key_reused", "Idempotency-Key")
    resp = await client.post(
        "/v1/entries", json={"entry_type": "finding", "performative": "inform", "content": "x"}, headers=once
    )
    assert resp.status == 409 and (await resp.json())["code"] == "idempotency_key_reused"
    assert await count_records(node, "task_event") == events


async def test_lease_agent_field_must_be_the_caller(client: TestClient, make_agent: MakeAgent) -> None:
    a, b = await make_agent("a"), await make_agent("b")
    await declare(client, a, {"key": "job", "title": "Job"})
    status, problem = await lease(client, a, "job", agent="b")
    assert status == 403 and problem["field"] == "$.agent"
    status, problem = await lease(client, a, "job", agent=b.agent_id)
    assert status == 403
    status, task = await lease(client, a, "job", agent="a")
    assert status == 201 and task["lease"]["holder"] == a.agent_id


async def test_fifty_workers_race_for_twenty_tasks(client: TestClient, make_agent: MakeAgent) -> None:
    supervisor = await make_agent("supervisor")
    for i in range(20):
        await declare(client, supervisor, {"key": f"job-{i:02d}", "title": f"Job {i}"})
    workers = [await make_agent(f"worker-{i:02d}") for i in range(50)]
    grants: Counter[str] = Counter()
    holders: dict[str, str] = {}

    async def work(me: AgentCreds, rng: random.Random) -> None:
        while True:
            ready = await ready_keys(client, me)
            if not ready:
                return
            key = rng.choice(ready)
            status, body = await lease(client, me, key, seconds=300)
            if status == 201:
                grants[key] += 1
                holders[key] = me.agent_id
                return
            assert status == 409 and body["code"] == "lease_held", body

    await asyncio.gather(*(work(w, random.Random(i)) for i, w in enumerate(workers)))
    assert sorted(grants) == [f"job-{i:02d}" for i in range(20)]
    assert set(grants.values()) == {1}  # every task leased by exactly one worker
    assert len(set(holders.values())) == 20  # and no worker holds two
    for key, holder in holders.items():
        task = await (await client.get(f"{WF}/tasks/{key}", headers=supervisor.headers)).json()
        assert task["lease"]["holder"] == holder


async def test_only_the_holder_changes_status_or_checkpoint_of_a_leased_task(
    client: TestClient, make_agent: MakeAgent, node: Node, clock: FakeClock
) -> None:
    """Another agent's declaration may not finish, cancel or rewrite the checkpoint of a task while someone
    holds its lease (the holder's work is its own); title and dependencies stay the planner's."""
    holder, other = await make_agent("holder"), await make_agent("other")
    await declare(client, other, {"key": "a1", "title": "A1", "checkpoint": {"step": 1}})
    await declare(client, other, {"key": "a2", "title": "A2", "depends_on": ["a1"]})
    status, leased = await lease(client, holder, "a1", seconds=60)
    assert status == 201
    token = leased["lease"]["lease_id"]
    before = await count_records(node, "task_event")
    for change, field in (
        ({"status": "done"}, "$.status"),
        ({"status": "cancelled"}, "$.status"),
        ({"checkpoint": {"step": None}}, "$.checkpoint"),
    ):
        resp = await client.post(f"{WF}/tasks", json={"key": "a1", **change}, headers=other.headers)
        problem = await resp.json()
        assert (resp.status, problem["code"], problem["field"]) == (409, "lease_held", field), problem
    assert await count_records(node, "task_event") == before
    assert await ready_keys(client, other) == []  # a2 still waits on a1
    resp = await client.post(f"{WF}/tasks", json={"key": "a1", "title": "A1, renamed"}, headers=other.headers)
    assert resp.status == 200
    resp = await client.post(f"{WF}/tasks", json={"key": "a1", "checkpoint": {"step": 2}}, headers=holder.headers)
    assert resp.status == 422 and (await resp.json())["code"] == "lease_required"
    # the fencing token names the live lease; another agent's token is not its own
    resp = await client.post(
        f"{WF}/tasks", json={"key": "a1", "checkpoint": {"step": 2}, "lease": token}, headers=other.headers
    )
    assert resp.status == 409 and (await resp.json())["code"] == "lease_held"
    resp = await client.post(
        f"{WF}/tasks", json={"key": "a1", "checkpoint": {"step": 2}, "lease": token}, headers=holder.headers
    )
    assert resp.status == 200 and (await resp.json())["checkpoint"] == {"step": 2}
    clock.advance(61)  # the lease lapsed: anyone may decide again
    resp = await client.post(f"{WF}/tasks", json={"key": "a1", "status": "cancelled"}, headers=other.headers)
    assert resp.status == 200 and (await resp.json())["status"] == "cancelled"


async def test_without_a_lease_an_agent_completes_only_what_it_could_lease(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    planner, worker = await make_agent("planner"), await make_agent("worker")
    await declare(client, planner, {"key": "first", "title": "First"})
    await declare(client, planner, {"key": "then", "title": "Then", "depends_on": ["first"]})
    await declare(client, planner, {"key": "dropped", "title": "Dropped", "status": "cancelled"})
    before = await count_records(node, "task_event")
    for key, code in (("then", "task_not_ready"), ("dropped", "task_closed")):
        resp = await client.post(f"{WF}/tasks/{key}/complete", json={}, headers=worker.headers)
        problem = await resp.json()
        assert (resp.status, problem["code"], problem["field"]) == (409, code, "task_id"), problem
    assert await count_records(node, "task_event") == before
    done = await client.post(f"{WF}/tasks/first/complete", json={}, headers=worker.headers)  # ready: allowed
    assert done.status == 200 and (await done.json())["status"] == "done"
    again = await client.post(f"{WF}/tasks/first/complete", json={"checkpoint": {"n": 1}}, headers=planner.headers)
    assert again.status == 200 and (await again.json())["checkpoint"] == {"n": 1}  # done: merging still works
