"""Plans of the statements every append runs: they start from the arrived records, never from a whole index."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from identity import keys, records
from node import db, notify, projections
from node.sync_store import add_peer, ingest
from sync.store import Verified
from sync.verify import verify_record
from tests.sync.conftest import body_of, hash_of, signed_entry


@pytest.fixture(params=[False, True], ids=["no-stats", "analyzed"])
def conn(tmp_path: Path, request: pytest.FixtureRequest) -> sqlite3.Connection:
    """A node database holding entries that contradict and supersede one another, with or without planner
    statistics (a node never runs ANALYZE itself; an operator may)."""
    conn = db.connect(tmp_path / "node.db")
    db.migrate(conn)
    peer = keys.SigningKey.generate().did
    add_peer(conn, "http://127.0.0.1:9", peer, 0)
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
    ingest(conn, peer, batch, [], None, 0)
    conn.execute("COMMIT")
    if request.param:
        conn.execute("ANALYZE")
    return conn


def plan(conn: sqlite3.Connection, sql: str) -> list[str]:
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, {"h": json.dumps(["x", "y"])})]


@pytest.mark.parametrize("sql", [projections.RETRACTIONS_SQL, notify.CONTRADICTIONS_SQL], ids=["retractions", "contra"])
def test_derived_links_and_contradictions_start_from_the_arrived_records(conn: sqlite3.Connection, sql: str) -> None:
    steps = plan(conn, sql)
    assert steps[0] == "SEARCH l USING INTEGER PRIMARY KEY (rowid=?)", steps
    assert not [s for s in steps if s.startswith("SCAN") and "VIRTUAL TABLE" not in s], steps  # only json_each
