"""node.store.side: a process's own autocommit connection to the node's PostgreSQL database, outside the writer."""

from __future__ import annotations

import psycopg
import pytest

from node.store import pg_text
from node.store.side import SideConnection, SideUnavailable


async def test_a_statement_answers_its_rows_and_each_one_commits_alone(pg_migrated_url: str) -> None:
    side = SideConnection(pg_migrated_url)
    try:
        assert await side.fetch("INSERT INTO node_meta (key, value) VALUES (%s, %s)", ("k", "v")) == []
        assert await side.fetch("SELECT value FROM node_meta WHERE key = %s", ("k",)) == [("v",)]
        with psycopg.connect(pg_migrated_url) as other:  # committed: another connection sees it
            assert other.execute("SELECT value FROM node_meta WHERE key = 'k'").fetchone() == ("v",)
        assert side.statements == 2
    finally:
        await side.close()


async def test_text_holding_nul_is_bound_escaped_as_the_nodes_connections_bind_it(pg_migrated_url: str) -> None:
    side = SideConnection(pg_migrated_url)
    try:
        await side.fetch("INSERT INTO node_meta (key, value) VALUES (%s, %s)", ("a\x00b", "\x01"))
        rows = await side.fetch("SELECT key, value FROM node_meta WHERE key = %s", ("a\x00b",))
        assert rows == [(pg_text.escape_text("a\x00b"), pg_text.escape_text("\x01"))]
    finally:
        await side.close()


async def test_a_lost_connection_is_opened_again_and_the_statement_run_again_only_when_allowed(
    pg_migrated_url: str,
) -> None:
    side = SideConnection(pg_migrated_url)
    try:
        for again in (True, False):
            pid = (await side.fetch("SELECT pg_backend_pid()"))[0][0]
            with psycopg.connect(pg_migrated_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            if again:
                assert await side.fetch("SELECT 1", again=True) == [(1,)]
            else:
                with pytest.raises(SideUnavailable):
                    await side.fetch("SELECT 1", again=False)
                assert await side.fetch("SELECT 1") == [(1,)]  # the next statement opens a new connection
    finally:
        await side.close()


async def test_an_unreachable_database_is_side_unavailable_and_sql_errors_are_neutral(pg_migrated_url: str) -> None:
    from node.store.conn import DatabaseError

    with pytest.raises(SideUnavailable):
        await SideConnection(pg_migrated_url.replace("dbname=", "dbname=no_such_database_", 1)).fetch("SELECT 1")
    side = SideConnection(pg_migrated_url)
    try:
        with pytest.raises(DatabaseError):
            await side.fetch("SELECT * FROM no_such_table")
        assert await side.fetch("SELECT 2") == [(2,)]  # the connection is still good
    finally:
        await side.close()
