"""node.ops.store: the operator tools' SQL, on real SQLite files in tmp_path (a migrated node database, and a
bare one for what a half-made data folder holds)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from node.ops import store
from node.store import db, pg_conn
from node.store.conn import POSTGRESQL, engine_of
from tests.pg_fixtures import OpenStore


@pytest.fixture
def conn(open_store: OpenStore) -> Any:
    """A migrated node database of this run's engine, no node identity yet (typed Any: `db.transaction` takes
    either engine's connection)."""
    return open_store(None)


def test_node_identity(conn: Any, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    assert store.stored_node_id(conn) is None and store.meta_value(conn, "node_id") is None
    with db.transaction(conn, immediate=True):
        store.insert_node_identity_txn(conn, "did:key:zNode", "e1")
    assert store.stored_node_id(conn) == "did:key:zNode"
    assert (store.meta_value(conn, "node_id"), store.meta_value(conn, "epoch")) == ("did:key:zNode", "e1")
    with pytest.raises(sqlite3.IntegrityError), db.transaction(conn, immediate=True):  # a node is made once
        store.insert_node_identity_txn(conn, "did:key:zOther", "e2")
    assert store.stored_node_id(conn) == "did:key:zNode"
    # a start that never got going: no node_meta table at all
    bare: Any = sqlite3.connect(tmp_path / "bare.db")
    if engine_of(conn) == POSTGRESQL:
        bare = pg_conn.connect(request.getfixturevalue("pg_url"))
    try:
        assert store.stored_node_id(bare) is None
    finally:
        bare.close()


def test_renew_epoch_keeps_the_previous_one(conn: Any) -> None:
    with db.transaction(conn, immediate=True):
        store.insert_node_identity_txn(conn, "did:key:zNode", "e1")
    with db.transaction(conn, immediate=True):
        store.renew_epoch_txn(conn, "e2", "e1", 1234)
    assert [store.meta_value(conn, k) for k in ("node_id", "epoch", "previous_epoch", "restored_ms")] == [
        "did:key:zNode",
        "e2",
        "e1",
        "1234",
    ]
    with db.transaction(conn, immediate=True):  # a second restore overwrites, never duplicates
        store.renew_epoch_txn(conn, "e3", "e2", 5678)
    assert (store.meta_value(conn, "epoch"), store.meta_value(conn, "previous_epoch")) == ("e3", "e2")


@pytest.mark.sqlite_only(reason="PRAGMA integrity_check: bbs doctor reads a SQLite file (record 80)")
def test_the_integrity_check(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "bbs.db")
    db.migrate(conn)
    assert store.integrity_problems(conn) == ["ok"]
    conn.close()


def test_database_checks(conn: Any) -> None:
    assert store.schema_version(conn) == db.migrations()[-1][0]
    assert store.record_count(conn) == 0
    assert {"node_id", "url", "cursor_seq"} <= store.table_columns(conn, "peers")
    assert store.table_columns(conn, "no_such_table") == set()


def test_peer_urls(conn: Any) -> None:
    assert store.peer_urls(conn, "url", "node_id") == []
    conn.execute("INSERT INTO peers (node_id, url, added_ms) VALUES ('did:key:zPeer', 'http://peer:1', 1)")
    assert store.peer_urls(conn, "url", "node_id") == [("http://peer:1", "did:key:zPeer")]
    assert store.peer_urls(conn, "url", None) == [("http://peer:1", None)]


@pytest.mark.sqlite_only(reason="SQLite's WAL file, its checkpoint and journal mode")
def test_journal_mode_and_checkpoint(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "bbs.db")
    db.migrate(conn)
    wal = tmp_path / "bbs.db-wal"
    conn.execute("INSERT INTO node_meta (key, value) VALUES ('x', 'y')")
    assert wal.stat().st_size > 0
    store.checkpoint_truncate(conn)
    assert wal.stat().st_size == 0
    store.use_rollback_journal(conn)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert not wal.exists()
    conn.close()


def test_query_gauges(conn: Any) -> None:
    with db.transaction(conn, immediate=True):
        store.insert_node_identity_txn(conn, "did:key:zNode", "e1")
    with db.transaction(conn, commit=False):  # as the node's reads run (a savepoint per gauge on PostgreSQL)
        rows = store.query_gauges(conn, store.SQL_GAUGES, 42)
    assert set(rows) == {g.name for g in store.SQL_GAUGES}  # every table exists on a migrated database
    assert rows["bbs_records"] == [] and rows["bbs_equivocations"] == [(0,)]
    extra = (
        store.SqlGauge("bbs_test_clock", "now", (), "SELECT :now_ms"),
        store.SqlGauge("bbs_test_missing", "not installed", (), "SELECT count(*) FROM no_such_table"),
    )
    with db.transaction(conn, commit=False):  # a missing table: left out
        assert store.query_gauges(conn, extra, 42) == {"bbs_test_clock": [(42,)]}
    broken = (store.SqlGauge("bbs_test_broken", "a typo", (), "SELEC 1"),)
    with pytest.raises(sqlite3.DatabaseError), db.transaction(conn, commit=False):  # any other error goes up
        store.query_gauges(conn, broken, 42)
