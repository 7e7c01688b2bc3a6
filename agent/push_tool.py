"""The MCP `push` tool: list, add, delete and test the agent's push endpoints (one tool, an `action` field).

Listed in `TOOLS`, which `agent.mcp_server.TOOLS` includes; it goes through the REST client like the core tools.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context

from agent.mcp_common import ToolDef, client_of, domain_errors, out, pick, tool
from agent.mcp_schema import Action, action_argument, arguments
from wire.push import PushEndpointIn, PushEndpointList, PushEndpointOut, PushTestOut

PUSH_ACTIONS = {
    "list": Action(frozenset()),
    "add": Action(frozenset(PushEndpointIn.__struct_fields__), frozenset({"url"})),
    "delete": Action(frozenset({"endpoint_id"}), frozenset({"endpoint_id"})),
    "test": Action(frozenset({"endpoint_id"}), frozenset({"endpoint_id"})),
}


@tool(
    "Push endpoints (NLIP hints of notifications): list, add (url), delete/test (endpoint_id).",
    arguments(
        PushEndpointIn,
        extra={"action": action_argument(PUSH_ACTIONS, "list"), "endpoint_id": {"type": "integer", "minimum": 1}},
        required=[],
        actions=PUSH_ACTIONS,
    ),
    destructive=True,
    rest=(
        "GET /v1/push/endpoints",
        "POST /v1/push/endpoints",
        "DELETE /v1/push/endpoints/{endpoint_id}",
        "POST /v1/push/endpoints/{endpoint_id}/test",
    ),
)
async def push(ctx: Context, args: dict[str, Any]) -> str:
    action = args.get("action", "list")
    async with domain_errors():
        client = await client_of(ctx)
        result: Any
        if action == "list":
            result = await client.call("GET", "/v1/push/endpoints", PushEndpointList)
        elif action == "add":
            result = await client.call("POST", "/v1/push/endpoints", PushEndpointOut, json=pick(args, PushEndpointIn))
        else:
            path = f"/v1/push/endpoints/{args['endpoint_id']}"
            if action == "delete":
                await client.call("DELETE", path)
                result = {"deleted": args["endpoint_id"]}
            else:
                result = await client.call("POST", path + "/test", PushTestOut)
        return out(result)


TOOLS: list[ToolDef] = [push]
