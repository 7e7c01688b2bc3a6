"""node.search_index.store: the index's reads of `entries`, the freshness targets and the ranking's trust and
confidence reads, on a real migrated database of each engine (a SQLite file in tmp_path, a PostgreSQL database)."""

from __future__ import annotations

import dataclasses

import pytest

from node.search_index import store
from node.search_index.index import Row
from node.store.conn import Conn
from tests.pg_fixtures import OpenStore

AUTHORS = ["a", "b", "a", "b", "b"]  # entries 1..5


@pytest.fixture
def conn(open_store: OpenStore) -> Conn:
    """A migrated database of each engine in turn holding five entries (ids 1..5, hashes h1..h5, by AUTHORS)."""
    c = open_store(None)
    c.execute("BEGIN")
    for i, author in enumerate(AUTHORS, start=1):
        c.execute(
            "INSERT INTO entries (id, record_hash, content_fingerprint, author_id, created_at, created_ms,"
            " entry_type, performative, content, confidence, signature)"
            " VALUES (?, ?, 'f', ?, '2026-01-01T00:00:00Z', ?, 'finding', 'inform', ?, 0.5, 's')",
            (i, f"h{i}", author, 1000 * i, f"text {i}"),
        )
    c.execute("COMMIT")
    return c


def test_the_row_columns_are_rows_fields(conn: Conn) -> None:
    assert store.ROW_COLUMNS.split(", ")[1:] == [f.name for f in dataclasses.fields(Row)][1:]  # id is Row.seq
    rows = [Row(*r) for r in store.entries_after(conn, 3, 10)]
    assert [(r.seq, r.record_hash, r.content, r.author_id, r.created_ms) for r in rows] == [
        (4, "h4", "text 4", "b", 4000),
        (5, "h5", "text 5", "b", 5000),
    ]
    assert [r[0] for r in store.entries_after(conn, 0, 2)] == [1, 2]  # id order, at most the limit
    assert store.entries_after(conn, 5, 10) == []


def test_present_and_entries_at_read_entries_by_id(conn: Conn) -> None:
    assert store.present(conn, [5, 2, 9, 0]) == {2, 5}  # 9 and 0 are no entry (dropped, or never one)
    assert store.present(conn, []) == set()
    assert [Row(*r).record_hash for r in store.entries_at(conn, [4, 1, 7])] == ["h1", "h4"]  # id order
    assert store.entries_at(conn, []) == []


def test_logged_names_the_positions_the_log_still_holds(conn: Conn) -> None:
    for n in (1, 2):  # the log hands out seqs 1 and 2 (on either engine); the first is gone again
        conn.execute(
            "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, origin, received_ms, body)"
            " VALUES (?, ?, 'entry', 'a', '2026-01-01T00:00:00Z', ?, 'local', 0, ?)",
            (f"h{n}", f"v{n}", 1000 * n, b"\x00"),
        )
    conn.execute("DELETE FROM records WHERE seq = 1")
    assert store.logged(conn, [1, 2, 3]) == {2}  # entries 1 and 3 have no record here: as if redacted
    assert store.logged(conn, []) == set()


def test_epoch_head_and_pending(conn: Conn) -> None:
    assert store.store_epoch(conn) == ""  # a database without its identity yet
    conn.execute("INSERT INTO node_meta (key, value) VALUES ('epoch', 'e1')")
    assert store.store_epoch(conn) == "e1"
    assert store.highest_entry(conn) == 5
    assert [store.pending(conn, p) for p in (0, 3, 5, 9)] == [5, 2, 0, 0]
    assert store.pending(conn, 0, cap=2) == 3  # counted up to cap + 1 only
    assert store.pending(conn, 3, cap=2) == 2


def test_covered_and_sample(conn: Conn) -> None:
    assert [store.covered(conn, p) for p in (0, 2, 5, 9)] == [0, 2, 5, 5]
    picked = store.sample(conn, 4, 3)
    assert len(picked) == 3 and set(picked) <= {(i, f"h{i}") for i in range(1, 5)}
    assert sorted(store.sample(conn, 2, 50)) == [(1, "h1"), (2, "h2")]


def test_targets(conn: Conn) -> None:
    assert store.targets(conn, "a") == (5, 3)
    assert store.targets(conn, "") == (5, 0)


def test_the_ranking_reads(conn: Conn) -> None:
    assert store.author_scores(conn) == {}
    conn.execute(
        "INSERT INTO trust_scores (agent_id, confirms, disconfirms, laplace, score, weighted_confirms,"
        " weighted_disconfirms) VALUES ('a', 3, 0, 0.8, 0.9, 3, 0)"
    )
    conn.execute(
        "INSERT INTO entry_confidence (entry_hash, community_confidence, confirms, disconfirms)"
        " VALUES ('h2', 0.2, 0, 1)"
    )
    assert store.author_scores(conn) == {"a": 0.9}
    assert store.authors_of(conn, [1, 2, 99]) == {1: "a", 2: "b"}
    # the entry's own confidence, else its author's trust, else the neutral value given
    assert store.community_confidence(conn, [1, 2, 4], 0.5) == {1: 0.9, 2: 0.2, 4: 0.5}
    assert store.community_confidence(conn, [4], 0.25) == {4: 0.25}
    assert store.community_confidence(conn, [], 0.5) == {}


def test_redo_reads_the_queued_addresses_and_their_entries(conn: Conn) -> None:
    assert store.redo(conn, 10) == (0, [], [])
    for address in ("h4", "h2", "h4", "gone"):
        conn.execute("INSERT INTO search_redo (address) VALUES (?)", (address,))
    last, addresses, rows = store.redo(conn, 3)  # the first three queued
    assert addresses == ["h2", "h4"] and [Row(*r).seq for r in rows] == [2, 4]
    assert store.redo_count(conn) == 4
    store.redone_txn(conn, last)
    assert store.redo_count(conn) == 1 and store.redo(conn, 10)[1] == ["gone"]
