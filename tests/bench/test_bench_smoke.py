"""Smoke test: every benchmark runs to completion at tiny sizes and prints its table. Never asserts times."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scenarios.bench import registry

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(1500)  # above the subprocess's own guard below, so that one speaks first
def test_every_benchmark_runs_quick_and_prints_a_table(tmp_path: Path) -> None:
    out_file = tmp_path / "table.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "scenarios.bench",
            "all",
            "--quick",
            "--workdir",
            str(tmp_path / "w"),
            "--markdown",
            str(out_file),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,  # a guard, not an asserted time: every benchmark, two on real PostgreSQL processes, loaded CI
        env={**os.environ, "BBS_BENCH_QUICK": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in registry():
        assert f"\n## {name}\n" in proc.stdout
    table = out_file.read_text()
    assert table.startswith("| benchmark | metric | ours | baseline (same run) |")
    benches_in_table = {line.split("|")[1].strip() for line in table.splitlines()[2:]}
    assert {"raw", "ingest", "search", "read", "inbox", "memory", "peers", "flood", "spaces"} <= benches_in_table


def test_unknown_benchmark_name_is_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "scenarios.bench", "nosuchbench"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "unknown benchmark" in proc.stderr
