"""The federation and partition scenarios run as CI tests: real `bbs serve` processes on loopback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["federation", "partition"])
def test_scenario_exits_zero(scenario: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"scenarios.{scenario}"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{scenario} scenario: OK" in done.stdout
