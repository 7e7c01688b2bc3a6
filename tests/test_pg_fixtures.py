"""Where PostgreSQL is not installed, the PostgreSQL tests are deselected, and under CI that is an error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# pytest in a child process, told that no PostgreSQL is installed (BINDIR is what find_bindir found)
WITHOUT_POSTGRESQL = """
import sys
import pytest
import tests.pg_fixtures
tests.pg_fixtures.BINDIR = None
sys.exit(pytest.main(["-n", "0", "-q", "-p", "no:cacheprovider", "tests/node/store/test_pg_conn.py",
                     "tests/node/store/test_projections.py", "-k", "pg_conn or either_engine or rolled_back"]))
"""


def run_without_postgresql(ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": "true"} if ci else {})
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_POSTGRESQL], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_without_postgresql_its_tests_are_deselected_and_the_rest_run() -> None:
    done = run_without_postgresql(ci=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PostgreSQL tests deselected: PostgreSQL is not installed" in done.stdout
    assert " passed, " in done.stdout and " deselected" in done.stdout  # the SQLite half ran


def test_under_ci_a_missing_postgresql_fails_the_run() -> None:
    done = run_without_postgresql(ci=True)
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error: nothing ran
    assert "CI is set but PostgreSQL is not installed" in done.stdout + done.stderr
