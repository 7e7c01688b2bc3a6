"""The tools as they are, wherever they are listed: tests/agent/tool_names.py, the table of docs/mcp.md (every tool
and every argument of each) and the tool list of the bbs-operations skill."""

from __future__ import annotations

import re
from pathlib import Path

from agent.mcp_server import TOOLS, skill_text
from tests.agent.tool_names import ALL_TOOLS

ROOT = Path(__file__).resolve().parents[2]


def table_rows() -> dict[str, set[str]]:
    """The tools table of docs/mcp.md: tool -> the backticked names of its arguments column."""
    text = (ROOT / "docs" / "mcp.md").read_text("utf-8")
    section = text[text.index("## The tools") : text.index("### Results")]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        match = re.match(r"^\| `([a-z_]+)` \|.*\| (.*) \|$", line)
        if match:
            # argument names, not the fields of an example such as `[{target, link_type, annotation}]`
            rows[match.group(1)] = set(re.findall(r"`([a-z_]+)`", match.group(2)))
    return rows


def test_tool_names_lists_the_tools_served() -> None:
    assert {spec.name for spec in TOOLS} == ALL_TOOLS


def test_docs_mcp_lists_every_tool_and_every_argument() -> None:
    rows = table_rows()
    assert list(rows) == [spec.name for spec in TOOLS]
    for spec in TOOLS:
        assert rows[spec.name] == set(spec.arguments.properties), spec.name


def test_docs_mcp_counts_the_tools_right() -> None:
    text = (ROOT / "docs" / "mcp.md").read_text("utf-8")
    words = {12: "twelve"}
    assert words[len(TOOLS)] in text and "seven tools" not in text


def test_the_skill_names_every_tool() -> None:
    skill = skill_text()
    listed = skill[skill.index("Tools:") : skill.index("\n\n", skill.index("Tools:"))]
    assert set(re.findall(r"`([a-z_]+)`", listed)) >= ALL_TOOLS
