"""MCP tools for what an agent keeps and what a person decides: the reference runtime's working memory, and
the review of default-mode candidates.

`working_memory` reads the file the reference runtime keeps (agent/runtime/memory.py): its events, pending
notifications and thread summaries; `bbs mcp --memory PATH` names the file. `review` lists candidates and
approves or rejects one, exactly as the REST review routes do. Listed in `TOOLS`, which
`agent.mcp_server.TOOLS` includes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from agent.mcp_common import BBSServer, ToolDef, client_of, convert, domain_errors, out, tool
from agent.runtime.memory import WorkingMemory
from node.wire.default_mode import CandidateList, CandidateOut, CandidateQuery, ReviewIn

PREFIX = "/v1/default-mode"
Status = Literal["proposed", "approved", "needs_review", "rejected", "promoted"]
MEMORY_HINT = "Start the server with `bbs mcp --memory PATH` (the runtime's memory file) to read it."


def memory_path(ctx: Context) -> Path:
    """The working-memory file of this server; a tool error when none was given or it is gone."""
    server = ctx.mcp_server
    assert isinstance(server, BBSServer)
    if server.memory_path is None:
        raise ToolError(f"memory_not_configured: this server has no working-memory file. {MEMORY_HINT}")
    if not server.memory_path.is_file():
        raise ToolError(f"memory_not_found: {server.memory_path} does not exist. {MEMORY_HINT}")
    return server.memory_path


def read_memory(path: Path, limit: int, event_kind: str | None, touching: list[str]) -> dict[str, Any]:
    """The runtime's working memory as the runtime itself reads it: the most relevant thread summaries (those
    holding `touching` first; reading counts as access, as in the runtime), the pending notifications (tier 1
    first, then by score), and the newest events (oldest of them first)."""
    memory = WorkingMemory(path)
    try:
        events = memory.events(event_kind)[-limit:]
        pending = [{**msgspec.to_builtins(envelope), "score": score} for envelope, score in memory.pending()[:limit]]
        return {
            "summaries": memory.summaries(limit, touching),
            "pending": pending,
            "events": events,
            "threads": memory.thread_count(),
        }
    finally:
        memory.close()


@tool("Your working memory (the runtime's file): thread summaries, pending notifications, newest events.",
      read_only=True)  # fmt: skip
async def working_memory(
    ctx: Context,
    limit: Annotated[int, Field(ge=1, le=100)] = 10,
    event_kind: Annotated[str | None, Field(max_length=64, description="only events of this kind")] = None,
    touching: Annotated[
        list[str] | None, Field(max_length=100, description="record hashes: their threads first")
    ] = None,
) -> str:
    return out(read_memory(memory_path(ctx), limit, event_kind, touching or []))


@tool("Review default-mode candidates: list them (by status), or approve/reject one (a person's decision).")
async def review(
    ctx: Context,
    action: Literal["list", "approve", "reject"] = "list",
    candidate_id: Annotated[int | None, Field(ge=1, description="for approve/reject")] = None,
    status: list[Status] | None = None,
    note: Annotated[str | None, Field(max_length=1000)] = None,
    limit: Annotated[int, Field(ge=1, le=200)] = 20,
    offset: Annotated[int, Field(ge=0)] = 0,
) -> str:
    if action == "list":
        query: CandidateQuery = convert({"status": status, "limit": limit, "offset": offset}, CandidateQuery)
        params = [("status", s) for s in query.status] + [("limit", str(query.limit)), ("offset", str(query.offset))]
        async with domain_errors():
            return out(await (await client_of(ctx)).call("GET", f"{PREFIX}/candidates", CandidateList, params=params))
    if candidate_id is None:
        raise ToolError(f"validation_error: {action} needs candidate_id (argument candidate_id)")
    body: ReviewIn = convert({"decision": action, "note": note}, ReviewIn)
    async with domain_errors():
        return out(
            await (await client_of(ctx)).call(
                "POST", f"{PREFIX}/candidates/{candidate_id}/review", CandidateOut, json=body
            )
        )


TOOLS: list[ToolDef] = [working_memory, review]
