"""The Conn protocol is what store functions may rely on: both of the node's connection kinds provide it."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.store import db
from node.store.conn import Conn


def _store_round_trip(conn: Conn) -> tuple[int, int | None, list[str], list[tuple[int, str]]]:
    """Everything a store function may use: execute, executemany, rowcount, lastrowid, description, rows."""
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
    many = conn.executemany("INSERT INTO t (name) VALUES (?)", [("a",), ("b",)])
    last = conn.execute("INSERT INTO t (name) VALUES (?)", ("c",)).lastrowid
    cursor = conn.execute("SELECT id, name FROM t ORDER BY id")
    columns = [column[0] for column in cursor.description]
    rows = [(row["id"], row[1]) for row in cursor]
    return many.rowcount, last, columns, rows


@pytest.mark.sqlite_only(
    reason="SQLite's two connection classes (rowid keys, lastrowid without RETURNING); PostgreSQL's PgConn is "
    "tested by test_pg_conn.py"
)
@pytest.mark.parametrize("factory", [db.Connection, db.TimedConnection])
def test_the_node_connections_are_conns(tmp_path: Path, factory: type[db.Connection]) -> None:
    conn = db.connect(tmp_path / "t.db", factory=factory)
    try:
        assert _store_round_trip(conn) == (2, 3, ["id", "name"], [(1, "a"), (2, "b"), (3, "c")])
        assert conn.execute("SELECT name FROM t WHERE id = 9").fetchone() is None
        assert [tuple(row) for row in conn.execute("SELECT id FROM t").fetchall()] == [(1,), (2,), (3,)]
    finally:
        conn.close()
