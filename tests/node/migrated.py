"""A database as an earlier release left it: every migration below a number applied, for migration tests."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from node.store import db


def database_before(path: Path, number: int) -> sqlite3.Connection:
    """A connection to a new database at `path` with the migrations numbered below `number` applied (the schema
    version then says so), so a test can fill it as that release would and call `db.migrate`."""
    conn = db.connect(path)
    conn.create_function("bbs_sha256_hex", 1, lambda body: body, deterministic=True)
    for found, _name, sql in db.migrations():
        if found < number:
            for statement in db._split_sql(sql):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {found}")
    return conn
