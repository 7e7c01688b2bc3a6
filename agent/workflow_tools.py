"""MCP tools for agent workflows: the message bus and the task graph with leases.

Listed in `TOOLS`, which `agent.mcp_server.TOOLS` includes; each goes through the REST client like the core tools,
so an agent that holds its own key (`bbs mcp --identity FILE`) signs its messages and task events itself.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from pydantic import Field

from agent.mcp_common import ToolDef, client_of, convert, domain_errors, out, tool
from node.wire.workflows import (
    DeclareTask,
    FinishIn,
    LeaseIn,
    MessageQuery,
    PostMessage,
    ReadyQuery,
)

TaskRef = Annotated[
    str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:@-]+$", description="task id or key")
]
LeaseToken = Annotated[
    str,
    Field(
        pattern=r"^[0-9a-f]{64}$",
        description="fencing token: the lease_id your lease_task answer gave; required while you hold the lease",
    ),
]
TASK = {"task_id": "task"}  # the node names the path parameter; the tools call it `task`


@tool("Send a bus message (omit to_agent to broadcast). The bus is an append-only log.")
async def send_message(
    ctx: Context,
    message_type: str,
    body: str = "",
    to_agent: Annotated[str | None, Field(description="recipient did or name; omit to broadcast")] = None,
    project: str | None = None,
    payload: dict[str, Any] | None = None,
) -> str:
    msg = convert(
        {"message_type": message_type, "body": body, "to_agent": to_agent, "project": project, "payload": payload},
        PostMessage,
    )
    async with domain_errors():
        return out(await (await client_of(ctx)).send_message(msg))


@tool(
    "Read bus messages by project, agent (either end) or type, newest first unless order=oldest; order=arrival"
    " follows the bus in the order this node stored messages (continue with cursor=0.<last id seen>).",
    read_only=True,
)
async def read_messages(
    ctx: Context,
    project: str | None = None,
    agent: Annotated[str | None, Field(description="agent did or name")] = None,
    message_type: str | None = None,
    order: Literal["newest", "oldest", "arrival"] = "newest",
    limit: Annotated[int, Field(ge=1, le=200)] = 20,
    cursor: str | None = None,
) -> str:
    query = convert(
        {
            "project": project,
            "agent": agent,
            "message_type": message_type,
            "order": order,
            "limit": limit,
            "cursor": cursor,
        },
        MessageQuery,
    )
    async with domain_errors():
        return out(await (await client_of(ctx)).messages(query))


@tool("Create or update a task by key; depends_on lists task keys (may not exist yet); checkpoint is merged.")
async def declare_task(
    ctx: Context,
    key: str,
    title: str | None = None,
    depends_on: list[str] | None = None,
    status: str | None = None,
    checkpoint: dict[str, Any] | None = None,
    lease: LeaseToken | None = None,
) -> str:
    task = convert(
        {
            "key": key,
            "title": title,
            "depends_on": depends_on,
            "status": status,
            "checkpoint": checkpoint,
            "lease": lease,
        },
        DeclareTask,
    )
    async with domain_errors():
        return out(await (await client_of(ctx)).declare_task(task))


@tool(
    "Tasks that can start now: every dependency done and no live lease. Pass next_after back as `after` for more.",
    read_only=True,
)
async def ready_tasks(
    ctx: Context,
    limit: Annotated[int, Field(ge=1, le=1000)] = 20,
    after: Annotated[int | None, Field(ge=0, description="next_after of the previous page")] = None,
) -> str:
    query = convert({"limit": limit, "after": after}, ReadyQuery)
    async with domain_errors():
        return out(await (await client_of(ctx)).ready_tasks(query))


@tool("Lease a task for `seconds` (30..86400, default 900). Lease again to extend; 409 if another agent holds it.")
async def lease_task(ctx: Context, task: TaskRef, seconds: Annotated[int, Field(ge=30, le=86400)] = 900) -> str:
    body = convert({"seconds": seconds}, LeaseIn)
    async with domain_errors(TASK):
        return out(await (await client_of(ctx)).lease_task(task, body))


@tool("End your lease on a task: outcome complete (done) or release (back to ready). Checkpoint is merged.")
async def finish_task(
    ctx: Context,
    task: TaskRef,
    outcome: Literal["complete", "release"] = "complete",
    checkpoint: dict[str, Any] | None = None,
    lease: LeaseToken | None = None,
) -> str:
    body = convert({"checkpoint": checkpoint, "lease": lease}, FinishIn)
    async with domain_errors(TASK):
        client = await client_of(ctx)
        finish = client.complete_task if outcome == "complete" else client.release_task
        return out(await finish(task, body))


@tool("The task graph: nodes with state and `precedes` edges.", read_only=True)
async def task_graph(ctx: Context) -> str:
    async with domain_errors():
        return out(await (await client_of(ctx)).task_graph())


TOOLS: list[ToolDef] = [send_message, read_messages, declare_task, ready_tasks, lease_task, finish_task, task_graph]
