"""Governed-memory tools: reflect -> critic -> promote -> consolidate, over remote MCP and from a key-holding client."""

from __future__ import annotations

import json

import pytest
from aiohttp.test_utils import TestClient

from agent.client import Client
from identity import keys, records
from node.agents import service as agents
from node.agents.portable import import_identity
from node.service import Node
from tests.agent.conftest import ServedNode
from tests.agent.test_client import base
from tests.agent.test_mcp_http import ok, remote_session

pytestmark = pytest.mark.remote_mcp  # served_node with --mcp-port (tests/agent/conftest.py)

TRANSCRIPT = "\n".join(
    [
        "We decided to choose SQLite in WAL mode for the node store, remember that.",
        "todo: next we must benchmark the blocker on the ingest path before release.",
        "ok thanks",
    ]
)


@pytest.mark.slow
async def test_reflect_critic_promote_consolidate_over_mcp(served_node: ServedNode) -> None:
    alice = served_node.create_agent("alice")
    async with (
        Client(served_node.url, api_key=alice["api_key"]) as rest,
        remote_session(served_node, alice["api_key"]) as session,
    ):
        evidence = (await rest.post("SQLite WAL lets readers run beside the writer")).record_hash
        reflected = ok(await session.call_tool("reflect", {"transcript": TRANSCRIPT, "evidence_refs": [evidence]}))
        assert reflected["lines_scored"] == 2 and reflected["candidates"]
        kinds = {c["kind"] for c in reflected["candidates"]}
        assert "decision" in kinds
        # Nothing reaches ordinary memory before a promote.
        assert (await rest.search(q="WAL mode node store")).entries == []

        ids = [c["id"] for c in reflected["candidates"]]
        reviewed = ok(await session.call_tool("review", {"action": "critic", "candidate_ids": ids}))
        assert {c["status"] for c in reviewed["candidates"]} <= {"approved", "needs_review"}

        promoted = ok(await session.call_tool("review", {"action": "promote", "candidate_id": ids[0]}))
        entry = promoted["entry"]
        assert entry["authority"] == "derived" and entry["author_id"] == alice["agent_id"]
        assert promoted["candidate"]["status"] == "promoted"
        # a promote of a promoted candidate names the entry it became; a retry with the call's key is the answer
        twice = await session.call_tool("review", {"action": "promote", "candidate_id": ids[0]})
        assert twice.is_error and "candidate_not_promotable" in twice.content[0].text  # type: ignore[union-attr]
        assert entry["record_hash"] in twice.content[0].text  # type: ignore[union-attr]
        keyed = {"action": "promote", "candidate_id": ids[1], "idempotency_key": "p-1"}
        first = ok(await session.call_tool("review", keyed))
        again = ok(await session.call_tool("review", keyed))
        assert again["entry"] == first["entry"] and again["created"] is False

        summary = ok(
            await session.call_tool("reflect", {"action": "consolidate", "limit": 10, "idempotency_key": "sum-1"})
        )
        assert summary["status"] == "needs_review" and summary["truth_state"] == "hypothesis"
        # a tool call retried with its key stores nothing more and answers as the first time
        again = ok(
            await session.call_tool("reflect", {"action": "consolidate", "limit": 10, "idempotency_key": "sum-1"})
        )
        assert again == summary
        retried = ok(await session.call_tool("reflect", {"transcript": TRANSCRIPT, "idempotency_key": "r-1"}))
        assert ok(await session.call_tool("reflect", {"transcript": TRANSCRIPT, "idempotency_key": "r-1"})) == retried
        listed = await rest.call("GET", "/v1/default-mode/candidates", dict)
        assert len(listed["candidates"]) == len(ids) + 1 + len(retried["candidates"])

        bad = await session.call_tool("review", {"action": "promote", "candidate_id": 999_999})
        assert bad.is_error


async def test_key_holding_client_promotes_by_signing_the_draft(client: TestClient, node: Node) -> None:
    key = keys.SigningKey.generate()
    await import_identity(node, "roamer", key, agents.identity_record(key, "Roamer", "", node.node_id))
    async with Client(base(client), signing_key=key) as c:
        evidence = (await c.post("Evidence for the memory")).record_hash
        reflected = await c.call(
            "POST",
            "/v1/default-mode/reflect-session",
            dict,
            json={"transcript": TRANSCRIPT, "evidence_refs": [evidence]},
        )
        candidate = reflected["candidates"][0]["id"]
        promoted = await c.promote_candidate(candidate)
        assert promoted["entry"]["author_id"] == key.did and promoted["created"] is True
    body = await node.db.read(
        lambda conn: conn.execute(
            "SELECT body FROM records WHERE hash = ?", (promoted["entry"]["record_hash"],)
        ).fetchone()[0]
    )
    _, decoded = records.check(json.loads(body))
    assert decoded.authority == "derived" and decoded.author_id == key.did


@pytest.mark.slow
async def test_a_simulation_is_approved_and_promoted_as_a_simulation_over_mcp(served_node: ServedNode) -> None:
    alice = served_node.create_agent("alice")
    async with (
        Client(served_node.url, api_key=alice["api_key"]) as rest,
        remote_session(served_node, alice["api_key"]) as session,
    ):
        evidence = (await rest.post("The node's disk is 91% full")).record_hash
        goal = {"goal": "move the node to a bigger disk", "evidence_refs": [evidence]}
        made = await rest.call("POST", "/v1/default-mode/simulate-future", dict, json=goal)
        cid = made["candidate"]["id"]
        (reviewed,) = ok(await session.call_tool("review", {"action": "critic", "candidate_ids": [cid]}))["candidates"]
        assert (reviewed["status"], reviewed["truth_state"], reviewed["synthetic"], reviewed["risk_flag"]) == (
            "approved", "simulation", True, False,
        )  # fmt: skip
        promoted = ok(await session.call_tool("review", {"action": "promote", "candidate_id": cid}))
        assert promoted["entry"]["truth_state"] == "simulation"
        # an ordinary search leaves it out, over MCP as over REST; asked for, it is there
        assert ok(await session.call_tool("search", {"q": "bigger disk"}))["entries"] == []
        shown = await rest.search(q="bigger disk", include_synthetic=True)
        assert [e.record_hash for e in shown.entries] == [promoted["entry"]["record_hash"]]
