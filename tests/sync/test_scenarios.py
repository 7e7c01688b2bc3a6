"""The federation and partition scenarios run as CI tests: real `bbs serve` processes on loopback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scenarios import federation
from scenarios import pg_cluster as pg_cluster_mod
from scenarios.fednet import ServedNode

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["federation", "partition"])
def test_scenario_exits_zero(scenario: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"scenarios.{scenario}"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{scenario} scenario: OK" in done.stdout


@pytest.mark.slow
async def test_federation_through_a_postgresql_node(tmp_path: Path, pg_cluster: pg_cluster_mod.Cluster) -> None:
    """The federation scenario with its middle node B on PostgreSQL (a real `bbs serve --store postgresql://...`):
    A's and C's records reach each other only through B; digests equal, the same records and bodies on all three."""
    await federation.run(tmp_path, store_b=pg_cluster.store_url(pg_cluster.create_database()))
    held = [federation.federated_bodies(ServedNode(name, tmp_path / name)) for name in ("a", "b", "c")]
    assert held[0] == held[1] == held[2] and len(held[0]) > 20  # read after the run, B's from PostgreSQL
