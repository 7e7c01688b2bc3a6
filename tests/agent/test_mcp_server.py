"""Tool registration: `build_server` (which both transports call) registers exactly `agent.mcp_server.TOOLS`, and a
tool module's `TOOLS` added to that list reaches the server."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from agent import default_mode_tools, mcp_server, memory_tools, push_tool, workflow_tools
from agent.client import Client
from tests.agent.tool_names import CORE_TOOLS

EXTRA = """
from typing import Any

from mcp.server.mcpserver import Context

from agent.mcp_common import tool
from agent.mcp_schema import ArgumentSpec


@tool("Echo a word back.", ArgumentSpec({"word": {"type": "string"}}, ["word"]), read_only=True)
async def echo(ctx: Context, args: dict[str, Any]) -> str:
    return str(args["word"])


TOOLS = [echo]
"""


async def provider() -> Client:
    raise AssertionError("listing tools does not reach the node")


async def test_a_listed_module_registers_its_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bbs_extra_tools.py").write_text(EXTRA)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "bbs_extra_tools", raising=False)
    extra = importlib.import_module("bbs_extra_tools")
    monkeypatch.setattr(mcp_server, "TOOLS", [*mcp_server.TOOLS, *extra.TOOLS])

    server = mcp_server.build_server(provider)
    names = [t.name for t in await server.list_tools()]
    assert names[-1] == "echo" and "post" in names
    tool = next(t for t in await server.list_tools() if t.name == "echo")
    assert tool.input_schema["required"] == ["word"] and tool.input_schema["additionalProperties"] is False
    assert list(tool.input_schema["properties"]) == ["word"]
    assert tool.annotations is not None and tool.annotations.read_only_hint is True


async def test_the_server_lists_every_module_s_tools_in_order() -> None:
    listed = [t.name for t in await mcp_server.build_server(provider).list_tools()]
    modules = [*workflow_tools.TOOLS, *default_mode_tools.TOOLS, *memory_tools.TOOLS, *push_tool.TOOLS]
    assert listed == [spec.name for spec in mcp_server.TOOLS]
    assert listed[: len(CORE_TOOLS)] == ["post", "read", "search", "link", "subscribe", "inbox"]
    assert listed[len(CORE_TOOLS) :] == [spec.name for spec in modules]
