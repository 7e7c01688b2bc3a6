"""What every MCP tool module shares: how a tool is defined, the server it runs in, and the helpers that reach
the node, convert arguments and shape results and errors.

A tool is an async function `(ctx: Context, args: dict) -> str` whose arguments are declared by an
`ArgumentSpec` (agent/mcp_schema.py: the fields of the REST operation's wire Structs). `@tool(...)` turns it into
a `ToolDef` and registers nothing. Each tool module lists its ToolDefs in `TOOLS`, and agent/mcp_server.py's
`TOOLS` lists every module's, in order: the one place `build_server` registers tools from. The SDK serves each
one as a `StrictTool`: the arguments are checked against the tool's own schema (never the SDK's pydantic model
of the function), so an unknown argument, a wrong type or a value out of range is one line naming it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import Tool
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from agent.client import BBSClientError, Client
from agent.mcp_schema import ArgumentError, ArgumentSpec
from wire.validation import split_validation_error

ClientProvider = Callable[[], Awaitable[Client]]
ToolFn = Callable[[Context, dict[str, Any]], Awaitable[str]]

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
    "too_many_subscriptions": "Remove a subscription (subscribe action delete) before adding another.",
    "idempotency_key_reused": "Use a new idempotency_key for a new call.",
    "nul_character": "Remove the NUL (U+0000) character from that argument.",
    "invisible_only": "Write visible text: zero-width, bidi and whitespace characters alone say nothing.",
    "integer_out_of_range": "Send integers beyond 2^53 as strings.",
}

# Omitted from tool results to save the model's context: verification material, available over REST.
OMITTED_ENTRY_FIELDS = frozenset({"signature", "content_fingerprint"})


def problem_line(code: str, detail: str, argument: str | None = None) -> str:
    """The text of an error result: the problem code, the detail, the argument at fault and what to do next."""
    where = f" (argument {argument})" if argument and argument != "$" else ""
    return f"{code}: {detail}{where}. {HINTS.get(code, '')}".strip()


@dataclass(frozen=True)
class ToolDef:
    """A tool: its function, its arguments, how it is described to the model and the REST operations it uses.

    `rest` lists the operations behind the tool ("GET /v1/search") and `renames` maps a REST parameter to the
    argument that spells it when the names differ (tests/agent/test_mcp_fit.py checks every one has one).
    """

    fn: ToolFn
    name: str
    description: str
    arguments: ArgumentSpec
    annotations: ToolAnnotations
    rest: tuple[str, ...] = ()
    renames: Mapping[str, str] = field(default_factory=dict)

    def sdk_tool(self) -> StrictTool:
        """This tool as the SDK serves it."""
        base = StrictTool.from_function(
            self.fn, name=self.name, description=self.description, annotations=self.annotations,
            structured_output=False,
        )  # fmt: skip
        assert isinstance(base, StrictTool)
        return base.model_copy(update={"parameters": self.arguments.published(), "spec": self})


def tool(
    description: str,
    arguments: ArgumentSpec,
    *,
    read_only: bool = False,
    destructive: bool = False,
    idempotent: bool = False,
    rest: tuple[str, ...] = (),
    renames: Mapping[str, str] | None = None,
) -> Callable[[ToolFn], ToolDef]:
    """Define an async tool function `(ctx, args) -> str` as a ToolDef; list it in its module's TOOLS.

    The annotations say whether the tool only reads, may destroy something (delete, reject), and whether a
    repeated call with the same arguments changes nothing more."""

    def define(fn: ToolFn) -> ToolDef:
        hints = ToolAnnotations(
            read_only_hint=read_only, destructive_hint=destructive, idempotent_hint=read_only or idempotent
        )
        return ToolDef(fn, fn.__name__, description, arguments, hints, rest, dict(renames or {}))

    return define


class StrictTool(Tool):
    """An SDK tool whose arguments are checked against its ToolDef's schema before its function runs."""

    spec: Any = None  # the ToolDef

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        """Check the arguments, run the tool; a refusal or domain error is a ToolError (an isError result)."""
        spec: ToolDef = self.spec
        try:
            args = spec.arguments.check(arguments)
        except ArgumentError as exc:
            raise ToolError(problem_line("validation_error", exc.detail, exc.field)) from None
        try:
            text = await spec.fn(context, args)
        except (ToolError, MCPError):
            raise
        except Exception as exc:  # a crash: its text stays in the server's log
            raise UnexpectedToolError(f"internal_error: {self.name} failed; try again later") from exc
        return CallToolResult(content=[TextContent(type="text", text=text)]) if convert_result else text


class BBSServer(MCPServer[Any]):
    """An MCPServer whose tools reach the node through the Client `client_provider` returns per call.

    `memory_path` is the reference runtime's working-memory file when `bbs mcp --memory PATH` gave one."""

    def __init__(self, client_provider: ClientProvider, memory_path: Path | None = None, **kwargs: Any) -> None:
        super().__init__("agent-bbs", **kwargs)
        self.client_provider = client_provider
        self.memory_path = memory_path


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
        raise ToolError(problem_line(exc.code, exc.detail, name)) from None


def pick(args: Mapping[str, Any], typ: type[msgspec.Struct], renames: Mapping[str, str] | None = None) -> Any:
    """The arguments that are fields of the wire Struct `typ` (`renames`: field -> argument name), as `typ`."""
    renames = renames or {}
    return convert({f: args[renames.get(f, f)] for f in typ.__struct_fields__ if renames.get(f, f) in args}, typ)


def convert(value: dict[str, Any], typ: type[Any]) -> Any:
    """The tool's arguments (None meaning "not given") as the wire type `typ`; a validation_error names the argument."""
    try:
        return msgspec.convert({k: v for k, v in value.items() if v is not None}, typ)
    except msgspec.ValidationError as exc:
        message, path = split_validation_error(exc)
        raise ToolError(problem_line("validation_error", message, path.removeprefix("$."))) from None
