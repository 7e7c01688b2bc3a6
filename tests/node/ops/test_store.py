"""node.ops.store: the operator tools' SQL, on real SQLite files in tmp_path (a migrated node database, and a
bare one for what a half-made data folder holds)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.ops import store
from node.store import db


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """A migrated node database (WAL, the node's pragmas), no node identity yet."""
    c = db.connect(tmp_path / "bbs.db")
    db.migrate(c)
    yield c
    c.close()


def test_node_identity(conn: sqlite3.Connection, tmp_path: Path) -> None:
    assert store.stored_node_id(conn) is None and store.meta_value(conn, "node_id") is None
    with db.transaction(conn, immediate=True):
        store.insert_node_identity_txn(conn, "did:key:zNode", "e1")
    assert store.stored_node_id(conn) == "did:key:zNode"
    assert (store.meta_value(conn, "node_id"), store.meta_value(conn, "epoch")) == ("did:key:zNode", "e1")
    with pytest.raises(sqlite3.IntegrityError), db.transaction(conn, immediate=True):  # a node is made once
        store.insert_node_identity_txn(conn, "did:key:zOther", "e2")
    assert store.stored_node_id(conn) == "did:key:zNode"
    bare = sqlite3.connect(tmp_path / "bare.db")  # a start that never got going: no node_meta table at all
    try:
        assert store.stored_node_id(bare) is None
    finally:
        bare.close()


def test_renew_epoch_keeps_the_previous_one(conn: sqlite3.Connection) -> None:
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


def test_database_checks(conn: sqlite3.Connection) -> None:
    assert store.integrity_problems(conn) == ["ok"]
    assert store.schema_version(conn) == db.migrations()[-1][0]
    assert store.record_count(conn) == 0
    assert {"node_id", "url", "cursor_seq"} <= store.table_columns(conn, "peers")
    assert store.table_columns(conn, "no_such_table") == set()


def test_peer_urls(conn: sqlite3.Connection) -> None:
    assert store.peer_urls(conn, "url", "node_id") == []
    conn.execute("INSERT INTO peers (node_id, url, added_ms) VALUES ('did:key:zPeer', 'http://peer:1', 1)")
    assert store.peer_urls(conn, "url", "node_id") == [("http://peer:1", "did:key:zPeer")]
    assert store.peer_urls(conn, "url", None) == [("http://peer:1", None)]


def test_journal_mode_and_checkpoint(conn: sqlite3.Connection, tmp_path: Path) -> None:
    wal = tmp_path / "bbs.db-wal"
    conn.execute("INSERT INTO node_meta (key, value) VALUES ('x', 'y')")
    assert wal.stat().st_size > 0
    store.checkpoint_truncate(conn)
    assert wal.stat().st_size == 0
    store.use_rollback_journal(conn)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert not wal.exists()


def test_query_gauges(conn: sqlite3.Connection) -> None:
    with db.transaction(conn, immediate=True):
        store.insert_node_identity_txn(conn, "did:key:zNode", "e1")
    rows = store.query_gauges(conn, store.SQL_GAUGES, 42)
    assert set(rows) == {g.name for g in store.SQL_GAUGES}  # every table exists on a migrated database
    assert rows["bbs_records"] == [] and rows["bbs_equivocations"] == [(0,)]
    extra = (
        store.SqlGauge("bbs_test_clock", "now", (), "SELECT :now_ms"),
        store.SqlGauge("bbs_test_missing", "not installed", (), "SELECT count(*) FROM no_such_table"),
    )
    assert store.query_gauges(conn, extra, 42) == {"bbs_test_clock": [(42,)]}  # a missing table: left out
    broken = (store.SqlGauge("bbs_test_broken", "a typo", (), "SELEC 1"),)
    with pytest.raises(sqlite3.OperationalError):  # any other error is a bug and goes up
        store.query_gauges(conn, broken, 42)
