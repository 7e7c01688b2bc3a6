"""The SQL of redaction on a real migrated SQLite file: the projection row, tombstones and their versions, the scrub
schedule, and the checkpoint; the tombstones' reads on each engine (`open_store`), answering alike."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from node.redaction import store
from node.store import db
from tests.node.migrated import database_before
from tests.pg_fixtures import OpenStore


def migrated(tmp_path: Path) -> sqlite3.Connection:
    conn = db.connect(tmp_path / "bbs.db")
    db.migrate(conn)
    return conn


def test_a_redaction_is_projected_once_and_found_by_its_target(tmp_path: Path) -> None:
    conn = migrated(tmp_path)
    row = store.RedactionRow("r" * 64, 7, "t" * 64, "did:key:a", "2026-01-01T00:00:00Z", None, "leaked")
    store.insert_redaction_txn(conn, row)
    store.insert_redaction_txn(conn, row)
    assert store.redactions_of(conn, ["t" * 64, "x" * 64]) == [row]
    assert store.redaction(conn, "r" * 64) == row and store.redaction(conn, "t" * 64) is None


def test_a_tombstone_keeps_its_first_redaction_and_gains_versions(open_store: OpenStore) -> None:
    conn = open_store(None)
    first = store.TombstoneRow("t" * 64, "entry", "did:key:a", "2026-01-01T00:00:00Z", None, ["v2"], "r1",
                               "did:key:a", "2026-01-02T00:00:00Z", 10)  # fmt: skip
    store.insert_tombstone_txn(conn, first)
    store.insert_tombstone_txn(conn, first._replace(versions=["v1", "v2"], redaction="r2"))
    (kept,) = store.tombstones(conn, ["t" * 64])
    assert kept.versions == ["v1", "v2"] and kept.redaction == "r1"
    assert store.count(conn) == 1


def test_a_redacted_address_keeps_its_space_in_its_tombstone(open_store: OpenStore) -> None:
    conn = open_store(None)
    space = "s" * 64
    for address, in_space in (("a" * 64, space), ("b" * 64, None)):
        store.insert_tombstone_txn(conn, store.TombstoneRow(address, "entry", "did:key:a", "2026-01-01T00:00:00Z",
                                                            in_space, ["v"], "r", "did:key:a", "2026-01-02T00:00:00Z",
                                                            10))  # fmt: skip
    assert store.redacted_spaces(conn, ["a" * 64, "b" * 64, "c" * 64]) == {"a" * 64: space, "b" * 64: None}


def test_a_scrub_is_due_once_its_grace_has_passed_and_runs_once(tmp_path: Path) -> None:
    conn = migrated(tmp_path)
    store.schedule_scrub_txn(conn, "a" * 64, 1_000)
    store.schedule_scrub_txn(conn, "b" * 64, 5_000)
    assert store.due_scrubs(conn, 999) == []
    assert store.due_scrubs(conn, 1_000) == ["a" * 64]
    assert store.pending_scrubs(conn) == (2, 1_000)
    store.mark_scrubbed_txn(conn, ["a" * 64], 2_000)
    assert store.due_scrubs(conn, 10_000) == ["b" * 64] and store.pending_scrubs(conn) == (1, 5_000)


def test_the_checkpoint_empties_the_wal_and_waits_for_a_reader(tmp_path: Path) -> None:
    conn = migrated(tmp_path)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES ('hello')")
    wal = tmp_path / "bbs.db-wal"
    assert wal.stat().st_size > 0
    reader = sqlite3.connect(tmp_path / "bbs.db", isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM t").fetchall()  # holds a snapshot
    conn.execute("INSERT INTO t VALUES ('again')")
    assert store.checkpoint(str(tmp_path / "bbs.db"), tries=2, pause_s=0.01) is False  # the reader blocks it
    reader.execute("COMMIT")
    assert store.checkpoint(str(tmp_path / "bbs.db"), tries=2, pause_s=0.01) is True
    assert wal.stat().st_size == 0


def test_migration_0039_keeps_what_an_earlier_database_held(tmp_path: Path) -> None:
    conn = database_before(tmp_path / "bbs.db", 39)
    conn.execute(
        "INSERT INTO idempotency (agent_id, idem_key, operation, record_hash, created_ms) VALUES (?, ?, ?, ?, ?)",
        ("did:key:a", "k", "post", "a" * 64, 1),
    )
    assert db.migrate(conn) >= 39
    plan = " ".join(
        str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN SELECT 1 FROM idempotency WHERE record_hash = ?", ("x",))
    )
    assert "idempotency_record" in plan  # forget_record_txn finds a record's keys by index
    assert conn.execute("SELECT count(*) FROM idempotency").fetchone()[0] == 1
    assert store.tombstones(conn, ["a" * 64]) == [] and store.purge_counts(conn) == (0, 0)
