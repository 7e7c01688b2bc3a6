"""node/store/db.py's `Database` over a PostgreSQL URL (docs/decisions.md record 80): the migrations of
node/store/migrations_pg on open, the writer's advisory lock, savepoints, `after_commit`, read-only REPEATABLE READ
readers and quick reads stopped by `statement_timeout`. Each runs on the throwaway cluster (scenarios/pg_cluster.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest

from node.errors import StoreMoved
from node.store import conn as neutral
from node.store import db as node_db
from node.store import pg_conn, pg_schema
from node.store.db import Database
from scenarios import pg_cluster as cluster_mod

pytestmark = pytest.mark.postgresql


@pytest.fixture
def empty_url(pg_cluster: cluster_mod.Cluster) -> Iterator[str]:
    name = pg_cluster.create_database()
    yield pg_cluster.store_url(name)
    pg_cluster.drop_database(name)


@pytest.fixture
async def database(empty_url: str) -> AsyncIterator[Database]:
    opened = Database(empty_url)
    opened.open()
    yield opened
    opened.close()


def values(conn: Any) -> list[str]:
    return [row[0] for row in conn.execute("SELECT key FROM node_meta WHERE key LIKE 't%' ORDER BY key")]


def insert(key: str) -> Any:
    return lambda conn: conn.execute("INSERT INTO node_meta (key, value) VALUES (?, 'v')", (key,)).rowcount


async def test_open_migrates_an_empty_database_to_the_head(database: Database, empty_url: str) -> None:
    assert database.pg_url == empty_url
    assert database.schema_version == pg_schema.migrations()[-1][0]
    assert node_db.is_postgresql_url(empty_url) and not node_db.is_postgresql_url("host=/tmp dbname=x")


async def test_a_write_commits_calls_after_commit_and_a_read_sees_it(database: Database) -> None:
    called: list[int] = []
    database.after_commit.append(lambda: called.append(1))
    assert await database.write(insert("t1")) == 1
    assert called == [1]
    assert await database.read(values) == ["t1"]
    assert database.stats.transactions == 1 and database.stats.statements >= 2  # the lock, the INSERT


async def test_jobs_of_one_batch_fail_alone_in_their_savepoints(database: Database) -> None:
    def failing(conn: Any) -> None:
        conn.execute("INSERT INTO node_meta (key, value) VALUES ('t2', 'v')")
        conn.execute("INSERT INTO node_meta (key, value) VALUES ('t2', 'again')")  # a unique violation

    outcomes = await asyncio.gather(
        database.write(insert("t1")), database.write(failing), database.write(insert("t3")), return_exceptions=True
    )
    assert outcomes[0] == 1 and outcomes[2] == 1
    assert isinstance(outcomes[1], neutral.UniqueViolation)
    assert await database.read(values) == ["t1", "t3"]


async def test_a_job_that_catches_a_database_error_is_refused_not_acknowledged(database: Database) -> None:
    """PostgreSQL aborts the transaction at the error; its COMMIT would roll back silently: the job fails instead."""
    await database.write(insert("t1"))

    def caught(conn: Any) -> str:
        conn.execute("INSERT INTO node_meta (key, value) VALUES ('t2', 'v')")
        try:
            conn.execute("INSERT INTO node_meta (key, value) VALUES ('t1', 'v')")
        except neutral.IntegrityError:
            return "carried on"
        return "no conflict"

    with pytest.raises(neutral.OperationalError, match="aborted"):
        await database.write(caught)
    outcomes = await asyncio.gather(database.write(caught), database.write(insert("t3")), return_exceptions=True)
    assert isinstance(outcomes[0], neutral.OperationalError) and outcomes[1] == 1
    assert await database.read(values) == ["t1", "t3"]


async def test_the_writer_takes_the_node_lock_so_one_writes_at_a_time_across_processes(
    database: Database, empty_url: str
) -> None:
    """Another process holding the writer's advisory lock holds the node's writes: the write waits on it (seen in
    pg_locks) and commits once it is released."""
    with psycopg.connect(empty_url, autocommit=True) as other:
        other.execute("BEGIN")
        other.execute("SELECT pg_advisory_xact_lock(%s)", (node_db.WRITER_LOCK,))
        write = asyncio.ensure_future(database.write(insert("t1")))
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        for _ in range(500):
            if other.execute(waiting).fetchone() == (1,):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the write never waited for the node's writer lock")
        assert not write.done()
        other.execute("COMMIT")
        assert await write == 1
    assert await database.read(values) == ["t1"]


async def test_readers_are_read_only(database: Database) -> None:
    for quick in (False, True):
        with pytest.raises(neutral.DatabaseError, match="read-only"):
            await database.read(insert("t1"), quick=quick)
    assert await database.read(values) == []


async def test_a_read_is_one_snapshot(database: Database, empty_url: str) -> None:
    """REPEATABLE READ: a write committed while a read runs is not seen by that read (READ COMMITTED would)."""

    def read_twice(conn: Any) -> tuple[list[str], list[str]]:
        first = values(conn)
        with psycopg.connect(empty_url, autocommit=True) as other:
            other.execute("INSERT INTO node_meta (key, value) VALUES ('t9', 'v')")
        return first, values(conn)

    assert await database.read(read_twice) == ([], [])
    assert await database.read(values) == ["t9"]


async def test_a_quick_read_runs_inline_and_moves_to_a_reader_past_its_budget(database: Database) -> None:
    await database.write(insert("t1"))
    stats = database.read_stats
    assert await database.read(values, quick=True) == ["t1"]
    assert stats.inline + stats.moved == 1  # on the loop (moved only if a loaded machine ran it past its budget)
    inline, moved = stats.inline, stats.moved

    def slow(conn: Any) -> list[str]:
        conn.execute("SELECT pg_sleep(0.2)")  # past the 2 ms statement_timeout: stopped by the server
        return values(conn)

    assert await database.read(slow, quick=True) == ["t1"]  # answered by a reader thread
    assert (stats.inline, stats.moved) == (inline, moved + 1)

    def caught(conn: Any) -> list[str]:
        try:
            conn.execute("SELECT pg_sleep(0.2)")
        except neutral.OperationalError:
            return ["partial"]
        return values(conn)

    assert await database.read(caught, quick=True) == ["t1"]  # the caught stop is not taken as the answer
    assert (stats.inline, stats.moved) == (inline, moved + 2)


async def test_a_quick_read_runs_on_generic_plans_for_its_transaction_only(database: Database) -> None:
    """QUICK_PLANS holds for the quick read's transaction only (SET LOCAL): its connection is back to the server's
    choice once the read has ended, and a reader thread's read plans as the server chooses."""
    used: list[Any] = []

    def mode(conn: Any) -> str:
        used.append(conn)
        return str(conn.execute("SHOW plan_cache_mode").fetchone()[0])

    assert await database.read(mode, quick=True) == "force_generic_plan"
    assert mode(used[0]) == "auto"  # the loop's own connection, after the read's transaction
    assert await database.read(mode) == "auto"
    assert await database.read(mode, quick=True) == "force_generic_plan"


async def test_write_sync_and_read_sync_take_a_url(database: Database, empty_url: str) -> None:
    assert node_db.write_sync(empty_url, insert("t5")) == 1
    assert node_db.read_sync(empty_url, values) == ["t5"]
    with pytest.raises(neutral.DatabaseError, match="read-only"):
        node_db.read_sync(empty_url, insert("t6"))


async def test_a_database_marked_as_moved_refuses_every_write_at_its_start(database: Database, empty_url: str) -> None:
    # a process left serving a database the node moved out of (it reconnected after `bbs migrate-store --to sqlite`)
    assert await database.write(insert("t7")) == 1
    with psycopg.connect(empty_url, autocommit=True) as other:
        other.execute("INSERT INTO node_meta (key, value) VALUES (%s, '{}')", (node_db.MOVED_KEY,))
        clock = other.execute("SELECT n FROM write_clock").fetchone()
    with pytest.raises(StoreMoved):
        await database.write(insert("t8"))  # the process's writer
    with pytest.raises(StoreMoved):
        node_db.write_sync(empty_url, insert("t9"))  # a command's write
    assert await database.read(values) == ["t7"]
    with psycopg.connect(empty_url) as other:
        assert other.execute("SELECT n FROM write_clock").fetchone() == clock  # nothing moved the clock either


async def test_a_write_transaction_whose_begin_fails_leaves_no_aborted_transaction(empty_url: str) -> None:
    # the BEGIN script's lock wait cut short (a statement_timeout): the connection is left usable, not aborted
    node_db.write_sync(empty_url, insert("t10"))  # migrated
    conn: Any = pg_conn.connect(empty_url)  # `transaction` is typed for sqlite3 and takes either engine
    try:
        with psycopg.connect(empty_url, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", (node_db.WRITER_LOCK,))
            conn.execute("SET statement_timeout = 100")
            with pytest.raises(neutral.DatabaseError), node_db.transaction(conn, immediate=True):
                pass
        assert not conn.in_transaction
        conn.execute("SET statement_timeout = 0")
        with node_db.transaction(conn, immediate=True):
            conn.execute("INSERT INTO node_meta (key, value) VALUES ('t11', 'v')")
        assert values(conn) == ["t10", "t11"]
    finally:
        conn.close()


async def test_connections_lost_with_the_server_are_reopened(database: Database, empty_url: str) -> None:
    """A writer or reader whose backend ended (a server restart) fails the one job that found it so, nothing
    written, and the next one runs on a new connection; a reader the same."""
    await database.write(insert("t1"))
    assert await database.read(values) == ["t1"]
    assert await database.read(values, quick=True) == ["t1"]
    with psycopg.connect(empty_url, autocommit=True) as other:
        ended = other.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert ended is not None and ended[0] >= 3  # the writer, a reader, the event loop's quick reader
    with pytest.raises(neutral.OperationalError):
        await database.write(insert("t2"))
    assert await database.write(insert("t3")) == 1
    for quick in (False, True):
        with pytest.raises(neutral.OperationalError):
            await database.read(values, quick=quick)
        assert await database.read(values, quick=quick) == ["t1", "t3"]


async def test_a_transaction_whose_connection_is_lost_is_not_rolled_back_again(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """The server rolls back a transaction whose connection ended; the writer's ROLLBACK on the closed connection
    failed and was logged with two stacks ("rollback failed"), which multiproc chaos found at every server restart."""

    def lost_midway(conn: Any) -> None:
        insert("t7")(conn)
        conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    with caplog.at_level(logging.WARNING, logger="bbs.db"):
        with pytest.raises(neutral.ConnectionLost):
            await database.write(lost_midway)
        assert await database.write(insert("t8")) == 1
    assert await database.read(values) == ["t8"]
    assert [r.getMessage() for r in caplog.records if r.exc_info is not None or "rollback" in r.getMessage()] == []


async def test_a_rollback_that_finds_the_connection_lost_is_one_line(
    database: Database, empty_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A job fails while its connection was ended under it unnoticed (nothing read since): the ROLLBACK is what
    finds it lost, and says so in one warning; the job's own error is what goes up."""

    def failing_after_its_backend_ended(conn: Any) -> None:
        insert("t9")(conn)
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        with psycopg.connect(empty_url, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
        raise ValueError("the job's own error")

    with caplog.at_level(logging.WARNING, logger="bbs.db"), pytest.raises(ValueError, match="own error"):
        await database.write(failing_after_its_backend_ended)
    lost = [r for r in caplog.records if "rollback failed" in r.getMessage()]
    assert len(lost) == 1 and lost[0].levelno == logging.WARNING and lost[0].exc_info is None
    assert "connection was lost" in lost[0].getMessage()
    assert await database.write(insert("t10")) == 1
    assert await database.read(values) == ["t10"]
