"""Model replies parsed into operations (malformed output reported, never raised) and executed on a real node."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from agent.client import Client
from agent.runtime.actions import Ack, Executor, Link, Post, idempotency_key, parse_reply
from agent.runtime.memory import WorkingMemory
from identity import keys
from node.agents import service as agents
from node.agents.portable import import_identity
from node.service import Node
from tests.conftest import AgentCreds

Factory = Callable[[str], Awaitable[AgentCreds]]


def base(client: TestClient) -> str:
    return str(client.make_url("")).rstrip("/")


def test_well_formed_reply_in_a_fence_with_prose() -> None:
    reply = 'Sure.\n```json\n{"actions": [{"op": "post", "content": "41%"}, {"op": "ack", "request": "3"}]}\n```'
    parsed = parse_reply(reply)
    assert parsed.errors == []
    assert parsed.actions == [Post(content="41%"), Ack(request="3")]


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("I think we should post something.", "$: the reply is not a JSON object"),
        ("", "$: the reply is not a JSON object"),
        ("[1, 2]", '$: expected an object with an "actions" list'),
        ('{"actions": {"op": "post"}}', '$: expected an object with an "actions" list'),
        ('{"action": []}', '$: expected an object with an "actions" list'),
        ('{"actions": [{"op": "delete", "id": "3"}]}', "$.actions[0].op: expected one of"),
        ('{"actions": ["post"]}', "$.actions[0].op: expected one of"),
        ('{"actions": [{"op": "post"}]}', "$.actions[0].content: Object missing required field `content`"),
        ('{"actions": [{"op": "post", "content": "x", "confidence": 2}]}', "$.actions[0].confidence:"),
        (
            '{"actions": [{"op": "post", "content": "x", "colour": "red"}]}',
            "$.actions[0].colour: Object contains unknown",
        ),
        ('{"actions": [{"op": "link", "source": "1", "target": "2", "link_type": "likes"}]}', "$.actions[0].link_type"),
        (
            '{"actions": [{"op": "link", "source": "1", "target": "2", "link_type": "retracted_by"}]}',
            "$.actions[0].link",
        ),
        ('{"actions": [{"op": "lease_task", "task": "t", "seconds": 5}]}', "$.actions[0].seconds"),
        (
            '{"actions": [{"op": "decline", "request": "3"}]}',
            "$.actions[0].reason: Object missing required field `reason`",
        ),
    ],
)
def test_malformed_output_is_reported_not_raised(reply: str, error: str) -> None:
    parsed = parse_reply(reply)
    assert parsed.actions == []
    assert len(parsed.errors) == 1 and parsed.errors[0].startswith(error), parsed.errors


def test_good_actions_survive_beside_bad_ones_and_the_count_is_bounded() -> None:
    items: list[dict[str, Any]] = [
        {"op": "post"},
        {"op": "link", "source": "1", "target": "2", "link_type": "supports"},
    ]
    parsed = parse_reply(json.dumps({"actions": items}))
    assert parsed.actions == [Link(source="1", target="2", link_type="supports")] and len(parsed.errors) == 1
    parsed = parse_reply(json.dumps({"actions": [{"op": "post", "content": f"p{i}"} for i in range(40)]}))
    assert len(parsed.actions) == 16 and "only the first 16" in parsed.errors[0]


def test_idempotency_key_is_stable_per_engagement_and_action() -> None:
    post = Post(content="x")
    key = idempotency_key("did:key:z", "immediate:4", 0, post)
    assert key == idempotency_key("did:key:z", "immediate:4", 0, Post(content="x"))
    others = {
        idempotency_key("did:key:z", "immediate:5", 0, post),
        idempotency_key("did:key:z", "immediate:4", 1, post),
        idempotency_key("did:key:z", "immediate:4", 0, Post(content="y")),
        idempotency_key("did:key:y", "immediate:4", 0, post),
    }
    assert key not in others and len(others) == 4 and len(key) <= 128


async def test_executor_runs_records_and_never_duplicates(
    client: TestClient, make_agent: Factory, tmp_path: Path
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    async with Client(base(client), api_key=alice.api_key) as a, Client(base(client), api_key=bob.api_key) as b:
        request = await a.post("Please measure the hit rate", entry_type="task", performative="request")
        await a.call("POST", "/v1/agent-workflows/tasks", dict, json={"key": "measure", "title": "Measure"})
        memory = WorkingMemory(tmp_path / "bob.sqlite")
        executor = Executor(b, memory, bob.agent_id)
        parsed = parse_reply(
            json.dumps(
                {
                    "actions": [
                        {"op": "ack", "request": str(request.id), "note": "On it."},
                        {"op": "lease_task", "task": "measure", "seconds": 600},
                        {
                            "op": "post",
                            "content": "41%",
                            "links": [{"target": str(request.id), "link_type": "responds_to"}],
                        },
                        {"op": "link", "source": str(request.id), "target": "999999", "link_type": "supports"},
                        {"op": "complete_task", "task": "measure", "checkpoint": {"rate": 0.41}},
                        {"op": "decline", "request": str(request.id), "reason": "Only half of it."},
                    ]
                }
            )
        )
        outcomes = await executor.run(parsed.actions, "immediate:1", {})
        assert [(o["op"], o["status"]) for o in outcomes] == [
            ("ack", "ok"),
            ("lease_task", "ok"),
            ("post", "ok"),
            ("link", "failed"),  # an unknown target: recorded, and the rest still ran
            ("complete_task", "ok"),
            ("decline", "ok"),
        ]
        assert outcomes[3]["code"] == "target_not_found" and outcomes[4]["status"] == "ok"
        assert (await a.call("GET", "/v1/agent-workflows/tasks/measure", dict))["status"] == "done"
        ack = (await b.get_entry(str(outcomes[0]["id"]))).entries[0]
        assert ack.performative == "ack" and ack.directed_to == [alice.agent_id]
        assert [a["op"] for a in memory.actions()] == ["ack", "lease_task", "post", "link", "complete_task", "decline"]
        assert memory.own_hashes() == {outcomes[i]["record_hash"] for i in (0, 2, 5)}

        before = (await a.search(author=[bob.agent_id], limit=50)).entries
        again = await executor.run(parsed.actions, "immediate:1", {})  # the same engagement, run again
        assert [o.get("id") for o in again if o["op"] == "post"] == [outcomes[2]["id"]]
        fresh = Executor(b, WorkingMemory(tmp_path / "lost.sqlite"), bob.agent_id)  # memory lost: the node dedups
        replay = await fresh.run(parsed.actions[:1], "immediate:1", {})
        assert replay[0]["id"] == outcomes[0]["id"]
        assert len((await a.search(author=[bob.agent_id], limit=50)).entries) == len(before) == 3
        memory.close()


async def test_acks_reach_synthetic_requests_and_a_missing_one_fails_alone(
    client: TestClient, make_agent: Factory, tmp_path: Path
) -> None:
    """A request that is a simulation entry (hidden from reads by default) is still acked to its author; an
    unknown one is recorded as failed and the actions after it still run (it crashed the tick before)."""
    alice, bob = await make_agent("alice"), await make_agent("bob")
    async with Client(base(client), api_key=alice.api_key) as a, Client(base(client), api_key=bob.api_key) as b:
        simulated = await a.post(
            "What if the cache were twice as big?", entry_type="task", performative="request", truth_state="simulation"
        )
        memory = WorkingMemory(tmp_path / "bob.sqlite")
        parsed = parse_reply(
            json.dumps(
                {
                    "actions": [
                        {"op": "post", "content": "first"},
                        {"op": "ack", "request": str(simulated.id)},
                        {"op": "decline", "request": "999999", "reason": "No such request."},
                        {"op": "post", "content": "after"},
                    ]
                }
            )
        )
        outcomes = await Executor(b, memory, bob.agent_id).run(parsed.actions, "immediate:2", {})
        assert [(o["op"], o["status"]) for o in outcomes] == [
            ("post", "ok"),
            ("ack", "ok"),
            ("decline", "failed"),
            ("post", "ok"),
        ]
        assert outcomes[2]["code"] == "entry_not_found" and outcomes[2]["field"] == "request"
        ack = (await b.get_entry(str(outcomes[1]["id"]))).entries[0]
        assert ack.directed_to == [alice.agent_id]
        assert [x["status"] for x in memory.actions()] == ["ok", "ok", "failed", "ok"]
        memory.close()


async def test_an_agent_holding_its_own_key_leases_and_completes_tasks(
    client: TestClient, make_agent: Factory, node: Node, tmp_path: Path
) -> None:
    alice = await make_agent("alice")
    key = keys.SigningKey.generate()
    await import_identity(node, "roamer", key, agents.identity_record(key, "Roamer", "", node.node_id))
    async with Client(base(client), api_key=alice.api_key) as a, Client(base(client), signing_key=key) as r:
        await a.call("POST", "/v1/agent-workflows/tasks", dict, json={"key": "index", "title": "Index"})
        memory = WorkingMemory(tmp_path / "roamer.sqlite")
        executor = Executor(r, memory, key.did)
        actions = [
            {"op": "lease_task", "task": "index", "seconds": 300},
            {"op": "complete_task", "task": "index", "checkpoint": {"rows": 10}},
        ]
        outcomes = await executor.run(parse_reply(json.dumps({"actions": actions})).actions, "immediate:1", {})
        assert [(o["op"], o["status"], o["task_status"]) for o in outcomes] == [
            ("lease_task", "ok", "processing"),
            ("complete_task", "ok", "done"),
        ]
        memory.close()
    authors = await node.db.read(
        lambda c: [r[0] for r in c.execute("SELECT author_id FROM records WHERE kind = 'task_event'")]
    )
    assert key.did in authors  # the completion was signed by the agent, not by the node
