"""What every MCP tool module shares: how a tool is defined, the server it runs in, and the helpers that reach
the node, convert arguments and shape results and errors.

A tool is an async function taking `ctx: Context` first and returning text; `@tool(...)` turns it into a
`ToolDef` and registers nothing. Each tool module lists its ToolDefs in `TOOLS`, and agent/mcp_server.py's
`TOOLS` lists every module's, in order: the one place `build_server` registers tools from.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import Tool as MCPTool

from agent.client import BBSClientError, Client
from node.wire.validation import split_validation_error

ClientProvider = Callable[[], Awaitable[Client]]

# Hints appended to error results, by problem code: what the agent should do next.
HINTS: dict[str, str] = {
    "entry_not_found": "Use search to find the entry's id.",
    "target_not_found": "Use search to find the entry's id, or give its record hash.",
    "source_not_found": "Use search to find the entry's id.",
    "validation_error": "Fix that argument and call again.",
    "agent_signs_own_records": "This agent holds its own key: connect through `bbs mcp --identity FILE`.",
    "unauthorized": "The API key or identity is not accepted by this node.",
    "unreachable": "The node is not answering; try again shortly.",
    "retract_not_own": "You can only retract your own entries.",
    "retract_without_target": "Add a supersedes link to the entry you withdraw.",
    "too_many_subscriptions": "Remove a subscription before adding another.",
    "idempotency_key_reused": "Use a new idempotency_key for a new post.",
    "nul_character": "Remove the NUL (U+0000) character from that argument.",
    "invisible_only": "Write visible text: zero-width, bidi and whitespace characters alone say nothing.",
    "integer_out_of_range": "Send integers beyond 2^53 as strings.",
}

# Omitted from tool results to save the model's context: verification material, available over REST.
OMITTED_ENTRY_FIELDS = frozenset({"signature", "content_fingerprint"})


@dataclass(frozen=True)
class ToolDef:
    """A tool: its function (taking `ctx` first) and how it is described to the model."""

    fn: Callable[..., Awaitable[str]]
    description: str
    read_only: bool


def tool(description: str, *, read_only: bool = False) -> Callable[[Callable[..., Awaitable[str]]], ToolDef]:
    """Define an async tool function `(ctx: Context, ...) -> str` as a ToolDef; list it in its module's TOOLS."""

    def define(fn: Callable[..., Awaitable[str]]) -> ToolDef:
        return ToolDef(fn, description, read_only)

    return define


class BBSServer(MCPServer[Any]):
    """An MCPServer whose tools reach the node through the Client `client_provider` returns per call.

    `memory_path` is the reference runtime's working-memory file when `bbs mcp --memory PATH` gave one."""

    def __init__(self, client_provider: ClientProvider, memory_path: Path | None = None, **kwargs: Any) -> None:
        super().__init__("agent-bbs", **kwargs)
        self.client_provider = client_provider
        self.memory_path = memory_path

    async def list_tools(self) -> list[MCPTool]:
        """The tools, their input schemas without the titles pydantic derives from argument names (they repeat
        the name and cost the model's context: tools/list stays under 16 KB)."""
        return [t.model_copy(update={"input_schema": untitled(t.input_schema)}) for t in await super().list_tools()]


def untitled(schema: Any) -> Any:
    """A JSON schema without its `title` keywords (a property named "title" is a schema, not a string: kept)."""
    if isinstance(schema, dict):
        return {k: untitled(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(schema, list):
        return [untitled(v) for v in schema]
    return schema


async def client_of(ctx: Context) -> Client:
    """The Client of this tool call: the one agent's over stdio, the bearer token's over remote MCP."""
    server = ctx.mcp_server
    assert isinstance(server, BBSServer)
    return await server.client_provider()


def lean(value: Any) -> Any:
    """A result as JSON values, without the entry fields an LLM has no use for."""

    def strip(item: Any) -> Any:
        if isinstance(item, dict):
            drop = OMITTED_ENTRY_FIELDS if "record_hash" in item else frozenset()
            return {k: strip(v) for k, v in item.items() if k not in drop}
        if isinstance(item, list):
            return [strip(v) for v in item]
        return item

    return strip(msgspec.to_builtins(value))


def out(value: Any) -> str:
    """A tool's text result: `value` made lean, as JSON."""
    return msgspec.json.encode(lean(value)).decode()


@contextlib.asynccontextmanager
async def domain_errors(arguments: Mapping[str, str] | None = None) -> AsyncIterator[None]:
    """Turn client errors into tool errors an agent can act on (never a crash, never a secret).

    `arguments` renames the node's field names to the tool's argument names where they differ."""
    try:
        yield
    except BBSClientError as exc:
        name = exc.field.removeprefix("$.") if exc.field else ""
        name = (arguments or {}).get(name, name)
        where = f" (argument {name})" if name and name != "$" else ""
        hint = HINTS.get(exc.code, "")
        raise ToolError(f"{exc.code}: {exc.detail}{where}. {hint}".strip()) from None


def convert(value: dict[str, Any], typ: type[Any]) -> Any:
    """The tool's arguments (None meaning "not given") as the wire type `typ`; a validation_error names the argument."""
    try:
        return msgspec.convert({k: v for k, v in value.items() if v is not None}, typ)
    except msgspec.ValidationError as exc:
        message, path = split_validation_error(exc)
        raise ToolError(f"validation_error: {message} (argument {path.removeprefix('$.')})") from None
