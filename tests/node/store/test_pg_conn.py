"""The PostgreSQL `Conn`: sqlite3's placeholders, rows, counts and error classes over psycopg, on a real server."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.store import conn as neutral
from node.store import db, pg_conn
from node.store.pg_conn import PgConn, translate


@pytest.fixture
def pg(pg_url: str) -> Iterator[PgConn]:
    conn = pg_conn.connect(pg_url)
    conn.execute(
        "CREATE TABLE t (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name text NOT NULL UNIQUE,"
        " n bigint CHECK (n >= 0), blob bytea)"
    )
    yield conn
    conn.close()


# ---- placeholders (no server needed) ----


@pytest.mark.parametrize(
    ("sqlite", "postgres"),
    [
        ("SELECT * FROM t WHERE a = ? AND b = ?", "SELECT * FROM t WHERE a = %s AND b = %s"),
        ("SELECT * FROM t WHERE a = :a AND b = :b_2", "SELECT * FROM t WHERE a = %(a)s AND b = %(b_2)s"),
        ("SELECT ?::text, x::bigint", "SELECT %s::text, x::bigint"),
        ("SELECT ?1, ?2, ?1", "SELECT %(p1)s, %(p2)s, %(p1)s"),
        ("SELECT '?', ':a', ? -- ? :b\n", "SELECT '?', ':a', %s -- ? :b\n"),
        ('SELECT "odd?col", ? /* :x ? */', 'SELECT "odd?col", %s /* :x ? */'),
        ("SELECT 'it''s ?', ?", "SELECT 'it''s ?', %s"),
        ("SELECT a % 2, '%' || ?", "SELECT a %% 2, '%%' || %s"),
        ("SELECT $$ ? :x $$, ?", "SELECT $$ ? :x $$, %s"),
        ("SELECT a % 2, '?'", "SELECT a % 2, '?'"),  # no placeholder: as written (psycopg reads no % then)
    ],
)
def test_placeholders_become_psycopgs_outside_quotes_and_comments(sqlite: str, postgres: str) -> None:
    assert translate(sqlite).sql == postgres


def test_a_statement_mixing_both_placeholder_styles_is_refused() -> None:
    with pytest.raises(ValueError, match="mixes"):
        translate("SELECT ? WHERE a = :a")
    with pytest.raises(ValueError, match="mixes"):
        translate("SELECT ? WHERE a = ?1")


# ---- the Conn on a real server ----


def test_it_is_a_conn_as_the_store_functions_use_it(pg: PgConn) -> None:
    conn: neutral.Conn = pg
    many = conn.executemany("INSERT INTO t (name) VALUES (?)", [("a",), ("b",)])
    last = conn.execute("INSERT INTO t (name) VALUES (?) RETURNING id", ("c",)).lastrowid
    cursor = conn.execute("SELECT id, name FROM t ORDER BY id")
    assert [column[0] for column in cursor.description] == ["id", "name"]
    assert [(row["id"], row[1]) for row in cursor] == [(1, "a"), (2, "b"), (3, "c")]
    assert (many.rowcount, last) == (2, 3)
    assert conn.execute("SELECT name FROM t WHERE id = 9").fetchone() is None
    assert conn.execute("UPDATE t SET n = 1 WHERE id < ?", (3,)).rowcount == 2


def test_numbered_parameters_bind_by_their_number(pg: PgConn) -> None:
    assert tuple(pg.execute("SELECT ?2, ?1, ?2 || ?1", ("a", "b")).fetchone()) == ("b", "a", "ba")


def test_rows_read_by_index_name_and_slice_like_sqlite3_rows(pg: PgConn) -> None:
    pg.execute("INSERT INTO t (name, n) VALUES (:name, :n)", {"name": "a", "n": 7})
    row = pg.execute("SELECT name, n AS Count, n + 1 AS next FROM t").fetchone()
    assert row is not None
    assert (row[0], row["name"], row["COUNT"], row["count"], row[-1]) == ("a", "a", 7, 7, 8)
    assert row[1:] == (7, 8)
    assert row.keys() == ["name", "count", "next"]
    assert row == ("a", 7, 8) and tuple(row) == ("a", 7, 8) and len(row) == 3
    assert row == pg.execute("SELECT name, n AS count, n + 1 AS next FROM t").fetchone()
    assert row != pg.execute("SELECT name, n, n + 1 AS next FROM t").fetchone()  # same values, other names
    with pytest.raises(IndexError):
        row["nope"]


def test_lastrowid_is_what_insert_returning_gave(pg: PgConn) -> None:
    cursor = pg.execute("INSERT INTO t (name) VALUES (?), (?), (?) RETURNING id, name", ("a", "b", "c"))
    assert cursor.lastrowid == 3
    assert [tuple(row) for row in cursor.fetchall()] == [(1, "a"), (2, "b"), (3, "c")]  # the rows are still there
    assert pg.execute("INSERT INTO t (name) VALUES (?)", ("d",)).lastrowid is None  # no RETURNING: no rowid
    skipped = pg.execute("INSERT INTO t (name) VALUES (?) ON CONFLICT (name) DO NOTHING RETURNING id", ("a",))
    assert (skipped.lastrowid, skipped.rowcount, skipped.fetchone()) == (None, 0, None)


def test_statements_without_a_result_fetch_nothing_as_in_sqlite3(pg: PgConn) -> None:
    cursor = pg.execute("INSERT INTO t (name) VALUES (?)", ("a",))
    assert (cursor.fetchone(), cursor.fetchall(), list(cursor)) == (None, [], [])


def test_values_round_trip(pg: PgConn) -> None:
    body = bytes(range(256))
    pg.execute("INSERT INTO t (name, n, blob) VALUES (?, ?, ?)", ("ünï ?:x %s", True, body))
    pg.execute("INSERT INTO t (name, n) VALUES (?, ?)", ("f", False))
    rows = pg.execute("SELECT name, n, blob FROM t ORDER BY id").fetchall()
    assert [tuple(row) for row in rows] == [("ünï ?:x %s", 1, body), ("f", 0, None)]  # booleans are SQLite's 0/1
    assert pg.execute("SELECT '%' || ? || '?'", ("x",)).fetchone()[0] == "%x?"


def test_errors_are_told_apart_engine_neutrally(pg: PgConn) -> None:
    pg.execute("INSERT INTO t (name) VALUES (?)", ("a",))
    cases: list[tuple[str, tuple[object, ...], type[neutral.DatabaseError], str]] = [
        ("INSERT INTO t (name) VALUES (?)", ("a",), neutral.UniqueViolation, "23505"),
        ("INSERT INTO t (name) VALUES (?)", (None,), neutral.NotNullViolation, "23502"),
        ("INSERT INTO t (name, n) VALUES (?, ?)", ("b", -1), neutral.CheckViolation, "23514"),
        ("SELECT * FROM missing WHERE a = ?", (1,), neutral.UndefinedTable, "42P01"),
        ("SELEKT ?", (1,), neutral.OperationalError, "42601"),
        ("SELECT ?::bigint", ("x",), neutral.DataError, "22P02"),
    ]
    for sql, parameters, kind, state in cases:
        with pytest.raises(kind) as caught:
            pg.execute(sql, parameters)
        assert type(caught.value) is kind, sql
        assert caught.value.sqlstate == state
        assert neutral.is_unique_violation(caught.value) is (kind is neutral.UniqueViolation)
    # the store's sqlite3 handlers catch them: a constraint is an IntegrityError, a missing table an OperationalError
    assert issubclass(neutral.UniqueViolation, sqlite3.IntegrityError)
    assert issubclass(neutral.UndefinedTable, sqlite3.OperationalError)
    assert issubclass(neutral.DataError, sqlite3.DataError)


def test_is_unique_violation_asks_sqlite_too(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "t.db")
    try:
        conn.execute("CREATE TABLE t (name TEXT NOT NULL UNIQUE)")
        conn.execute("INSERT INTO t VALUES ('a')")
        with pytest.raises(sqlite3.IntegrityError) as unique:
            conn.execute("INSERT INTO t VALUES ('a')")
        with pytest.raises(sqlite3.IntegrityError) as not_null:
            conn.execute("INSERT INTO t VALUES (NULL)")
        assert neutral.is_unique_violation(unique.value)
        assert not neutral.is_unique_violation(not_null.value)
    finally:
        conn.close()


def test_parameters_that_do_not_fit_the_placeholders_are_refused(pg: PgConn) -> None:
    with pytest.raises(neutral.ProgrammingError):
        pg.execute("SELECT 1", (1,))
    with pytest.raises(neutral.ProgrammingError):
        pg.execute("SELECT ?", {"a": 1})
    with pytest.raises(neutral.ProgrammingError):
        pg.execute("SELECT :a", (1,))


def test_the_nodes_savepoints_work_on_it(pg: PgConn) -> None:
    """db.savepoint, as the writer runs each merged job: a failing block rolls back alone, the transaction goes on
    (PostgreSQL aborts the whole transaction on an error until ROLLBACK TO, which the savepoint runs)."""
    pg.execute("BEGIN")
    assert pg.in_transaction
    pg.execute("INSERT INTO t (name) VALUES (?)", ("kept",))
    with pytest.raises(neutral.UniqueViolation), db.savepoint(pg, "job"):
        pg.execute("INSERT INTO t (name) VALUES (?)", ("dropped",))
        pg.execute("INSERT INTO t (name) VALUES (?)", ("kept",))
    with db.savepoint(pg, "job"):
        pg.execute("INSERT INTO t (name) VALUES (?)", ("after",))
    pg.execute("COMMIT")
    assert not pg.in_transaction
    assert [row[0] for row in pg.execute("SELECT name FROM t ORDER BY id")] == ["kept", "after"]


def test_a_script_runs_as_written(pg: PgConn) -> None:
    pg.executescript("CREATE TABLE s (a text); INSERT INTO s VALUES ('?'), ('%'), (':x');")
    assert sorted(row[0] for row in pg.execute("SELECT a FROM s")) == ["%", ":x", "?"]
    with pytest.raises(neutral.OperationalError):
        pg.executescript("CREATE TABLE s (a text);")


def test_an_unreachable_server_is_an_operational_error(tmp_path: Path) -> None:
    with pytest.raises(neutral.OperationalError):
        pg_conn.connect(f"host={tmp_path} port=1 user=nobody dbname=none connect_timeout=2")
