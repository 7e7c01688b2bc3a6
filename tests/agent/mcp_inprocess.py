"""The real MCP SDK client connected in-process to this package's MCP server, whose tools reach a real node."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from mcp import Client as MCPClient

from agent.client import Client
from agent.mcp_server import build_server


@asynccontextmanager
async def mcp_for(client: TestClient, api_key: str, memory_path: Path | None = None) -> AsyncIterator[MCPClient]:
    """An MCP session for the agent with `api_key` on the node `client` serves (through REST, as `bbs mcp`)."""
    async with Client(str(client.make_url("")).rstrip("/"), api_key=api_key, retries=0) as rest:

        async def provider() -> Client:
            return rest

        async with MCPClient(build_server(provider, memory_path)) as session:
            yield session


def text(result: Any) -> str:
    return "".join(block.text for block in result.content)


def ok(result: Any) -> Any:
    """The JSON of a successful tool result."""
    assert not result.is_error, text(result)
    return json.loads(text(result))


def failed(result: Any) -> str:
    """The text of an error result."""
    assert result.is_error, text(result)
    return text(result)
