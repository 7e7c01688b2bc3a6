"""Agents that hold their own keys submit workflow records they signed; the node verifies and stores them as is."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from identity import canonical, keys, records
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import SelfSigner, self_signer
from tests.node.workflows.helpers import WF, count_records, lease
from wire.time import format_ms

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def task_event(
    key: keys.SigningKey, created_ms: int, event: str, task_key: str = "signed-job", **fields: Any
) -> dict[str, Any]:
    body = {
        "kind": "task_event",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": key.did,
        "created_at": format_ms(created_ms),
        "event": event,
        "task_key": task_key,
        **fields,
    }
    return records.sign(body, key)


async def submit(client: TestClient, who: SelfSigner, path: str, record: dict[str, Any]) -> tuple[int, Any]:
    resp = await client.post(WF + path, json={"record": record}, headers=who.headers)
    return resp.status, await resp.json()


async def test_self_signed_task_life(client: TestClient, node: Node) -> None:
    carol = await self_signer(node, "carol")
    now = node.now_ms()
    status, problem = await submit(
        client, carol, "/tasks", task_event(carol.key, now, "declare", node_id=carol.agent_id, title="Job")
    )
    assert status == 422 and problem["code"] == "wrong_node" and problem["field"] == "$.record.node_id"
    declare = task_event(carol.key, now, "declare", node_id=node.node_id, title="Job", checkpoint={"step": 1})
    status, task = await submit(client, carol, "/tasks", declare)
    assert status == 201 and task["title"] == "Job" and task["home_node"] == node.node_id
    status, again = await submit(client, carol, "/tasks", declare)  # the same record twice: one event
    assert status == 200 and again == task
    assert await count_records(node, "task_event") == 1

    status, leased = await lease(client, carol.creds, "signed-job", seconds=60)  # the node signs the grant
    assert status == 201
    lease_id = leased["lease"]["lease_id"]
    # the node stamped its grant after the declaration (now + 1): events dated at or before it are refused,
    # or a backdated declaration could name a new home node, a backdated completion fold before the lease
    for early in (
        task_event(carol.key, now + 1, "release", lease=lease_id),
        task_event(carol.key, now - 60_000, "complete"),
    ):
        status, problem = await submit(client, carol, f"/tasks/signed-job/{early['event']}", early)
        assert (status, problem["code"], problem["field"]) == (422, "event_out_of_order", "$.record.created_at")
    backdated = task_event(carol.key, 31_536_000_000, "declare", node_id=node.node_id, status="cancelled")  # 1971
    status, problem = await submit(client, carol, "/tasks", backdated)
    assert (status, problem["code"]) == (422, "event_out_of_order")
    now += 1
    wrong = task_event(carol.key, now + 1, "release", lease="0" * 64)
    status, problem = await submit(client, carol, "/tasks/signed-job/release", wrong)
    assert (status, problem["code"], problem["field"]) == (409, "stale_lease", "$.record.lease")
    release = task_event(carol.key, now + 1, "release", lease=lease_id, checkpoint={"step": 2})
    status, problem = await submit(client, carol, "/tasks/signed-job/complete", release)
    assert status == 422 and problem["code"] == "wrong_event" and problem["field"] == "$.record.event"
    status, released = await submit(client, carol, "/tasks/signed-job/release", release)
    assert status == 200 and released["lease"] is None and released["checkpoint"] == {"step": 2}
    complete = task_event(carol.key, now + 2, "complete", checkpoint={"step": 3})
    status, done = await submit(client, carol, "/tasks/signed-job/complete", complete)
    assert status == 200 and done["status"] == "done" and done["checkpoint"] == {"step": 3}
    stored = await node.db.read(
        lambda c: c.execute("SELECT body FROM records WHERE hash = ?", (records.compute_hash(complete),)).fetchone()
    )
    assert json.loads(stored[0]) == complete  # byte for byte what the agent signed


async def test_self_signer_cannot_use_node_signed_fields(client: TestClient, node: Node) -> None:
    carol = await self_signer(node, "carol")
    resp = await client.post(f"{WF}/messages", json={"message_type": "x"}, headers=carol.headers)
    assert resp.status == 422 and (await resp.json())["code"] == "agent_signs_own_records"
    resp = await client.post(f"{WF}/tasks", json={"key": "k"}, headers=carol.headers)
    assert resp.status == 422 and (await resp.json())["code"] == "agent_signs_own_records"


async def test_signed_message_and_forged_ones(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    carol = await self_signer(node, "carol")
    bob = await make_agent("bob")
    body = {
        "kind": "message",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": carol.agent_id,
        "created_at": format_ms(node.now_ms()),
        "to_agent": bob.agent_id,
        "message_type": "ping",
        "body": "hello",
        "payload": {},
        "dependency_ids": [],
        "tags": sorted([carol.agent_id, bob.agent_id]),
        "authority": "raw",
        "truth_state": "fact",
        "confidence": 1,
    }
    status, msg = await submit(client, carol, "/messages", records.sign(body, carol.key))
    assert status == 201 and msg["from_agent"] == carol.agent_id and msg["to_agent"] == bob.agent_id
    for bad, code, field in (
        ({**body, "tags": [carol.agent_id]}, "record_schema", "$.record.tags"),  # the recipient must be a tag
        ({**body, "truth_state": "hypothesis"}, "record_schema", "$.record.truth_state"),
        ({**body, "confidence": 0.5}, "record_schema", "$.record.confidence"),
    ):
        status, problem = await submit(client, carol, "/messages", records.sign(bad, carol.key))
        assert status == 422 and problem["code"] == code and problem["field"] == field, problem
    tampered = {**records.sign(body, carol.key), "body": "changed after signing"}
    status, problem = await submit(client, carol, "/messages", tampered)
    assert status == 422 and problem["code"] == "record_bad_signature"
    someone = keys.SigningKey.generate()
    forged = records.sign({**body, "author_id": someone.did, "tags": sorted([someone.did, bob.agent_id])}, someone)
    status, problem = await submit(client, carol, "/messages", forged)
    assert status == 403
    assert await count_records(node, "message") == 1


async def test_lease_grant_records_cannot_be_submitted_by_agents(client: TestClient, node: Node) -> None:
    carol = await self_signer(node, "carol")
    now = node.now_ms()
    await submit(client, carol, "/tasks", task_event(carol.key, now, "declare", node_id=node.node_id, title="J"))
    grant = task_event(carol.key, now + 1, "lease", holder=carol.agent_id, expires_at=format_ms(now + 60_000))
    status, problem = await submit(client, carol, "/tasks", grant)
    assert status == 422 and problem["code"] == "wrong_event"
    bad = task_event(carol.key, now + 1, "lease", holder=carol.agent_id, expires_at=format_ms(now))
    status, problem = await submit(client, carol, "/tasks", bad)
    assert status == 422 and problem["field"] == "$.record.expires_at", problem


async def test_a_signed_finish_names_the_lease_its_author_holds(client: TestClient, node: Node) -> None:
    """Unnamed, the lease would stay live on a done task (the fold ends only the lease a record names), and
    its holder would block the planner for the rest of it."""
    carol = await self_signer(node, "carol")
    now = node.now_ms()
    await submit(client, carol, "/tasks", task_event(carol.key, now, "declare", node_id=node.node_id, title="J"))
    status, leased = await lease(client, carol.creds, "signed-job", seconds=600)
    assert status == 201
    for event in ("complete", "release"):
        unnamed = task_event(carol.key, now + 5, event)
        status, problem = await submit(client, carol, f"/tasks/signed-job/{event}", unnamed)
        assert (status, problem["code"], problem["field"]) == (422, "lease_required", "$.record.lease"), problem
    assert await count_records(node, "task_event") == 2  # the declaration and the grant
    named = task_event(carol.key, now + 5, "complete", lease=leased["lease"]["lease_id"])
    status, done = await submit(client, carol, "/tasks/signed-job/complete", named)
    assert status == 200 and done["status"] == "done" and done["lease"] is None
    # completing a done task again, holding nothing and merging nothing, changes nothing: nothing is stored
    status, again = await submit(
        client, carol, "/tasks/signed-job/complete", task_event(carol.key, now + 6, "complete")
    )
    assert status == 200 and again == done
    same = task_event(carol.key, now + 7, "complete", checkpoint={})  # a patch that changes nothing
    status, again = await submit(client, carol, "/tasks/signed-job/complete", same)
    assert status == 200 and again == done
    assert await count_records(node, "task_event") == 3


async def test_signed_finish_errors_name_the_record(client: TestClient, node: Node) -> None:
    carol = await self_signer(node, "carol")
    now = node.now_ms()
    await submit(client, carol, "/tasks", task_event(carol.key, now, "declare", node_id=node.node_id, title="J"))
    other = {**task_event(carol.key, now + 5, "release", lease="0" * 64), "task_key": "other"}
    del other["signature"]
    status, problem = await submit(client, carol, "/tasks/signed-job/release", records.sign(other, carol.key))
    assert (status, problem["field"]) == (422, "$.record.task_key"), problem  # before any lease check
    big = "x" * 30_000
    halves = [task_event(carol.key, now + 5 + i, "complete", checkpoint={f"k{i}": big}) for i in range(3)]
    statuses = [await submit(client, carol, "/tasks/signed-job/complete", h) for h in halves]
    refused = [p for s, p in statuses if s != 200]
    assert refused and refused[0]["code"] == "checkpoint_too_large" and refused[0]["field"] == "$.record.checkpoint"
