"""db.insert_rows: many rows in few statements, exact values, within SQLite's bound-parameter limit."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from node.store import db


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    conn = db.connect(tmp_path / "t.db")
    conn.row_factory = None  # plain tuples
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    return conn


def statements(conn: sqlite3.Connection) -> list[str]:
    """The INSERT statements the connection runs from now on."""
    seen: list[str] = []
    conn.set_trace_callback(lambda sql: seen.append(sql) if sql.startswith("INSERT") else None)
    return seen


@pytest.mark.parametrize("n", [0, 1, 2, 3, 37, 100, 1000])
def test_every_row_lands_in_power_of_two_statements(conn: sqlite3.Connection, n: int) -> None:
    seen = statements(conn)
    rows = [(i, f"v{i}") for i in range(n)]
    assert db.insert_rows(conn, "INSERT INTO t (k, v)", rows).changed == n
    assert conn.execute("SELECT k, v FROM t ORDER BY k").fetchall() == [tuple(r) for r in rows]
    assert len(seen) == bin(n).count("1")  # 37 rows: 32 + 4 + 1


def test_statements_hold_at_most_max_rows(conn: sqlite3.Connection) -> None:
    seen = statements(conn)
    n = 2 * db.MAX_ROWS_PER_INSERT + 3
    assert db.insert_rows(conn, "INSERT INTO t (k, v)", [(i, "x") for i in range(n)]).changed == n
    assert len(seen) == 4  # max + max + 2 + 1


def test_values_stay_exact_even_with_a_nul(conn: sqlite3.Connection) -> None:
    """SQLite's JSON functions would cut 'a\\x00b' to 'a'; bound parameters keep it whole."""
    db.insert_rows(conn, "INSERT INTO t (k, v)", [(1, "a\x00b"), (2, "café 😀"), (3, None)])
    assert conn.execute("SELECT v FROM t ORDER BY k").fetchall() == [("a\x00b",), ("café 😀",), (None,)]


def test_the_parameter_limit_splits_the_statements(conn: sqlite3.Connection) -> None:
    conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 9)  # at most 4 rows of 2 values per statement
    seen = statements(conn)
    assert db.insert_rows(conn, "INSERT INTO t (k, v)", [(i, "x") for i in range(11)]).changed == 11
    assert len(seen) == 4  # 4 + 4 + 2 + 1
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 11


def test_it_counts_the_rows_changed_and_names_the_last_rowid(conn: sqlite3.Connection) -> None:
    """New rows of a table with an INTEGER PRIMARY KEY take the rowids after the largest, in order: the
    `changed` rowids ending at `last_rowid` (what projections.append_many relies on for the log's seqs)."""
    assert db.insert_rows(conn, "INSERT INTO t (v)", [("a",), ("b",)]) == (2, 2)
    tail = " ON CONFLICT (v) DO NOTHING"
    conn.execute("CREATE UNIQUE INDEX t_v ON t(v)")
    assert db.insert_rows(conn, "INSERT INTO t (v)", [("a",), ("c",), ("b",), ("d",), ("e",)], tail) == (3, 5)
    assert db.insert_rows(conn, "INSERT INTO t (v)", [("a",), ("e",)], tail) == (0, 5)  # none: unchanged
    assert conn.execute("SELECT k, v FROM t ORDER BY k").fetchall() == list(enumerate("abcde", 1))
