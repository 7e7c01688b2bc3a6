"""The PostgreSQL schema's migrations: node/store/migrations_pg/, numbered alike with SQLite's.

A PostgreSQL database starts at the baseline (`0050_baseline.sql`: SQLite's schema at its migration 0050, translated
as docs/decisions.md record 50 says) and then runs every later migration, each `NNNN_what.sql` with the number of
SQLite's migration that makes the same change. The version lives in the one-row `schema_version` table (SQLite
keeps it in `PRAGMA user_version`), written in the migration's own transaction; two processes that start at once
queue on a transaction-level advisory lock, and the second finds the work done.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from node.errors import SchemaTooNew

if TYPE_CHECKING:
    from node.store.pg_conn import PgConn

BASELINE = 50  # the SQLite migration the PostgreSQL schema starts at
# pg_advisory_xact_lock's key for applying migrations (any constant the node's other locks do not use).
MIGRATION_LOCK = 0x6262_7300_0000_0001


def scripts_in(package: str) -> list[tuple[int, str, str]]:
    """The numbered migration scripts (`NNNN_name.sql`) shipped in `package`, as (number, name, sql), in order: one
    reader for both engines' folders."""
    found = []
    for item in resources.files(package).iterdir():
        name = item.name
        if name.endswith(".sql") and name[:4].isdigit():
            found.append((int(name[:4]), name, item.read_text("utf-8")))
    return sorted(found)


def migrations() -> list[tuple[int, str, str]]:
    """Numbered PostgreSQL migration scripts shipped in node/store/migrations_pg, as (number, name, sql), in order."""
    return scripts_in("node.store.migrations_pg")


def schema_version(conn: PgConn) -> int:
    """The schema version of the database (0: an empty database, before the baseline)."""
    if not conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()[0]:
        return 0
    row = conn.execute("SELECT version FROM schema_version WHERE id = 1").fetchone()
    return 0 if row is None else int(row[0])


def migrate(conn: PgConn) -> int:
    """Apply pending migrations, each in its own transaction that records its number; return the schema version.
    Raises SchemaTooNew for a database a newer version of the software wrote."""
    scripts = migrations()
    latest = scripts[-1][0] if scripts else 0
    current = schema_version(conn)
    if current > latest:
        raise SchemaTooNew(
            f"database schema version {current} is newer than this software supports ({latest}); upgrade agent-bbs"
        )
    for number, _name, sql in scripts:
        if number <= current:
            continue
        with conn.raw.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
            if schema_version(conn) >= number:  # another process applied it while we waited
                continue
            conn.executescript(sql)
            conn.execute(
                "INSERT INTO schema_version (id, version) VALUES (1, ?)"
                " ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                (number,),
            )
        current = number
    return current
