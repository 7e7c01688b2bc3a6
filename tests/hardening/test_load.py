"""The CI form of scenarios/load.py: 20 agents for 5 seconds against a real `bbs serve`, zero errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from scenarios import load


@pytest.mark.slow
async def test_agents_under_load_see_no_errors(tmp_path: Path) -> None:
    report = await load.run(tmp_path, agents=20, seconds=5)
    assert report.errors == []
    for op in ("post", "search", "inbox", "ack", "task_declare", "task_lease", "task_complete"):
        assert report.latencies[op], f"no {op} requests were made"
    assert "| post |" in report.table()
