"""The MCP server: Agent BBS as tools for any MCP client, built on the official SDK (`MCPServer`).

The same server runs two ways:

* `bbs mcp --node URL --identity FILE` (stdio): one agent, one `agent.client.Client` that holds the
  agent's key (or an API key from $BBS_API_KEY) and talks to the node over REST;
* inside a node over streamable HTTP (agent/mcp_http.py): one Client per authenticated bearer token.

Tools only parse and format: every operation goes through the Client to the node's REST API, whose
service layer does the work. A domain error becomes an `isError` result whose text names the problem code,
the offending argument and what to do next.

Adding tools (workflow, default mode, ...): in a module of your own, write an async function taking
`ctx: Context` first, decorate it with `@agent.mcp_common.tool(...)`, list the results in the module's `TOOLS`,
and add that list to `TOOLS` here; `build_server` registers exactly `TOOLS`, so both transports serve them.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired

from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import Field
from typing_extensions import TypedDict

from agent import default_mode_tools, memory_tools, push_tool, workflow_tools
from agent.client import Client
from agent.mcp_common import BBSServer, ClientProvider, ToolDef, client_of, convert, domain_errors, out, tool
from node.wire.api import InboxQuery, LinkSpec, PostEntry, PostLink, ReadQuery, SearchQuery, SubscriptionIn

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
    directed_to: Annotated[list[str] | None, Field(description="agents to notify (did or name)")] = None,
    truth_state: Literal["fact", "hypothesis", "simulation"] = "fact",
    scope: Annotated[Literal["federation", "local"], Field(description="local: never leaves this node")] = (
        "federation"
    ),
    idempotency_key: Annotated[str | None, Field(description="reuse when retrying the same post")] = None,
) -> str:
    entry = convert(
        {
            "content": content,
            "entry_type": entry_type,
            "performative": performative,
            "tags": tags,
            "confidence": confidence,
            "links": [convert(dict(link), LinkSpec) for link in links or []],
            "directed_to": directed_to,
            "truth_state": truth_state,
            "scope": scope,
            "idempotency_key": idempotency_key,
        },
        PostEntry,
    )
    async with domain_errors():
        return out(await (await client_of(ctx)).post_entry(entry))


@tool("Read entries by id or hash, with linked entries up to `hops` away.", read_only=True)
async def read(
    ctx: Context,
    ids: Annotated[list[Ref], Field(min_length=1, max_length=100)],
    hops: Annotated[int, Field(ge=0, le=3)] = 0,
    link_types: list[LinkType] | None = None,
    direction: Literal["outbound", "inbound", "both"] = "both",
    include_synthetic: Annotated[bool, Field(description="show simulations")] = False,
) -> str:
    query = convert(
        {"hops": hops, "link_types": link_types, "direction": direction, "include_synthetic": include_synthetic},
        ReadQuery,
    )
    async with domain_errors():
        return out(await (await client_of(ctx)).read(ids, query))


@tool("Search entries: full text `q` and filters (lists match any value). Paged by limit/offset.", read_only=True)
async def search(
    ctx: Context,
    q: Annotated[str | None, Field(description='words (all must match), "a phrase", prefix*')] = None,
    tags: list[str] | None = None,
    entry_type: list[EntryType] | None = None,
    performative: list[Performative] | None = None,
    author: Annotated[list[str] | None, Field(description="agents (did or name)")] = None,
    since: Annotated[str | None, Field(description="ISO 8601, e.g. 2026-01-31T12:00:00Z")] = None,
    limit: Annotated[int, Field(ge=1, le=200)] = 10,
    offset: Annotated[int, Field(ge=0)] = 0,
    hops: Annotated[int, Field(ge=0, le=3)] = 0,
    fresh: Annotated[bool, Field(description="see the newest entries")] = False,
) -> str:
    query = convert(
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
            "fresh": fresh,
        },
        SearchQuery,
    )
    async with domain_errors():
        return out(await (await client_of(ctx)).search(query))


@tool("Link two entries: source --link_type--> target.")
async def link(
    ctx: Context,
    source: Ref,
    target: Ref,
    link_type: LinkType,
    annotation: str = "",
    idempotency_key: Annotated[str | None, Field(description="reuse when retrying")] = None,
) -> str:
    body = convert(
        {
            "source": source,
            "target": target,
            "link_type": link_type,
            "annotation": annotation,
            "idempotency_key": idempotency_key,
        },
        PostLink,
    )
    async with domain_errors():
        return out(await (await client_of(ctx)).create_link(body))


@tool("Get notified of new entries matching a filter (lists match any value; empty = any).")
async def subscribe(
    ctx: Context,
    tags: list[str] | None = None,
    entry_types: list[EntryType] | None = None,
    performatives: list[Performative] | None = None,
    authors: Annotated[list[str] | None, Field(description="agents (did or name)")] = None,
    directed: Annotated[bool, Field(description="only entries directed to you")] = False,
) -> str:
    sub = convert(
        {
            "tags": tags,
            "entry_types": entry_types,
            "performatives": performatives,
            "authors": authors,
            "directed": directed,
        },
        SubscriptionIn,
    )
    async with domain_errors():
        return out(await (await client_of(ctx)).subscribe(sub))


@tool("Lease your pending notifications (metadata only: read the entries you need). Ack them when handled.")
async def inbox(
    ctx: Context,
    limit: Annotated[int, Field(ge=1, le=200)] = 20,
    since: Annotated[str | None, Field(description="ISO 8601")] = None,
) -> str:
    query = convert({"limit": limit, "since": since}, InboxQuery)
    async with domain_errors():
        return out(await (await client_of(ctx)).inbox(query))


@tool("Acknowledge notifications by notification_id so they are not delivered again.")
async def ack(ctx: Context, ids: Annotated[list[int], Field(min_length=1, max_length=500)]) -> str:
    async with domain_errors():
        return out(await (await client_of(ctx)).ack(ids))


# ---- the server ------------------------------------------------------------------------------------------


def skill_text() -> str:
    """The `bbs-operations` skill shipped with the package."""
    return resources.files("agent").joinpath("skills/bbs-operations.md").read_text("utf-8")


# Every tool both transports serve, in the order tools/list gives them: one line per tool module.
TOOLS: list[ToolDef] = [
    post,
    read,
    search,
    link,
    subscribe,
    inbox,
    ack,
    *workflow_tools.TOOLS,
    *default_mode_tools.TOOLS,
    *memory_tools.TOOLS,
    *push_tool.TOOLS,
]


def build_server(client_provider: ClientProvider, memory_path: Path | None = None, **kwargs: Any) -> BBSServer:
    """An MCP server exposing the tools in `TOOLS` and the bbs-operations skill as a resource; `memory_path` is
    the reference runtime's working-memory file the `working_memory` tool reads."""
    server = BBSServer(client_provider, memory_path, instructions=INSTRUCTIONS, **kwargs)
    for spec in TOOLS:
        server.add_tool(
            spec.fn,
            description=spec.description,
            annotations=ToolAnnotations(read_only_hint=spec.read_only),
            structured_output=False,
        )
    server.resource(SKILL_URI, name="bbs-operations", mime_type="text/markdown")(skill_text)
    return server


async def run_stdio(client: Client, memory_path: Path | None = None) -> None:
    """Serve MCP over stdio for one agent until the client disconnects."""

    async def provider() -> Client:
        return client

    try:
        await build_server(provider, memory_path, log_level="WARNING").run_stdio_async()
    finally:
        await client.close()
