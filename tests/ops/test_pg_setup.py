"""docs/operations.md's "Setting up" on a real server: the SQL block there, run as written on a cluster of this
test's own whose local connections need a password, makes a role that is not a superuser, and `bbs init --store`
with the password in PGPASSWORD (not in the URL) creates the node's schema in that role's database."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from scenarios import pg_cluster as cluster_mod

pytestmark = pytest.mark.postgresql
OPERATIONS = Path(__file__).parents[2] / "docs" / "operations.md"
PASSWORD = "choose-one"  # the one the documented SQL sets


def documented_sql() -> str:
    """The first ```sql block after the "#### Setting up" heading of docs/operations.md."""
    text = OPERATIONS.read_text("utf-8")
    found = re.search(r"```sql\n(.*?)```", text[text.index("#### Setting up") :], re.S)
    assert found is not None
    return found.group(1)


def run_as_superuser(cluster: cluster_mod.Cluster, sql: str) -> None:
    """Run psql-like input: statements ending with `;` (comments dropped), `\\c NAME` to change database."""
    database = "postgres"
    pending = ""
    for line in sql.splitlines():
        line = line.split("--", 1)[0].strip()
        if line.startswith("\\c "):
            database = line.split()[1]
            continue
        pending += " " + line
        while ";" in pending:
            statement, pending = pending.split(";", 1)
            with psycopg.connect(cluster.url(database), autocommit=True) as conn:
                conn.execute(statement.strip())
    assert not pending.strip()


@pytest.fixture
def cluster() -> Iterator[cluster_mod.Cluster]:
    """A cluster of its own (its pg_hba.conf is rewritten): the superuser local and trusted, every other role
    asked for its password."""
    bindir = cluster_mod.find_bindir()
    assert bindir is not None
    started = cluster_mod.start(bindir)
    try:
        (started.data / "pg_hba.conf").write_text("local all postgres trust\nlocal all all scram-sha-256\n")
        started.admin("SELECT pg_reload_conf()")
        yield started
    finally:
        started.stop()


def init(data: Path, url: str, password: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    if password is not None:
        env["PGPASSWORD"] = password
    return subprocess.run(
        [sys.executable, "-m", "node.cli", "init", "--data", str(data), "--store", url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_documented_setup_runs_a_node_as_its_own_role_with_the_password_from_pgpassword(
    cluster: cluster_mod.Cluster, tmp_path: Path
) -> None:
    run_as_superuser(cluster, documented_sql())
    url = f"postgresql://bbs@/bbs?host={cluster.folder}&port={cluster_mod.PORT}"

    refused = init(tmp_path / "without", url, None)
    assert refused.returncode == 1
    assert "no password supplied" in refused.stderr and PASSWORD not in refused.stderr

    made = init(tmp_path / "node", url, PASSWORD)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "node" / "store.url").read_text().strip() == url  # no password written
    with psycopg.connect(cluster.url("bbs")) as conn:
        role = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = 'bbs'").fetchone()
        owners = conn.execute(
            "SELECT DISTINCT tableowner FROM pg_tables"
            " WHERE schemaname = 'public' AND tablename IN ('records', 'entries')"
        ).fetchall()
        settings = conn.execute("SELECT current_setting('wal_recycle')").fetchone()
        checkpoint = conn.execute("SELECT pg_has_role('bbs', 'pg_checkpoint', 'MEMBER')").fetchone()
        switch = conn.execute("SELECT has_function_privilege('bbs', 'pg_switch_wal()', 'EXECUTE')").fetchone()
    assert role == (False,)
    assert owners == [("bbs",)]
    assert settings == ("off",) and checkpoint == (True,) and switch == (True,)
