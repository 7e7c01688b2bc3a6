"""MCP tools for governed memory: reflect, critic, promote, consolidate.

Their output stays a candidate (node-local, hidden from read and search) until an explicit promote.
Listed in `TOOLS`, which `agent.mcp_server.TOOLS` includes.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from pydantic import Field

from agent.mcp_common import ToolDef, client_of, convert, domain_errors, out, tool
from node.wire.default_mode import (
    CandidateOut,
    ConsolidateIn,
    CriticIn,
    CriticResult,
    ReflectIn,
    ReflectResult,
)

PREFIX = "/v1/default-mode"
Evidence = Annotated[list[str] | None, Field(description="record hashes the memory rests on")]
RetryKey = Annotated[str | None, Field(description="reuse when retrying the same call: its candidates are stored once")]


def _once(key: str | None) -> str:
    """The call's idempotency key: the caller's, or a fresh one the client reuses across its own retries."""
    return key or uuid.uuid4().hex


@tool("Reflect over a transcript, or a session (entries tagged session:<session_id> and/or the bus messages of "
      "project, optionally since/until): salient lines become reviewed candidates, not memories.")  # fmt: skip
async def reflect(
    ctx: Context,
    transcript: str | None = None,
    session_id: str | None = None,
    project: str | None = None,
    since: Annotated[str | None, Field(description="ISO 8601")] = None,
    until: Annotated[str | None, Field(description="ISO 8601")] = None,
    evidence_refs: Evidence = None,
    goal_relevance: Annotated[float, Field(ge=0, le=1)] = 0.0,
    evidence_strength: Annotated[float, Field(ge=0, le=1)] = 0.0,
    idempotency_key: RetryKey = None,
) -> str:
    body = convert(
        {
            "transcript": transcript,
            "session_id": session_id,
            "project": project,
            "since": since,
            "until": until,
            "evidence_refs": evidence_refs,
            "goal_relevance": goal_relevance,
            "evidence_strength": evidence_strength,
        },
        ReflectIn,
    )
    async with domain_errors():
        result = await (await client_of(ctx)).call(
            "POST", f"{PREFIX}/reflect-session", ReflectResult, json=body, idempotency_key=_once(idempotency_key)
        )
        return out({"candidates": result.candidates, "lines_scored": result.lines_scored, "dropped": result.dropped})


@tool("Run the critic over candidates by id (none = every proposed one): risky or unevidenced -> needs_review.")
async def critic(ctx: Context, candidate_ids: list[int] | None = None) -> str:
    body = convert({"candidate_ids": candidate_ids}, CriticIn)
    async with domain_errors():
        return out(await (await client_of(ctx)).call("POST", f"{PREFIX}/critic", CriticResult, json=body))


@tool("Promote an approved or needs_review candidate into a signed entry you author (authority derived).")
async def promote(
    ctx: Context, candidate_id: Annotated[int, Field(ge=1)], scope: Literal["federation", "local"] = "federation"
) -> str:
    async with domain_errors():
        return out(await (await client_of(ctx)).promote_candidate(candidate_id, scope))


@tool("Summarise recent entries into one needs_review hypothesis candidate citing every entry it read.")
async def consolidate(
    ctx: Context,
    limit: Annotated[int, Field(ge=1, le=100)] = 50,
    tags: list[str] | None = None,
    since: Annotated[str | None, Field(description="ISO 8601")] = None,
    idempotency_key: RetryKey = None,
) -> str:
    body: Any = convert({"limit": limit, "tags": tags, "since": since}, ConsolidateIn)
    async with domain_errors():
        return out(
            await (await client_of(ctx)).call(
                "POST", f"{PREFIX}/consolidate", CandidateOut, json=body, idempotency_key=_once(idempotency_key)
            )
        )


TOOLS: list[ToolDef] = [reflect, critic, promote, consolidate]
