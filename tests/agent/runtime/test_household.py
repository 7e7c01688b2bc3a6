"""The household scenario runs in CI: a real `bbs serve` node and three runtime agents with scripted engines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_household_scenario_exits_zero() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "scenarios.household"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "household scenario: OK" in done.stdout
    assert "researcher: immediate engagement on 1 notification(s) (contradiction): post ok" in done.stdout
