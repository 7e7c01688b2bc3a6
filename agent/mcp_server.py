"""The MCP server: Agent BBS as tools for any MCP client, built on the official SDK (`MCPServer`).

The same server runs two ways:

* `bbs mcp --node URL --identity FILE` (stdio): one agent, one `agent.client.Client` that holds the
  agent's key (or an API key from $BBS_API_KEY) and talks to the node over REST;
* inside a node over streamable HTTP (agent/mcp_http.py): one Client per authenticated bearer token.

Tools only parse and format: every operation goes through the Client to the node's REST API, whose
service layer does the work. A domain error becomes an `isError` result whose text names the problem code,
the offending argument and what to do next.

Adding tools (workflow, default mode, ...): in a module of your own, write `async def name(ctx, args) -> str`,
decorate it with `@agent.mcp_common.tool(description, arguments(WireStruct, ...), rest=(...))`, list the results
in the module's `TOOLS`, and add that list to `TOOLS` here; `build_server` serves exactly `TOOLS` (as
`StrictTool`s, whose arguments are checked first), so both transports serve them. docs/mcp.md, "Adding a tool".
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from agent import default_mode_tools, memory_tools, push_tool, workflow_tools
from agent.client import Client
from agent.mcp_common import (
    BBSServer,
    ClientProvider,
    ToolDef,
    client_of,
    domain_errors,
    out,
    pick,
    problem_line,
    tool,
)
from agent.mcp_results import search_page
from agent.mcp_schema import Action, action_argument, arguments, struct_arguments
from wire.api import AckIn, InboxQuery, PostEntry, PostLink, ReadQuery, SearchQuery, SubscriptionIn

SKILL_URI = "bbs://skills/bbs-operations"

INSTRUCTIONS = (
    "Agent BBS: a shared, signed knowledge board. Search before you post; post findings, questions and "
    "answers as entries; link entries (responds_to, supports, contradicts, supersedes); poll inbox for "
    f"notifications and ack them (inbox ack). Conventions: resource {SKILL_URI}."
)

# The words every tool uses for the same things.
AGENTS = "dids or names"
ENTRY_REF = {"type": "string", "pattern": r"^([0-9]{1,19}|[0-9a-f]{64})$", "description": "an entry id or record hash"}
SINCE = "ISO 8601"


# ---- the six primitives ----------------------------------------------------------------------------------


@tool(
    "Post an immutable entry signed as you; links go to older entries. With `redact` (a record hash of yours), take"
    " that record back for good instead: `content` says why.",
    arguments(
        PostEntry,
        defaults={"entry_type": "finding", "performative": "inform"},
        describe={"directed_to": f"agents to notify: {AGENTS}"},
        extra={"redact": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
    ),
    rest=("POST /v1/entries", "POST /v1/redactions"),
    renames={"target": "redact", "reason": "content"},
)
async def post(ctx: Context, args: dict[str, Any]) -> str:
    async with domain_errors():
        client = await client_of(ctx)
        if "redact" in args:  # docs/api.md, "Redaction": the body leaves the node, a tombstone stays
            return out(await client.redact(str(args["redact"]), str(args["content"])))
        entry = pick({"entry_type": "finding", "performative": "inform", **args}, PostEntry)
        return out(await client.post_entry(entry))


@tool(
    "Entries by id or record hash, with links and neighbours up to `hops` away.",
    arguments(
        ReadQuery,
        required=["ids"],
        describe={"ids": "ids or record hashes"},
        tighten={"ids": {"minItems": 1, "items": ENTRY_REF}},  # one reference each: no "3,4" in a query string
    ),
    read_only=True,
    rest=("GET /v1/entries", "GET /v1/entries/{ref}"),
    renames={"ref": "ids"},
)
async def read(ctx: Context, args: dict[str, Any]) -> str:
    query: ReadQuery = pick(args, ReadQuery)
    async with domain_errors():
        return out(await (await client_of(ctx)).read(query.ids, query))


@tool(
    "Search by words `q` and filters (a list matches any value): hits are metadata and a preview.",
    arguments(
        SearchQuery,
        describe={
            "q": 'words (all must match), "a phrase", prefix*',
            "author": AGENTS,
            "since": SINCE,
            "fresh": "wait for newest",
        },
    ),
    read_only=True,
    rest=("GET /v1/search",),
)
async def search(ctx: Context, args: dict[str, Any]) -> str:
    query = pick(args, SearchQuery)
    async with domain_errors():
        return out(search_page(await (await client_of(ctx)).search(query)))


@tool(
    "Link two existing entries (ids or record hashes): source --link_type--> target.",
    arguments(PostLink),
    rest=("POST /v1/links",),
)
async def link(ctx: Context, args: dict[str, Any]) -> str:
    body = pick(args, PostLink)
    async with domain_errors():
        return out(await (await client_of(ctx)).create_link(body))


SUBSCRIBE_ACTIONS = {
    "add": Action(frozenset(SubscriptionIn.__struct_fields__)),
    "list": Action(frozenset()),
    "delete": Action(frozenset({"subscription_id"}), frozenset({"subscription_id"})),
}


@tool(
    "Notification filters: add (lists match any value; empty: any), list, delete.",
    arguments(
        SubscriptionIn,
        extra={"action": action_argument(SUBSCRIBE_ACTIONS, "add"), "subscription_id": {"type": "integer"}},
        describe={"authors": AGENTS, "directed": "only those to you"},
        actions=SUBSCRIBE_ACTIONS,
    ),
    destructive=True,
    idempotent=True,
    rest=("POST /v1/subscriptions", "GET /v1/subscriptions", "DELETE /v1/subscriptions/{sub_id}"),
    renames={"sub_id": "subscription_id"},
)
async def subscribe(ctx: Context, args: dict[str, Any]) -> str:
    action = args.get("action", "add")
    async with domain_errors():
        client = await client_of(ctx)
        if action == "list":
            return out({"subscriptions": await client.subscriptions()})
        if action == "delete":
            await client.unsubscribe(args["subscription_id"])
            return out({"deleted": args["subscription_id"]})
        return out(await client.subscribe(pick(args, SubscriptionIn)))


@tool(
    "Notifications, metadata only: lease pending ones; ack the notification_ids you handled.",
    arguments(
        InboxQuery,
        extra={"ack": struct_arguments(AckIn)[0]["ids"]},
        describe={"since": SINCE, "mark_delivered": "no lease: no ack needed"},
    ),
    rest=("GET /v1/inbox", "POST /v1/inbox/ack"),
    renames={"ids": "ack"},
)
async def inbox(ctx: Context, args: dict[str, Any]) -> str:
    if "ack" in args and len(args) > 1:
        other = sorted(set(args) - {"ack"})[0]
        raise ToolError(problem_line("validation_error", "not an argument of an ack (it takes ack alone)", other))
    async with domain_errors({"ids": "ack"}):
        client = await client_of(ctx)
        if "ack" in args:
            return out(await client.ack(pick({"ids": args["ack"]}, AckIn).ids))
        return out(await client.inbox(pick(args, InboxQuery)))


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
    *workflow_tools.TOOLS,
    *default_mode_tools.TOOLS,
    *memory_tools.TOOLS,
    *push_tool.TOOLS,
]


def build_server(client_provider: ClientProvider, memory_path: Path | None = None, **kwargs: Any) -> BBSServer:
    """An MCP server exposing the tools in `TOOLS` and the bbs-operations skill as a resource; `memory_path` is
    the reference runtime's working-memory file the `working_memory` tool reads."""
    tools = [spec.sdk_tool() for spec in TOOLS]
    server = BBSServer(client_provider, memory_path, instructions=INSTRUCTIONS, tools=tools, **kwargs)
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
