"""The working-memory tool, and the review tool's list, approve and reject (agent/default_mode_tools.py), through the
real MCP SDK client against a real node. The tool list's budget is pinned in test_mcp_fit.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp.test_utils import TestClient

from agent.runtime.memory import WorkingMemory
from tests.agent.mcp_inprocess import failed, mcp_for, ok
from tests.conftest import AgentCreds
from wire.api import Envelope

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
DM = "/v1/default-mode"


def _envelope(nid: int, tier: int) -> Envelope:
    return Envelope(nid, nid, f"{nid:064x}", "did:key:zAuthor", "2026-01-01T00:00:00Z", "finding", "inform",
                    ["home"], 0.5, False, [], tier, "subscription", 1)  # fmt: skip


def _memory(path: Path) -> None:
    """A working-memory file as the reference runtime leaves it."""
    memory = WorkingMemory(path)
    memory.record("decision", action="post", reason="worth sharing")
    memory.record("action", op="post", ok=True)
    memory.enqueue([_envelope(1, 2), _envelope(2, 1)], {1: 2, 2: 1})
    memory.set_scores({1: (0.9, {"tags": 1.0}), 2: (0.1, {})})
    memory.note_entry("b" * 64, [], "the boiler was serviced", ["home"])
    memory.note_entry("c" * 64, ["b" * 64], "service booked for March", ["home"])
    memory.close()


async def test_working_memory_reads_what_the_runtime_keeps(
    client: TestClient, make_agent: MakeAgent, tmp_path: Path
) -> None:
    alice = await make_agent("alice")
    path = tmp_path / "memory.sqlite"
    _memory(path)
    async with mcp_for(client, alice.api_key, path) as session:
        kept = ok(await session.call_tool("working_memory", {}))
        assert [e["kind"] for e in kept["events"]] == ["decision", "action"]
        assert [p["notification_id"] for p in kept["pending"]] == [2, 1]  # tier 1 first, as the runtime reads
        (thread,) = kept["summaries"]
        assert thread["thread_id"] == "b" * 64 and "March" in thread["summary"] and kept["threads"] == 1
        only = ok(await session.call_tool("working_memory", {"event_kind": "action", "limit": 1}))
        assert [e["kind"] for e in only["events"]] == ["action"] and len(only["pending"]) == 1
        assert "limit" in failed(await session.call_tool("working_memory", {"limit": 0}))
    # the runtime's own reading sees the access the tool made
    memory = WorkingMemory(path)
    try:
        assert memory.conn.execute("SELECT access_count FROM thread_summaries").fetchone()[0] == 2
    finally:
        memory.close()


async def test_working_memory_needs_the_memory_file(client: TestClient, make_agent: MakeAgent, tmp_path: Path) -> None:
    alice = await make_agent("alice")
    async with mcp_for(client, alice.api_key) as session:
        assert "memory_not_configured" in failed(await session.call_tool("working_memory", {}))
    async with mcp_for(client, alice.api_key, tmp_path / "gone.sqlite") as session:
        assert "memory_not_found" in failed(await session.call_tool("working_memory", {}))
    assert not (tmp_path / "gone.sqlite").exists()  # never created by reading


async def test_review_lists_approves_and_rejects_as_rest_does(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    resp = await client.post(
        f"{DM}/reflect-session",
        json={"transcript": "We decided to service the boiler yearly.\nTODO next: book the boiler service."},
        headers=alice.headers,
    )
    first, second = [c["id"] for c in (await resp.json())["candidates"]]
    async with mcp_for(client, bob.api_key) as session, mcp_for(client, alice.api_key) as own:
        listed = ok(await session.call_tool("review", {"status": ["needs_review"], "limit": 1}))
        assert len(listed["candidates"]) == 1 and listed["next_offset"] == 1
        approved = ok(await session.call_tool("review", {"action": "approve", "candidate_id": first, "note": "ok"}))
        assert approved["status"] == "approved" and approved["decided_by"] == bob.agent_id
        rejected = ok(await session.call_tool("review", {"action": "reject", "candidate_id": second}))
        assert rejected["status"] == "rejected"
        rest = await (await client.get(f"{DM}/candidates/{second}", headers=bob.headers)).json()
        assert rest == rejected | {"payload": rest["payload"]}
        assert "candidate_rejected" in failed(await session.call_tool("review", {"action": "approve",
                                                                                  "candidate_id": second}))  # fmt: skip
        assert "candidate_not_found" in failed(await session.call_tool("review", {"action": "reject",
                                                                                   "candidate_id": 999}))  # fmt: skip
        assert "candidate_id" in failed(await session.call_tool("review", {"action": "approve"}))
        assert "own_candidate" in failed(await own.call_tool("review", {"action": "reject", "candidate_id": first}))
