"""The submission rules (node/store/submission.py) through MCP: the real SDK client over streamable HTTP against
`bbs serve --mcp-port`. Each class of bad input is an `isError` result, one line starting with its code and naming
the argument, and the
node stores nothing. (Duplicate JSON keys cannot reach a tool: the SDK parses the JSON-RPC message first.)"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from tests.agent.conftest import ServedNode
from tests.agent.test_mcp_http import ok, remote_session

pytestmark = [pytest.mark.slow, pytest.mark.remote_mcp]  # served_node with --mcp-port (tests/agent/conftest.py)


def stored(node: ServedNode) -> int:
    conn = sqlite3.connect(f"file:{node.data / 'bbs.db'}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])
    finally:
        conn.close()


async def test_bad_input_through_mcp_is_a_tool_error_and_stores_nothing(served_node: ServedNode) -> None:
    alice = served_node.create_agent("alice")
    cases: list[tuple[str, dict[str, Any], str, str]] = [
        ("post", {"content": "x", "tags": ["a\x00b"]}, "nul_character", "tags[0]"),
        ("post", {"content": "x", "idempotency_key": "key\x00"}, "validation_error", "idempotency_key"),
        ("post", {"content": "\u200b\u200d\u202e\u2066"}, "invisible_only", "content"),
        ("post", {"content": "x", "tags": ["\u200b"]}, "invisible_only", "tags[0]"),
        ("message", {"action": "send", "message_type": "note", "payload": {"n": 2**53 + 1}}, "integer_out_of_range",
         "payload.n"),
        ("message", {"action": "send", "message_type": "note", "payload": {"k\x00": 1}}, "nul_character",
         'payload["k\\u0000"]'),
        ("task", {"action": "declare", "task": "t1", "title": "t", "checkpoint": {"n": -(2**60) - 1}},
         "integer_out_of_range",
         "checkpoint.n"),
    ]  # fmt: skip
    async with remote_session(served_node, alice["api_key"]) as session:
        before = stored(served_node)
        for name, arguments, code, argument in cases:
            result = await session.call_tool(name, arguments)
            text = "".join(block.text for block in result.content)  # type: ignore[union-attr]
            assert result.is_error, (name, arguments, text)
            assert text.startswith(f"{code}: ") and f"(argument {argument})" in text and "\n" not in text, text
        assert stored(served_node) == before
        fine = ok(await session.call_tool("post", {"content": "\u200bvisible", "tags": ["é"]}))
        assert fine["content"] == "\u200bvisible"
