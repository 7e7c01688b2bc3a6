"""db.insert_rows: many rows in few statements, exact values, within SQLite's bound-parameter limit."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from node.store import db, pg_conn


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


@pytest.mark.sqlite_only(reason="db.insert_rows, SQLite's many-row INSERT: its trace, parameter limit and rowids")
@pytest.mark.parametrize(
    ("n", "sizes"),
    [
        (0, []),
        (1, [1]),
        (3, [3]),
        (37, [37]),
        (64, [64]),
        (65, [64, 1]),
        (100, [64, 36]),
        (200, [128, 64, 8]),
        (1000, [512, 256, 128, 64, 40]),
    ],
)
def test_rows_land_in_one_statement_up_to_64_then_power_of_two_ones(
    conn: sqlite3.Connection, n: int, sizes: list[int]
) -> None:
    """Up to EXACT_ROWS_UP_TO rows (a merged run of single posts) take one statement; more, power-of-two ones first."""
    assert db.EXACT_ROWS_UP_TO == 64
    seen = statements(conn)
    rows = [(i, f"v{i}") for i in range(n)]
    assert db.insert_rows(conn, "INSERT INTO t (k, v)", rows).changed == n
    assert conn.execute("SELECT k, v FROM t ORDER BY k").fetchall() == [tuple(r) for r in rows]
    assert [sql.count("),(") + 1 for sql in seen] == sizes


@pytest.mark.sqlite_only(reason="db.insert_rows, SQLite's many-row INSERT: its trace, parameter limit and rowids")
def test_statements_hold_at_most_max_rows(conn: sqlite3.Connection) -> None:
    seen = statements(conn)
    n = 2 * db.MAX_ROWS_PER_INSERT + 3
    assert db.insert_rows(conn, "INSERT INTO t (k, v)", [(i, "x") for i in range(n)]).changed == n
    assert [sql.count("),(") + 1 for sql in seen] == [db.MAX_ROWS_PER_INSERT, db.MAX_ROWS_PER_INSERT, 3]


@pytest.mark.sqlite_only(reason="db.insert_rows, SQLite's many-row INSERT: its trace, parameter limit and rowids")
def test_the_parameter_limit_splits_the_statements(conn: sqlite3.Connection) -> None:
    conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 9)  # at most 4 rows of 2 values per statement
    seen = statements(conn)
    assert db.insert_rows(conn, "INSERT INTO t (k, v)", [(i, "x") for i in range(11)]).changed == 11
    assert [sql.count("),(") + 1 for sql in seen] == [4, 4, 3]  # 4 rows of 2 values at most
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 11


@pytest.mark.sqlite_only(reason="db.insert_rows, SQLite's many-row INSERT: its trace, parameter limit and rowids")
def test_it_counts_the_rows_changed_and_names_the_last_rowid(conn: sqlite3.Connection) -> None:
    """New rows of a table with an INTEGER PRIMARY KEY take the rowids after the largest, in order: the
    `changed` rowids ending at `last_rowid` (what projections.append_many relies on for the log's seqs)."""
    assert db.insert_rows(conn, "INSERT INTO t (v)", [("a",), ("b",)]) == (2, 2)
    tail = " ON CONFLICT (v) DO NOTHING"
    conn.execute("CREATE UNIQUE INDEX t_v ON t(v)")
    assert db.insert_rows(conn, "INSERT INTO t (v)", [("a",), ("c",), ("b",), ("d",), ("e",)], tail) == (3, 5)
    assert db.insert_rows(conn, "INSERT INTO t (v)", [("a",), ("e",)], tail) == (0, 5)  # none: unchanged
    assert conn.execute("SELECT k, v FROM t ORDER BY k").fetchall() == list(enumerate("abcde", 1))


def test_insert_returning_splits_at_postgresqls_parameter_limit(pg_url: str) -> None:
    """db.insert_returning, the PostgreSQL store's many-row INSERT: every row's RETURNING values, in order, over as
    many statements as 65,535 bound parameters a statement need (20 columns: 3,276 rows a statement)."""
    conn = pg_conn.connect(pg_url)
    try:
        columns = [f"c{i}" for i in range(20)]
        conn.execute(
            "CREATE TABLE w (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
            + ", ".join(f"{c} bigint NOT NULL" for c in columns)
            + ")"
        )
        per_statement = db.PG_MAX_PARAMETERS // len(columns)
        rows = [[n * 100 + i for i in range(len(columns))] for n in range(per_statement + 24)]
        head = f"INSERT INTO w ({', '.join(columns)})"
        returned = db.insert_returning(conn, head, rows, " RETURNING id, c0")
        assert [tuple(r) for r in returned] == [(n + 1, n * 100) for n in range(len(rows))]
        assert conn.execute("SELECT count(*) FROM w").fetchone()[0] == len(rows)
        assert db.insert_returning(conn, head, [], " RETURNING id") == []
    finally:
        conn.close()
