"""A database made "full" without filling a disk, on either engine, for the tests of the node's 507 answer.

SQLite: the writer connection's `max_page_count` caps the file a few pages above its size, so writes fail with
SQLITE_FULL once that room is spent. PostgreSQL has no such cap: a statement trigger on `records` raises the
server's own `disk_full` (SQLSTATE 53100) before any record is written, the error a full tablespace gives, so the
node's mapping of it (`db._storage_error`) and its rollback are what is tested. Every write of a record is refused
at once there (no room is left to spend)."""

from __future__ import annotations

from collections.abc import Callable

from node.store.conn import POSTGRESQL, Conn, engine_of

_FULL_PG = (
    "CREATE FUNCTION test_disk_full() RETURNS trigger LANGUAGE plpgsql AS"
    " $$BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END$$",
    "CREATE TRIGGER test_disk_full BEFORE INSERT OR UPDATE ON records FOR EACH STATEMENT"
    " EXECUTE FUNCTION test_disk_full()",
)
_FREE_PG = ("DROP TRIGGER test_disk_full ON records", "DROP FUNCTION test_disk_full()")


def fill(extra_pages: int) -> Callable[[Conn], None]:
    """A write job that leaves the database `extra_pages` pages of room (SQLite) or none (PostgreSQL)."""

    def run(conn: Conn) -> None:
        if engine_of(conn) == POSTGRESQL:
            for statement in _FULL_PG:
                conn.execute(statement)
            return
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
        conn.execute(f"PRAGMA max_page_count = {pages + extra_pages}").fetchone()

    return run


def free(conn: Conn) -> None:
    """A write job that gives the database its room back."""
    if engine_of(conn) == POSTGRESQL:
        for statement in _FREE_PG:
            conn.execute(statement)
        return
    conn.execute("PRAGMA max_page_count = 1073741823").fetchone()
