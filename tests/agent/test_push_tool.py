"""The MCP `push` tool over remote MCP (real SDK client, real `bbs serve`)."""

from __future__ import annotations

import pytest

from tests.agent.conftest import ServedNode
from tests.agent.test_mcp_http import ok, remote_session

pytestmark = [pytest.mark.slow, pytest.mark.remote_mcp]  # served_node with --mcp-port (tests/agent/conftest.py)


async def test_the_push_tool_adds_lists_tests_and_deletes(served_node: ServedNode) -> None:
    bob = served_node.create_agent("bob")
    async with remote_session(served_node, bob["api_key"]) as session:
        made = ok(await session.call_tool("push", {"action": "add", "url": "http://127.0.0.1:9/hook"}))
        assert made["tiers"] == [1] and made["state"]["breaker"] == "closed"
        listed = ok(await session.call_tool("push", {"action": "list"}))
        assert [e["id"] for e in listed["endpoints"]] == [made["id"]]
        tested = ok(await session.call_tool("push", {"action": "test", "endpoint_id": made["id"]}))
        assert tested["ok"] is False and tested["error"]
        missing = await session.call_tool("push", {"action": "delete"})
        assert missing.is_error and "endpoint_id" in missing.content[0].text  # type: ignore[union-attr]
        bad = await session.call_tool("push", {"action": "add", "url": "ftp://x:1/"})
        assert bad.is_error and "url" in bad.content[0].text  # type: ignore[union-attr]
        ok(await session.call_tool("push", {"action": "delete", "endpoint_id": made["id"]}))
        assert ok(await session.call_tool("push", {"action": "list"}))["endpoints"] == []
