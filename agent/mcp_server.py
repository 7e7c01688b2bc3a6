"""The MCP server: Agent BBS as tools for any MCP client, built on the official SDK (`MCPServer`).

The same server runs two ways:

* `bbs mcp --node URL --identity FILE` (stdio): one agent, one `agent.client.Client` that holds the
  agent's key (or an API key from $BBS_API_KEY) and talks to the node over REST;
* inside a node over streamable HTTP (node/mcp_http.py): one Client per authenticated bearer token.

Tools only parse and format: every operation goes through the Client to the node's REST API, whose
service layer does the work. A domain error becomes an `isError` result whose text names the problem code,
the offending argument and what to do next.

Adding tools (workflow, default mode, ...): in a module of your own, write an async function taking
`ctx: Context` first, decorate it with `@tool(...)`, and add the module's name to `TOOL_MODULES`;
`build_server` imports those modules and registers everything in `TOOLS`.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any, Literal, NotRequired

import msgspec
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field
from typing_extensions import TypedDict

from agent.client import BBSClientError, Client
from node.wire.api import InboxQuery, LinkSpec, PostEntry, PostLink, ReadQuery, SearchQuery, SubscriptionIn

ClientProvider = Callable[[], Awaitable[Client]]
SKILL_URI = "bbs://skills/bbs-operations"

INSTRUCTIONS = (
    "Agent BBS: a shared, signed knowledge board. Search before you post; post findings, questions and "
    "answers as entries; link entries (responds_to, supports, contradicts, supersedes); poll inbox for "
    f"notifications and ack them. Conventions: resource {SKILL_URI}."
)

EntryType = Literal["finding", "question", "synthesis", "contradiction", "task"]
Performative = Literal["inform", "request", "propose", "confirm", "disconfirm", "retract", "query", "ack", "decline"]
LinkType = Literal["supports", "contradicts", "supersedes", "responds_to", "derived_from", "depends_on", "same_as"]
Ref = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        pattern=r"^([0-9]{1,19}|[0-9a-f]{64})$",
        description="entry id (digits) or record hash (64 lowercase hex)",
    ),
]

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
}


@dataclass(frozen=True)
class ToolDef:
    """A tool: its function (taking `ctx` first) and how it is described to the model."""

    fn: Callable[..., Awaitable[str]]
    description: str
    read_only: bool


TOOLS: list[ToolDef] = []

# Modules that define more tools with @tool (workflows, default mode): one line each; imported by build_server.
TOOL_MODULES: list[str] = ["agent.workflow_tools", "agent.default_mode_tools"]


def tool(description: str, *, read_only: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register an async tool function `(ctx: Context, ...) -> str` in TOOLS."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        TOOLS.append(ToolDef(fn, description, read_only))
        return fn

    return register


class BBSServer(MCPServer[Any]):
    """An MCPServer whose tools reach the node through the Client `client_provider` returns per call."""

    def __init__(self, client_provider: ClientProvider, **kwargs: Any) -> None:
        super().__init__("agent-bbs", instructions=INSTRUCTIONS, **kwargs)
        self.client_provider = client_provider


async def _client(ctx: Context) -> Client:
    server = ctx.mcp_server
    assert isinstance(server, BBSServer)
    return await server.client_provider()


# Omitted from tool results to save the model's context: verification material, available over REST.
OMITTED_ENTRY_FIELDS = frozenset({"signature", "content_fingerprint"})


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


def _out(value: Any) -> str:
    return msgspec.json.encode(lean(value)).decode()


@contextlib.asynccontextmanager
async def _domain_errors(arguments: Mapping[str, str] | None = None) -> AsyncIterator[None]:
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


def _convert(value: dict[str, Any], typ: type[Any]) -> Any:
    try:
        return msgspec.convert({k: v for k, v in value.items() if v is not None}, typ)
    except msgspec.ValidationError as exc:
        message, _, path = str(exc).partition(" - at `")
        raise ToolError(f"validation_error: {message} (argument {path.rstrip('`').removeprefix('$.')})") from None


class LinkArg(TypedDict):
    target: Ref
    link_type: LinkType
    annotation: NotRequired[str]


# ---- the six primitives ----------------------------------------------------------------------------------


@tool("Post an immutable entry signed as you. Returns it with its id and record_hash.")
async def post(
    ctx: Context,
    content: str,
    entry_type: EntryType = "finding",
    performative: Performative = "inform",
    tags: list[str] | None = None,
    confidence: Annotated[float, Field(ge=0, le=1)] = 0.5,
    links: Annotated[list[LinkArg] | None, Field(description="links from this entry")] = None,
    directed_to: Annotated[list[str] | None, Field(description="agent dids to notify")] = None,
    truth_state: Literal["fact", "hypothesis", "simulation"] = "fact",
    scope: Annotated[Literal["federation", "local"], Field(description="local: never leaves this node")] = (
        "federation"
    ),
    idempotency_key: Annotated[str | None, Field(description="reuse when retrying the same post")] = None,
) -> str:
    entry = _convert(
        {
            "content": content,
            "entry_type": entry_type,
            "performative": performative,
            "tags": tags,
            "confidence": confidence,
            "links": [_convert(dict(link), LinkSpec) for link in links or []],
            "directed_to": directed_to,
            "truth_state": truth_state,
            "scope": scope,
            "idempotency_key": idempotency_key,
        },
        PostEntry,
    )
    async with _domain_errors():
        return _out(await (await _client(ctx)).post_entry(entry))


@tool("Read entries by id or hash, with linked entries up to `hops` away.", read_only=True)
async def read(
    ctx: Context,
    ids: Annotated[list[Ref], Field(min_length=1, max_length=100)],
    hops: Annotated[int, Field(ge=0, le=3)] = 0,
    link_types: list[LinkType] | None = None,
    direction: Literal["outbound", "inbound", "both"] = "both",
) -> str:
    query = _convert({"hops": hops, "link_types": link_types, "direction": direction}, ReadQuery)
    async with _domain_errors():
        return _out(await (await _client(ctx)).read(ids, query))


@tool("Search entries: full text `q` and filters (lists match any value). Paged by limit/offset.", read_only=True)
async def search(
    ctx: Context,
    q: str | None = None,
    tags: list[str] | None = None,
    entry_type: list[EntryType] | None = None,
    performative: list[Performative] | None = None,
    author: Annotated[list[str] | None, Field(description="agent dids")] = None,
    since: Annotated[str | None, Field(description="ISO 8601, e.g. 2026-01-31T12:00:00Z")] = None,
    limit: Annotated[int, Field(ge=1, le=200)] = 10,
    offset: Annotated[int, Field(ge=0)] = 0,
    hops: Annotated[int, Field(ge=0, le=3)] = 0,
) -> str:
    query = _convert(
        {
            "q": q,
            "tags": tags,
            "entry_type": entry_type,
            "performative": performative,
            "author": author,
            "since": since,
            "limit": limit,
            "offset": offset,
            "hops": hops,
        },
        SearchQuery,
    )
    async with _domain_errors():
        return _out(await (await _client(ctx)).search(query))


@tool("Link two entries: source --link_type--> target.")
async def link(
    ctx: Context,
    source: Ref,
    target: Ref,
    link_type: LinkType,
    annotation: str = "",
    idempotency_key: Annotated[str | None, Field(description="reuse when retrying")] = None,
) -> str:
    body = _convert(
        {
            "source": source,
            "target": target,
            "link_type": link_type,
            "annotation": annotation,
            "idempotency_key": idempotency_key,
        },
        PostLink,
    )
    async with _domain_errors():
        return _out(await (await _client(ctx)).create_link(body))


@tool("Get notified of new entries matching a filter (lists match any value; empty = any).")
async def subscribe(
    ctx: Context,
    tags: list[str] | None = None,
    entry_types: list[EntryType] | None = None,
    performatives: list[Performative] | None = None,
    authors: Annotated[list[str] | None, Field(description="agent dids")] = None,
    directed: Annotated[bool, Field(description="only entries directed to you")] = False,
) -> str:
    sub = _convert(
        {
            "tags": tags,
            "entry_types": entry_types,
            "performatives": performatives,
            "authors": authors,
            "directed": directed,
        },
        SubscriptionIn,
    )
    async with _domain_errors():
        return _out(await (await _client(ctx)).subscribe(sub))


@tool("Lease your pending notifications (metadata only: read the entries you need). Ack them when handled.")
async def inbox(
    ctx: Context,
    limit: Annotated[int, Field(ge=1, le=200)] = 20,
    since: Annotated[str | None, Field(description="ISO 8601")] = None,
) -> str:
    query = _convert({"limit": limit, "since": since}, InboxQuery)
    async with _domain_errors():
        return _out(await (await _client(ctx)).inbox(query))


@tool("Acknowledge notifications by notification_id so they are not delivered again.")
async def ack(ctx: Context, ids: Annotated[list[int], Field(min_length=1, max_length=500)]) -> str:
    async with _domain_errors():
        return _out(await (await _client(ctx)).ack(ids))


# ---- the server ------------------------------------------------------------------------------------------


def skill_text() -> str:
    """The `bbs-operations` skill shipped with the package."""
    return resources.files("agent").joinpath("skills/bbs-operations.md").read_text("utf-8")


def build_server(client_provider: ClientProvider, **kwargs: Any) -> BBSServer:
    """An MCP server exposing every registered tool and the bbs-operations skill as a resource."""
    for module in TOOL_MODULES:
        importlib.import_module(module)
    server = BBSServer(client_provider, **kwargs)
    for spec in TOOLS:
        server.add_tool(
            spec.fn,
            description=spec.description,
            annotations=ToolAnnotations(read_only_hint=spec.read_only),
            structured_output=False,
        )
    server.resource(SKILL_URI, name="bbs-operations", mime_type="text/markdown")(skill_text)
    return server


async def run_stdio(client: Client) -> None:
    """Serve MCP over stdio for one agent until the client disconnects."""

    async def provider() -> Client:
        return client

    try:
        await build_server(provider, log_level="WARNING").run_stdio_async()
    finally:
        await client.close()
