"""Through MCP (the real SDK client, in-process, against a real node): the `inbox` tool shows an agent the notice of
reason `redacted` for an entry it had been notified of, naming the target's hash and the redaction, no body."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from tests.agent.mcp_inprocess import mcp_for, ok
from tests.conftest import AgentCreds

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def test_the_inbox_tool_shows_the_notice_of_a_redaction(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    async with mcp_for(client, alice.api_key) as a, mcp_for(client, bob.api_key) as b:
        ok(await b.call_tool("subscribe", {"authors": ["alice"]}))
        secret = ok(await a.call_tool("post", {"content": "the safe combination is 12-34-56"}))
        (seen,) = ok(await b.call_tool("inbox", {"mark_delivered": True}))["notifications"]
        assert (seen["entry_id"], seen["reason"], seen["redaction"]) == (secret["id"], "subscription", None)
        redaction = ok(await a.call_tool("post", {"redact": secret["record_hash"], "content": "leaked"}))["redaction"]
        (notice,) = ok(await b.call_tool("inbox", {}))["notifications"]
        assert (notice["reason"], notice["redaction"]) == ("redacted", redaction)
        assert (notice["record_hash"], notice["entry_id"]) == (secret["record_hash"], secret["id"])
        assert "12-34-56" not in str(notice)
        assert ok(await a.call_tool("inbox", {}))["notifications"] == []  # the author was never notified of it
