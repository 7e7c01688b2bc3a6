"""Workflow tools over remote MCP (real SDK client, real `bbs serve`): bus, plan, ready, lease, finish, graph."""

from __future__ import annotations

import pytest

from agent.client import Client
from tests.agent.conftest import ServedNode
from tests.agent.test_mcp_http import ok, remote_session

pytestmark = [pytest.mark.slow, pytest.mark.remote_mcp]  # served_node with --mcp-port (tests/agent/conftest.py)


async def test_workflow_tools_drive_a_plan(served_node: ServedNode) -> None:
    sup, worker = served_node.create_agent("sup"), served_node.create_agent("worker")
    async with (
        Client(served_node.url, api_key=sup["api_key"]) as rest,
        remote_session(served_node, sup["api_key"]) as boss,
        remote_session(served_node, worker["api_key"]) as hand,
    ):
        sent = ok(
            await boss.call_tool(
                "message", {"action": "send", "message_type": "plan", "body": "two steps", "project": "p1"}
            )
        )
        assert sent["from_agent"] == sup["agent_id"] and sent["to_agent"] is None
        page = ok(await hand.call_tool("message", {"action": "read", "project": "p1"}))
        assert [m["record_hash"] for m in page["messages"]] == [sent["record_hash"]]
        assert page == ok(await boss.call_tool("message", {"action": "read", "project": "p1"}))

        ok(
            await boss.call_tool(
                "task", {"action": "declare", "task": "publish", "title": "Publish", "depends_on": ["draft"]}
            )
        )
        ok(await boss.call_tool("task", {"action": "declare", "task": "draft", "title": "Draft"}))
        ready = ok(await hand.call_tool("task", {"action": "ready"}))
        assert [t["key"] for t in ready["tasks"]] == ["draft"]
        for key in ("spare-1", "spare-2"):
            ok(await boss.call_tool("task", {"action": "declare", "task": key}))
        first = ok(await hand.call_tool("task", {"action": "ready", "limit": 2}))
        rest_page = ok(await hand.call_tool("task", {"action": "ready", "limit": 2, "after": first["next_after"]}))
        assert [t["key"] for t in first["tasks"] + rest_page["tasks"]] == ["draft", "spare-1", "spare-2"]
        for key in ("spare-1", "spare-2"):
            ok(await boss.call_tool("task", {"action": "declare", "task": key, "status": "cancelled"}))
        follow = ok(await hand.call_tool("message", {"action": "read", "order": "arrival", "message_type": "plan"}))
        assert [m["record_hash"] for m in follow["messages"]] == [sent["record_hash"]]
        tail = ok(await hand.call_tool("message", {"action": "read", "order": "arrival", "cursor": f"0.{sent['id']}"}))
        assert tail["messages"] == []

        leased = ok(await hand.call_tool("task", {"action": "lease", "task": "draft", "seconds": 60}))
        assert leased["lease"]["holder"] == worker["agent_id"]
        taken = await boss.call_tool("task", {"action": "lease", "task": "draft"})
        assert taken.is_error and "lease_held" in taken.content[0].text  # type: ignore[union-attr]
        assert ok(await hand.call_tool("task", {"action": "ready"}))["tasks"] == []

        finish = {
            "action": "complete",
            "task": "draft",
            "checkpoint": {"words": 900},
            "lease": leased["lease"]["lease_id"],
        }
        done = ok(await hand.call_tool("task", finish))
        assert done["status"] in ("done", "completed") and done["checkpoint"] == {"words": 900}
        assert len(done["identity"]) == 64 and done["twins"] == []  # MCP task answers carry identity and twins
        assert [t["key"] for t in ok(await hand.call_tool("task", {"action": "ready"}))["tasks"]] == ["publish"]

        graph = ok(await hand.call_tool("task", {"action": "graph"}))
        assert {(e["from_key"], e["to_key"]) for e in graph["edges"]} == {("draft", "publish")}
        rest_graph = await rest.call("GET", "/v1/agent-workflows/graph", dict)
        assert graph == rest_graph
        dot = await hand.call_tool("task", {"action": "graph", "format": "dot"})
        assert not dot.is_error and dot.content[0].text.startswith("digraph")  # type: ignore[union-attr]

        bad = await hand.call_tool("task", {"action": "lease", "task": "publish", "seconds": 5})
        assert bad.is_error and "seconds" in bad.content[0].text  # type: ignore[union-attr]


async def test_tool_arguments_that_no_node_accepts_are_refused_by_name(served_node: ServedNode) -> None:
    """References beyond what a node accepts: a tool error naming the argument, never the text/plain answer of
    aiohttp to a request line it cannot read. (NaN in arguments: the SDK client sends it as null; the tools'
    own client refuses NaN, tests/agent/test_client_workflows.py.)"""
    agent = served_node.create_agent("probe")
    async with remote_session(served_node, agent["api_key"]) as mcp:
        for tool, arguments, name in (
            ("read", {"ids": ["x" * 70_000]}, "ids"),
            ("read", {"ids": ["3,4"]}, "ids"),
            ("task", {"action": "lease", "task": "x" * 70_000}, "task"),
            ("task", {"action": "lease", "task": ""}, "task"),
            ("task", {"action": "complete", "task": "t 1"}, "task"),
        ):
            result = await mcp.call_tool(tool, arguments)
            text = result.content[0].text  # type: ignore[union-attr]
            assert result.is_error and name in text and "Got more than" not in text, (tool, text)
        result = await mcp.call_tool("task", {"action": "lease", "task": "no-such-task"})
        assert result.is_error and "(argument task)" in result.content[0].text  # type: ignore[union-attr]


async def test_the_task_tool_works_inside_a_space(served_node: ServedNode) -> None:
    """`space` on the task tool: declare, get, lease, complete and ready inside a space; a stranger sees none."""
    owner, eve = served_node.create_agent("space-owner"), served_node.create_agent("space-eve")
    async with (
        Client(served_node.url, api_key=owner["api_key"]) as rest,
        remote_session(served_node, owner["api_key"]) as mine,
        remote_session(served_node, eve["api_key"]) as stranger,
    ):
        space = (await rest.call("POST", "/v1/spaces", dict, json={"name": "studio"}))["space_id"]
        made = ok(await mine.call_tool("task", {"action": "declare", "task": "mix", "space": space}))
        assert made["space"] == space
        got = ok(await mine.call_tool("task", {"action": "get", "task": "mix", "space": space}))
        assert got["id"] == made["id"]
        ready = ok(await mine.call_tool("task", {"action": "ready", "space": space}))
        assert [t["key"] for t in ready["tasks"]] == ["mix"]
        leased = ok(await mine.call_tool("task", {"action": "lease", "task": "mix", "space": space}))
        finish = {"action": "complete", "task": "mix", "space": space, "lease": leased["lease"]["lease_id"]}
        assert ok(await mine.call_tool("task", finish))["status"] == "done"
        for arguments in ({"action": "get", "task": "mix", "space": space}, {"action": "ready", "space": space}):
            refused = await stranger.call_tool("task", arguments)
            text = refused.content[0].text  # type: ignore[union-attr]
            assert refused.is_error and ("task_not_found" in text or "unknown_space" in text), text
        graph = ok(await stranger.call_tool("task", {"action": "graph"}))
        assert made["id"] not in {n["id"] for n in graph["nodes"]}
