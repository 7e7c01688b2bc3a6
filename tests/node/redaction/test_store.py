"""The SQL of redaction on a real migrated database of each engine (a SQLite file, a PostgreSQL database): the
projection row, tombstones and their versions, the scrub schedule, dropping versions and setting them aside, purges;
and SQLite's checkpoint."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from identity import keys, records
from node.features import LOG
from node.redaction import store
from node.store import db, pg_conn, projections, waiting
from node.store.conn import Conn
from tests.node.api_helpers import entry_record
from tests.node.migrated import database_before
from tests.pg_fixtures import OpenStore


def migrated(tmp_path: Path) -> sqlite3.Connection:
    conn = db.connect(tmp_path / "bbs.db")
    db.migrate(conn)
    return conn


def test_a_redaction_is_projected_once_and_found_by_its_target(open_store: OpenStore) -> None:
    conn = open_store(None)
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


def test_a_scrub_is_due_once_its_grace_has_passed_and_runs_once(open_store: OpenStore) -> None:
    conn = open_store(None)
    store.schedule_scrub_txn(conn, "a" * 64, 1_000)
    store.schedule_scrub_txn(conn, "b" * 64, 5_000)
    assert store.due_scrubs(conn, 999) == []
    assert store.due_scrubs(conn, 1_000) == ["a" * 64]
    assert store.pending_scrubs(conn) == (2, 1_000)
    store.mark_scrubbed_txn(conn, ["a" * 64], 2_000)
    assert store.due_scrubs(conn, 10_000) == ["b" * 64] and store.pending_scrubs(conn) == (1, 5_000)


@pytest.mark.sqlite_only(reason="SQLite's WAL file and its checkpoint")
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


@pytest.mark.sqlite_only(reason="SQLite migration 0039 and a SQLite query plan; PostgreSQL starts from its baseline")
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


T0 = 1_767_323_045_000
NOW = 1_800_000_000_000


def dropping_story(conn: Conn, alice: keys.SigningKey, bob: keys.SigningKey) -> dict[str, Any]:
    """Three entries in the log, a copy of one waiting; the second dropped and set aside, released, then the third
    set aside and forgotten; redactions, tombstones and purges beside them. Every read's answer."""
    story = [entry_record(alice, f"entry {i}", created_ms=T0 + i) for i in range(3)]
    addresses = [records.compute_hash(r) for r in story]
    space = "s" * 64
    conn.execute("BEGIN")
    projections.append_many(
        conn, [projections.Incoming(r, *records.check(r)) for r in story], origin="local", now_ms=T0
    )
    seqs = [int(conn.execute("SELECT seq FROM records WHERE hash = ?", (a,)).fetchone()[0]) for a in addresses]
    waiting.offer_txn(conn, record_hash=addresses[1], version="f" * 64, kind="entry", author_id=alice.did,
                      peer_id="did:key:peer", body=b"{}", deps=["key:x"], now_ms=NOW)  # fmt: skip
    out: dict[str, Any] = {"held": store.held_versions(conn, addresses[1]), "kind": store.kind_held(conn, addresses[1])}
    store.set_aside_txn(conn, [seqs[1]])
    store.drop_versions_txn(conn, addresses[1], [seqs[1]], NOW)
    out["refused"] = [r[0] for r in conn.execute("SELECT version FROM refused_versions ORDER BY version").fetchall()]
    out["log"] = [r[0] for r in conn.execute("SELECT hash FROM records ORDER BY seq").fetchall()]
    out["still_waiting"] = waiting.held(conn, ["f" * 64])
    out["released_count"] = store.release_txn(conn, addresses[1])
    out["released"] = store.released(conn)
    store.set_aside_txn(conn, [seqs[2]])
    out["aside"] = store.set_aside_count(conn)
    out["forgotten"] = store.forget_set_aside_txn(conn, [addresses[2], "x" * 64])
    out["aside_after"] = store.set_aside_count(conn)
    mine = store.RedactionRow("r" * 64, seqs[2], addresses[0], alice.did, "2026-01-01T00:00:00Z", space, None)
    moderator = store.RedactionRow("m" * 64, seqs[0], "g" * 64, bob.did, "2026-01-02T00:00:00Z", space, "spam")
    for row in (mine, moderator):
        store.insert_redaction_txn(conn, row)
    stone = store.TombstoneRow("g" * 64, "entry", alice.did, "2026-01-01T00:00:00Z", space, ["v"], "m" * 64,
                               bob.did, "2026-01-02T00:00:00Z", NOW)  # fmt: skip
    store.insert_tombstone_txn(conn, stone)
    store.schedule_scrub_txn(conn, "g" * 64, NOW)
    store.insert_purge_txn(conn, store.PurgeRow("p" * 64, "entry", bob.did, ["v2", "v1"], "illegal", NOW))
    store.insert_purge_txn(conn, store.PurgeRow("q" * 64, "link", bob.did, ["v3"], None, NOW + 1))
    conn.execute("COMMIT")
    out["held_in"] = store.redactions_of_held_in(conn, [space, "z" * 64])  # mine only: its target is held
    out["moderated"] = store.moderated_in(conn, [space])
    out["versions_by"] = store.versions_by(conn, space, alice.did)
    out["purges"] = store.purges(conn, ["q" * 64, "p" * 64, "x" * 64])
    out["newest"] = store.newest_purges(conn, 1)
    out["purge_counts"] = store.purge_counts(conn)
    out["authored"] = store.addresses_of_author(conn, alice.did, ["link", "entry"])
    out["named"] = [store.any_named(conn, [a]) for a in (addresses[0], "p" * 64, addresses[2])]
    out["last_drop"] = store.last_drop_ms(conn)
    return out


def test_dropping_setting_aside_and_purging_answer_alike_on_both_engines(tmp_path: Path, pg_migrated_url: str) -> None:
    """The same story on SQLite and on PostgreSQL: the same versions dropped and refused, set aside and released,
    the same redactions, tombstones and purges found."""
    alice, bob = keys.SigningKey.generate(), keys.SigningKey.generate()
    got = []
    for conn in (db.connect(tmp_path / "bbs.db", log=LOG), pg_conn.connect(pg_migrated_url, log=LOG)):
        if isinstance(conn, sqlite3.Connection):
            db.migrate(conn)
        try:
            got.append(dropping_story(conn, alice, bob))
        finally:
            conn.close()
    sqlite, postgres = got
    for name in sqlite:
        assert postgres[name] == sqlite[name], name
    dropped = sqlite["held"][0]
    assert sqlite["kind"] == "entry" and dropped.record["content"] == "entry 1"
    assert sqlite["refused"] == sorted([dropped.version, "f" * 64]) and not sqlite["still_waiting"]
    assert len(sqlite["log"]) == 2 and records.compute_hash(dropped.record) not in sqlite["log"]
    assert sqlite["released_count"] == 1 and [a.version for a in sqlite["released"]] == [dropped.version]
    assert sqlite["released"][0].body and (sqlite["aside"], sqlite["forgotten"], sqlite["aside_after"]) == (1, 1, 0)
    assert [r.hash for r in sqlite["held_in"]] == ["r" * 64]
    assert [(r.hash, t.hash) for r, t in sqlite["moderated"]] == [("m" * 64, "g" * 64)]
    assert len(sqlite["versions_by"]) == 1
    assert [p.hash for p in sqlite["purges"]] == ["p" * 64, "q" * 64] and sqlite["purges"][0].versions == ["v1", "v2"]
    assert [p.hash for p in sqlite["newest"]] == ["q" * 64] and sqlite["purge_counts"] == (2, 1)
    assert sqlite["authored"] == [sqlite["log"][0], sqlite["log"][1]]
    assert sqlite["named"] == [True, True, False] and sqlite["last_drop"] == NOW
