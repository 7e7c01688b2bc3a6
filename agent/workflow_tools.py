"""MCP tools for agent workflows: the message bus and the task graph with leases.

Listed in `TOOLS`, which `agent.mcp_server.TOOLS` includes; each goes through the REST client like the core tools,
so an agent that holds its own key (`bbs mcp --identity FILE`) signs its messages and task events itself. Every
write on one task (declare, lease, complete, release) and its read is one tool, `task`, with an `action`.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context

from agent.mcp_common import ToolDef, client_of, domain_errors, out, pick, tool
from agent.mcp_schema import Action, action_argument, arguments
from wire.workflows import (
    MAX_GRAPH_NODES,
    DeclareTask,
    FinishIn,
    GraphQuery,
    LeaseIn,
    MessageQuery,
    PostMessage,
    ReadyQuery,
)

AGENT = "did or name"
LEASE_ID = "lease_id of your lease"
TASK = {"task_id": "task"}  # the node names the path parameter (and DeclareTask its key); the tool says `task`


MESSAGE_ACTIONS = {
    "send": Action(frozenset(PostMessage.__struct_fields__), frozenset({"message_type"})),
    "read": Action(frozenset(MessageQuery.__struct_fields__)),
}


@tool(
    "The bus (append-only): send (no to_agent: broadcast) or read by project, agent (either end), type; newest"
    " first; cursor: next_cursor.",
    arguments(
        PostMessage,
        MessageQuery,
        extra={"action": action_argument(MESSAGE_ACTIONS)},
        describe={"to_agent": AGENT, "agent": AGENT},
        required=["action"],
        actions=MESSAGE_ACTIONS,
    ),
    rest=("POST /v1/agent-workflows/messages", "GET /v1/agent-workflows/messages"),
)
async def message(ctx: Context, args: dict[str, Any]) -> str:
    async with domain_errors():
        client = await client_of(ctx)
        if args["action"] == "send":
            return out(await client.send_message(pick(args, PostMessage)))
        return out(await client.messages(pick(args, MessageQuery)))


FINISH = frozenset({"task", "checkpoint", "lease", "idempotency_key", "space"})
DECLARE = frozenset({"task", "title", "depends_on", "status", "checkpoint", "lease", "space"})
TASK_ACTIONS = {
    "declare": Action(DECLARE, frozenset({"task"})),
    "get": Action(frozenset({"task", "space"}), frozenset({"task"})),
    "lease": Action(frozenset({"task", "agent", "seconds", "space"}), frozenset({"task"})),
    "complete": Action(FINISH, frozenset({"task"})),
    "release": Action(FINISH, frozenset({"task"})),
    "ready": Action(frozenset({"limit", "after", "space"})),
    "graph": Action(frozenset({"limit", "format", "space"})),
}
TASK_REF = {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[A-Za-z0-9_.:@-]+$"}
LIMIT = {"type": "integer", "minimum": 1, "maximum": MAX_GRAPH_NODES}
LIMIT_NOTE = "ready: to 1000 (100); graph: all"


@tool(
    "Tasks by key: declare (create/update; depends_on: keys; checkpoint merged), get, lease for `seconds` (again:"
    " extend), complete, release; ready: startable now; graph.",
    arguments(
        DeclareTask,
        LeaseIn,
        FinishIn,
        ReadyQuery,
        GraphQuery,
        rename={"key": "task"},
        extra={
            "action": action_argument(TASK_ACTIONS),
            "task": TASK_REF,
            "idempotency_key": {"type": "string", "minLength": 1, "maxLength": 128},
            "limit": LIMIT,
        },
        describe={"lease": LEASE_ID, "task": "key (or id, not to declare)", "limit": LIMIT_NOTE},
        required=["action"],
        actions=TASK_ACTIONS,
    ),
    rest=(
        "POST /v1/agent-workflows/tasks",
        "GET /v1/agent-workflows/tasks/{task_id}",
        "POST /v1/agent-workflows/tasks/{task_id}/lease",
        "POST /v1/agent-workflows/tasks/{task_id}/complete",
        "POST /v1/agent-workflows/tasks/{task_id}/release",
        "GET /v1/agent-workflows/tasks/ready",
        "GET /v1/agent-workflows/graph",
    ),
    renames={**TASK, "key": "task"},
)
async def task(ctx: Context, args: dict[str, Any]) -> str:
    action = args["action"]
    async with domain_errors({**TASK, "key": "task"}):
        client = await client_of(ctx)
        if action == "ready":
            return out(await client.ready_tasks(pick(args, ReadyQuery)))
        if action == "graph":
            query: GraphQuery = pick(args, GraphQuery)
            return (
                out(await client.task_graph(query)) if query.format == "json" else await client.task_graph_text(query)
            )
        if action == "declare":
            return out(await client.declare_task(pick(args, DeclareTask, {"key": "task"})))
        ref, space = args["task"], args.get("space")  # a key names the task of `space` (the public one without)
        if action == "get":
            return out(await client.get_task(ref, space))
        if action == "lease":
            return out(await client.lease_task(ref, pick(args, LeaseIn), space))
        finish = client.complete_task if action == "complete" else client.release_task
        return out(await finish(ref, pick(args, FinishIn), idempotency_key=args.get("idempotency_key"), space=space))


TOOLS: list[ToolDef] = [message, task]
