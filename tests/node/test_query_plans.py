"""Plans of the statements every append runs: they start from the arrived records, never from a whole index."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from identity import keys, records
from node.federation.store import FETCH_SQL, add_peer_txn, ingest_txn
from node.inbox import store as inbox_store
from node.store import db, projections
from sync.store import Verified
from sync.verify import verify_record
from tests.sync.conftest import body_of, hash_of, signed_entry

pytestmark = pytest.mark.sqlite_only(reason="SQLite's query planner: the plans read with EXPLAIN QUERY PLAN")


@pytest.fixture(params=[False, True], ids=["no-stats", "analyzed"])
def conn(tmp_path: Path, request: pytest.FixtureRequest) -> sqlite3.Connection:
    """A node database holding entries that contradict and supersede one another, with or without planner
    statistics (a node never runs ANALYZE itself; an operator may)."""
    conn = db.connect(tmp_path / "node.db")
    db.migrate(conn)
    peer = keys.SigningKey.generate().did
    add_peer_txn(conn, "http://127.0.0.1:9", peer, 0)
    author = keys.SigningKey.generate()
    batch: list[Verified] = []
    for i in range(200):
        target = signed_entry(author, f"claim {i}")
        answer = signed_entry(author, f"answer {i}", links=(hash_of(target),))
        answer["links"][0]["link_type"] = "contradicts" if i % 2 else "supersedes"
        for record in (target, records.sign(records.unsigned(answer), author)):
            checked = verify_record(body_of(record), hash_of(record))
            assert isinstance(checked, Verified), checked
            batch.append(checked)
    conn.execute("BEGIN IMMEDIATE")
    ingest_txn(conn, peer, batch, [], None, 0)
    conn.execute("COMMIT")
    if request.param:
        conn.execute("ANALYZE")
    return conn


def plan(conn: sqlite3.Connection, sql: str) -> list[str]:
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, {"h": json.dumps(["x", "y"])})]


@pytest.mark.parametrize(
    "sql", [projections.RETRACTIONS_SQL, inbox_store.CONTRADICTIONS_SQL], ids=["retractions", "contra"]
)
def test_derived_links_and_contradictions_start_from_the_arrived_records(conn: sqlite3.Connection, sql: str) -> None:
    steps = plan(conn, sql)
    assert steps[0] == "SEARCH l USING INTEGER PRIMARY KEY (rowid=?)", steps
    assert not [s for s in steps if s.startswith("SCAN") and "VIRTUAL TABLE" not in s], steps  # only json_each


@pytest.mark.parametrize(
    ("name", "sql", "first"),
    [
        (
            "held versions",
            "SELECT hash, seq, version, scope FROM records WHERE hash IN (SELECT value FROM json_each(:h))",
            "SEARCH records USING INDEX records_hash (hash=?)",
        ),
        (
            "digest",
            "SELECT version FROM records WHERE +scope = 'federation' ORDER BY version",
            "SCAN records USING INDEX sqlite_autoindex_records_1",
        ),
        (
            "reconcile items",
            "SELECT created_ms, version FROM records WHERE +scope = 'federation' AND created_ms >= 0"
            " ORDER BY created_ms, version",
            "SEARCH records USING INDEX records_time_version (created_ms>?)",
        ),
    ],
)
def test_version_queries_use_their_indexes(conn: sqlite3.Connection, name: str, sql: str, first: str) -> None:
    """Versions (node/store/equivocation.py, node/federation/store.py): looked up by index, read in index order, never
    sorted."""
    steps = plan(conn, sql)
    assert steps[0] == first and not [s for s in steps if "TEMP B-TREE" in s], (name, steps)


def test_fetch_by_address_or_version_searches_both_indexes(conn: sqlite3.Connection) -> None:
    params = {"ids": json.dumps(["x", "y"]), "served": json.dumps(["s" * 64]), "peer": "did:key:z", "allowed": None}
    steps = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + FETCH_SQL, params)]
    assert any("records_hash" in s for s in steps) and any("sqlite_autoindex_records_1" in s for s in steps), steps
    assert not [s for s in steps if s.startswith("SCAN records")], steps
