"""The MCP `push` tool: list, add, delete and test the agent's push endpoints (one tool, an `action` field).

Listed in `TOOLS`, which `agent.mcp_server.TOOLS` includes; it goes through the REST client like the core tools.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from agent.mcp_common import ToolDef, client_of, convert, domain_errors, out, tool
from node.wire.push import PushEndpointIn, PushEndpointList, PushEndpointOut, PushTestOut


@tool(
    "Push endpoints: the node sends an NLIP hint (metadata only) to a URL of yours when a notification arrives;"
    " the inbox stays the record. action=list|add|delete|test; add takes url (and tiers, reasons), delete and test"
    " take endpoint_id."
)
async def push(
    ctx: Context,
    action: Literal["list", "add", "delete", "test"],
    url: str | None = None,
    tiers: list[Literal[1, 2]] | None = None,
    reasons: list[Literal["directed_request", "directed", "subscription", "contradiction"]] | None = None,
    endpoint_id: Annotated[int | None, Field(ge=1)] = None,
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
