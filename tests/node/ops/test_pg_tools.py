"""PostgreSQL's programs for backups (node/ops/pg_tools.py): found, given no password on their command line, a
dump's rows read without a restore, and a restore that fails changes nothing."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from node.errors import BBSError, Conflict, NotFound
from node.ops import pg_tools
from scenarios.pg_cluster import Cluster


def test_the_password_goes_in_the_environment_not_on_the_command_line() -> None:
    dsn, env = pg_tools._target("postgresql://bbs:s3cret@db.example/node?sslmode=require")
    assert "s3cret" not in dsn and env["PGPASSWORD"] == "s3cret"
    assert "dbname=node" in dsn and "host=db.example" in dsn and "sslmode=require" in dsn
    dsn, _ = pg_tools._target("postgresql://bbs@/node?host=/tmp/socket")
    assert "host=/tmp/socket" in dsn and "password" not in dsn


def test_copy_fields_are_unescaped() -> None:
    assert pg_tools._copy_field("did:key:z6Mk") == "did:key:z6Mk"
    assert pg_tools._copy_field("a\\tb\\nc\\\\d") == "a\tb\nc\\d"


def test_a_missing_program_is_named() -> None:
    assert Path(pg_tools.program("pg_dump")).is_file()
    with pytest.raises(NotFound) as info:
        pg_tools.program("pg_no_such_program")
    assert info.value.code == "pg_tool_missing"


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {str(row[0]) for row in rows}


@pytest.fixture
def dumped(pg_url: str, tmp_path: Path) -> Path:
    """A dump of a database holding one table `kept` with one row, its text needing COPY's escapes."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (key text, value text)")
        conn.execute("INSERT INTO kept VALUES ('node_id', 'tab\there')")
    out = tmp_path / "db.pgdump"
    pg_tools.dump(pg_url, out)
    return out


def test_rows_are_read_from_a_dump_without_restoring_it(dumped: Path) -> None:
    pg_tools.check_dump(dumped)
    assert pg_tools.table_rows(dumped, "kept") == [["node_id", "tab\there"]]


def test_a_restore_is_one_transaction(dumped: Path, pg_cluster: Cluster) -> None:
    target = pg_cluster.url(pg_cluster.create_database())
    with pytest.raises(BBSError) as info:  # the statement before the load fails: the load is not kept either
        pg_tools.restore(dumped, target, "CREATE TABLE marker (x int); SELECT 1 / 0")
    assert info.value.code == "pg_tool_failed"
    assert _tables(target) == set()
    assert not dumped.with_name(dumped.name + ".sql").exists()  # the script written for psql is removed
    pg_tools.restore(dumped, target, "CREATE TABLE marker (x int)")
    assert _tables(target) == {"kept", "marker"}
    pg_cluster.drop_database(target.rsplit("dbname=", 1)[1])


def test_a_restore_into_a_database_another_session_holds_fails_in_bounded_time(
    dumped: Path, pg_cluster: Cluster
) -> None:
    """A session left in a transaction that read a table the restore drops: the restore gives up after its lock
    timeout (409 `database_in_use`) instead of waiting for ever, and changes nothing."""
    name = pg_cluster.create_database()
    target = pg_cluster.url(name)
    pg_tools.restore(dumped, target, "SELECT 1")
    with psycopg.connect(target) as holder:  # not autocommit: its transaction stays open, holding ACCESS SHARE
        holder.execute("SELECT count(*) FROM kept").fetchone()
        with pytest.raises(Conflict) as info:
            pg_tools.restore(dumped, target, "DROP TABLE kept", lock_timeout_ms=200)
        assert info.value.code == "database_in_use" and "stop every process" in str(info.value)
        holder.rollback()
    assert _tables(target) == {"kept"}
    pg_cluster.drop_database(name)
