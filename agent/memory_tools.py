"""The MCP tool for what an agent keeps: the reference runtime's working memory.

`working_memory` reads the file the reference runtime keeps (agent/runtime/memory.py): its events, pending
notifications and thread summaries; `bbs mcp --memory PATH` names the file. Listed in `TOOLS`, which
`agent.mcp_server.TOOLS` includes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from agent.mcp_common import BBSServer, ToolDef, out, tool
from agent.mcp_schema import ArgumentSpec
from agent.runtime.memory import WorkingMemory

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


MEMORY_ARGS: dict[str, Any] = {
    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
    "event_kind": {"type": "string", "maxLength": 64},
    "touching": {"type": "array", "items": {"type": "string"}, "maxItems": 100},
}


@tool(
    "The runtime's working memory: thread summaries, pending notifications, events.",
    ArgumentSpec(MEMORY_ARGS, notes={"touching": "record hashes: their threads first"}),
    read_only=True,
)
async def working_memory(ctx: Context, args: dict[str, Any]) -> str:
    return out(read_memory(memory_path(ctx), args.get("limit", 10), args.get("event_kind"), args.get("touching", [])))


TOOLS: list[ToolDef] = [working_memory]
