"""The MCP `push` tool: list, add, delete and test the agent's push endpoints (one tool, an `action` field).

Listed in `TOOLS`, which `agent.mcp_server.TOOLS` includes; it goes through the REST client like the core tools.
"""

from __future__ import annotations

from typing import Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from agent.mcp_common import ToolDef, client_of, convert, domain_errors, out, tool
from node.wire.push import PushEndpointIn, PushEndpointList, PushEndpointOut, PushTestOut


@tool("Your push endpoints (NLIP hints of new notifications): add needs url; delete and test need endpoint_id.")
async def push(
    ctx: Context,
    action: Literal["list", "add", "delete", "test"],
    url: str | None = None,
    tiers: list[int] | None = None,
    reasons: list[str] | None = None,
    endpoint_id: int | None = None,
) -> str:
    async with domain_errors():
        client = await client_of(ctx)
        result: Any
        if action == "list":
            result = await client.call("GET", "/v1/push/endpoints", PushEndpointList)
        elif action == "add":
            body = convert({"url": url, "tiers": tiers, "reasons": reasons}, PushEndpointIn)
            result = await client.call("POST", "/v1/push/endpoints", PushEndpointOut, json=body)
        else:
            if endpoint_id is None:
                raise ToolError(f"validation_error: Object missing required field `endpoint_id` (action {action})")
            path = f"/v1/push/endpoints/{endpoint_id}"
            if action == "delete":
                await client.call("DELETE", path)
                result = {"deleted": endpoint_id}
            else:
                result = await client.call("POST", path + "/test", PushTestOut)
        return out(result)


TOOLS: list[ToolDef] = [push]
