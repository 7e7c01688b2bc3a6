"""The SQL of `bbs migrate-store --to sqlite` (node/store/to_sqlite.py) on a real PostgreSQL database of the test
cluster and real SQLite files: rows streamed in batches with their texts unescaped, triggers dropped and made again
as they were, AUTOINCREMENT continued, a trial undone, other clients counted, the moved mark."""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path

import psycopg
import pytest

from node.ops import store as ops_store
from node.store import conn as neutral
from node.store import db, pg_conn
from node.store import to_sqlite as copy
from scenarios import pg_cluster as cluster_mod

pytestmark = pytest.mark.postgresql


def fresh_sqlite(tmp_path: Path) -> sqlite3.Connection:
    conn = db.connect(tmp_path / "bbs.db")
    db.migrate_store(conn)
    return conn


def test_rows_stream_in_batches_with_their_texts_unescaped(pg_migrated_url: str) -> None:
    pg = pg_conn.connect(pg_migrated_url)
    try:
        values = [(f"k{i}", f"v{i}\x00end" if i % 2 else f"v{i}") for i in range(copy.BATCH_ROWS + 5)]
        pg.executemany("INSERT INTO node_meta (key, value) VALUES (?, ?)", values)
        with pg.raw.transaction():
            batches = list(copy.pg_rows(pg, "node_meta", ["key", "value"]))
    finally:
        pg.close()
    assert [len(b) for b in batches][:1] == [copy.BATCH_ROWS] and len(batches) == 2
    assert set(values) <= {row for batch in batches for row in batch}  # a NUL comes back as it was bound


def test_triggers_are_dropped_for_the_copy_and_made_again_as_they_were(tmp_path: Path) -> None:
    conn = fresh_sqlite(tmp_path)
    try:
        triggers = copy.sqlite_triggers(conn)
        assert {name for name, _sql in triggers} >= {"waiting_counted", "entry_spaces_listed"}
        with db.transaction(conn, immediate=True):
            copy.drop_triggers(conn, triggers)
            assert copy.sqlite_triggers(conn) == []
            copy.create_triggers(conn, triggers)
        assert copy.sqlite_triggers(conn) == triggers
    finally:
        conn.close()


def test_autoincrement_goes_on_past_what_was_handed_out_never_back(tmp_path: Path) -> None:
    conn = fresh_sqlite(tmp_path)
    try:
        assert copy.autoincrement_tables(conn) == ["notifications", "records"]
        with db.transaction(conn, immediate=True):
            copy.continue_autoincrement(conn, "records", 41)
            copy.continue_autoincrement(conn, "notifications", 7)
            copy.continue_autoincrement(conn, "notifications", 3)  # never lowered
        seqs = dict(conn.execute("SELECT name, seq FROM sqlite_sequence").fetchall())
    finally:
        conn.close()
    assert seqs == {"records": 41, "notifications": 7}


def test_a_trial_is_undone_and_the_transaction_goes_on(tmp_path: Path) -> None:
    conn = fresh_sqlite(tmp_path)
    try:
        with db.transaction(conn, immediate=True):
            conn.execute("INSERT INTO node_meta (key, value) VALUES ('kept', '1')")
            with pytest.raises(RuntimeError), copy.undone(conn):
                conn.execute("INSERT INTO node_meta (key, value) VALUES ('trial', '1')")
                raise RuntimeError("the trial fails")
            with copy.undone(conn):
                conn.execute("INSERT INTO node_meta (key, value) VALUES ('trial', '2')")
        keys = {row[0] for row in conn.execute("SELECT key FROM node_meta")}
    finally:
        conn.close()
    assert "kept" in keys and "trial" not in keys


def test_other_clients_are_counted_and_the_mark_is_written(pg_migrated_url: str) -> None:
    pg = pg_conn.connect(pg_migrated_url)
    try:
        assert copy.other_clients(pg) == 0
        with psycopg.connect(pg_migrated_url), psycopg.connect(pg_migrated_url):
            assert copy.other_clients(pg) == 2
        assert ops_store.meta_value(pg, db.MOVED_KEY) is None
        with pg.raw.transaction():
            copy.take_writer_lock(pg)
            copy.mark_moved(pg, '{"at_ms": 1}')
        assert ops_store.meta_value(pg, db.MOVED_KEY) == '{"at_ms": 1}'
    finally:
        pg.close()


def test_another_roles_session_counts_for_a_role_that_cannot_see_its_type(
    pg_cluster: cluster_mod.Cluster, pg_migrated_url: str
) -> None:
    role = "plain_" + secrets.token_hex(4)
    dbname = pg_migrated_url.split("dbname=", 1)[1].split()[0]
    pg_cluster.admin(f"CREATE ROLE {role} LOGIN")
    try:
        pg_cluster.admin(f'GRANT CONNECT ON DATABASE "{dbname}" TO {role}')
        pg = pg_conn.connect(pg_cluster.url(dbname) + f" user={role}")
        try:
            with psycopg.connect(pg_migrated_url):  # the superuser's session: no backend type shown to `role`
                assert copy.other_clients(pg) == 1
        finally:
            pg.close()
    finally:
        pg_cluster.admin(f'REVOKE ALL ON DATABASE "{dbname}" FROM {role}')
        pg_cluster.admin(f"DROP ROLE {role}")


def test_the_writer_lock_is_waited_for_no_longer_than_lock_wait(
    pg_migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(copy, "LOCK_WAIT", "200ms")  # the wait's length; 10 s in use
    pg = pg_conn.connect(pg_migrated_url)
    try:
        with psycopg.connect(pg_migrated_url, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", (db.WRITER_LOCK,))  # a session idle, holding it
            with pytest.raises(neutral.DatabaseError) as waited, pg.raw.transaction():
                copy.take_writer_lock(pg)
        assert waited.value.sqlstate == neutral.LOCK_NOT_AVAILABLE
        with pg.raw.transaction():  # let go: taken at once, and the wait's limit ends with the transaction
            copy.take_writer_lock(pg)
        assert pg.execute("SHOW lock_timeout").fetchone()[0] == "0"
    finally:
        pg.close()
