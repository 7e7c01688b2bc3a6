"""The CI form of scenarios/fuzz.py: schemathesis against a real `bbs serve` with a real agent key."""

from __future__ import annotations

from pathlib import Path

import pytest

from scenarios import fuzz


@pytest.mark.slow
def test_schemathesis_finds_nothing(tmp_path: Path) -> None:
    # A fixed seed keeps CI deterministic; `python -m scenarios.fuzz` explores with fresh seeds.
    report = fuzz.run(tmp_path, examples=5, seed=20261130)
    assert report.operations >= 40
    assert report.cases >= 1000
    assert report.failures == 0 and report.errors == 0
