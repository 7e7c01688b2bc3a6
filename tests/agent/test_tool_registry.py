"""The tool registry: a module listed in TOOL_MODULES adds its tools to both transports' server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agent import mcp_server
from agent.client import Client

EXTRA = """
from mcp.server.mcpserver import Context

from agent.mcp_server import tool


@tool("Echo a word back.", read_only=True)
async def echo(ctx: Context, word: str) -> str:
    return word
"""


async def test_a_listed_module_registers_its_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bbs_extra_tools.py").write_text(EXTRA)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(mcp_server, "TOOLS", list(mcp_server.TOOLS))
    monkeypatch.setattr(mcp_server, "TOOL_MODULES", ["bbs_extra_tools"])
    monkeypatch.delitem(sys.modules, "bbs_extra_tools", raising=False)

    async def provider() -> Client:
        raise AssertionError("echo does not reach the node")

    server = mcp_server.build_server(provider)
    names = [t.name for t in await server.list_tools()]
    assert names[-1] == "echo" and "post" in names
    tool = next(t for t in await server.list_tools() if t.name == "echo")
    assert tool.input_schema["required"] == ["word"]
    assert "ctx" not in tool.input_schema["properties"]
