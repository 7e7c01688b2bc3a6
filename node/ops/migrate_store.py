"""`bbs migrate-store`: move a node's database from its folder's SQLite file into an empty PostgreSQL database.

The steps (docs/operations.md, "Moving a node to PostgreSQL"; docs/decisions.md record 79):

1. Refuse, with one line and nothing changed: a folder that is serving (its lock), that holds no node, that is on
   PostgreSQL already, whose bbs.db is at another schema version than this software's head; a target that is not a
   PostgreSQL URL, or whose database is not empty.
2. Hold the folder's serve lock (no node starts meanwhile) and SQLite's write lock (no CLI command writes
   meanwhile); in ONE PostgreSQL transaction: migrate the empty database to the head (node/store/migrations_pg),
   copy every table (node/store/to_postgresql.py).
3. Verify in that transaction, refusing to switch on any difference (the transaction then rolls back and the target
   is left empty): the row count of every table, the sync digest of the public federation and of each space held,
   the projections as copied against SQLite's, and a rebuild of the projections from the copied log (undone after
   the comparison) against the copied ones, as `bbs rebuild` compares. Then set each identity past the largest key
   copied (or handed out by SQLite's AUTOINCREMENT), so the next record's seq follows on.
4. Commit, write the URL to store.url (as `bbs init --store`), and set bbs.db aside under a new name in the folder:
   kept, never deleted.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.federation.store import digest
from node.ops import datalock
from node.ops import store as ops_store
from node.ops.datadir import STORE_FILE, DataDir, no_node, require_node
from node.store import db, pg_conn, pg_schema, projections
from node.store import to_postgresql as copy
from node.store.conn import Conn
from node.store.pg_conn import PgConn
from node.store.projections import Log
from wire.cli import CommandError

# a block run on a connection and rolled back at its end (the rebuild trial), on either engine
Trial = Callable[[Any], contextlib.AbstractContextManager[None]]
ASIDE_PREFIX = "bbs.db.before-postgresql-"  # + the UTC time of the move: where bbs.db is kept


@dataclass(frozen=True)
class Moved:
    """What `migrate` did: the node moved, what was copied and checked, and where the SQLite file now lies."""

    node_id: str
    tables: int
    rows: int
    records: int
    digests_checked: int
    kept_aside: str


class Mismatch(CommandError):
    """The PostgreSQL copy differs from the SQLite database: the move is refused, nothing switched."""


def heads() -> int:
    """The schema version this software migrates both engines to (their numbers are kept alike: record 76)."""
    sqlite_head, pg_head = db.migrations()[-1][0], pg_schema.migrations()[-1][0]
    if sqlite_head != pg_head:  # a release whose two migration folders disagree: never copy across them
        raise CommandError(f"this software's schemas differ (SQLite {sqlite_head}, PostgreSQL {pg_head})")
    return sqlite_head


def migrate(root: Path, url: str, log: Log, *, now: Callable[[], float] = time.time) -> Moved:
    """Move the node of data folder `root` from its bbs.db into the empty PostgreSQL database at `url` (the steps
    above). Raises CommandError (one line) or Conflict `data_in_use` when refused; then nothing has changed."""
    data = DataDir(root)
    if not db.is_postgresql_url(url):
        raise CommandError("--to takes a PostgreSQL URL (postgresql://user@host/database)")
    if not root.is_dir():
        raise CommandError(f"{root} is a file, not a data folder") if root.exists() else no_node(root)
    if data.store_url is not None:
        raise CommandError(f"{root} keeps its node in PostgreSQL already (named in {data.store_url_path})")
    if not data.db_path.exists():
        raise no_node(root)
    node_id = require_node(root)
    with _serve_lock(root):
        sqlite_conn = db.connect(data.db_path, log=log)
        try:
            _check_version(data, sqlite_conn)
            with db.transaction(sqlite_conn, immediate=True, commit=False):  # no CLI write lands in bbs.db now
                moved = _copy_and_verify(sqlite_conn, url, node_id, log)
                _name_store(data, url)
        finally:
            sqlite_conn.close()  # the last connection: SQLite folds its WAL back into bbs.db
        kept = _set_aside(data, now())
    return Moved(node_id, moved.tables, moved.rows, moved.records, moved.digests_checked, str(kept))


@contextlib.contextmanager
def _serve_lock(root: Path) -> Iterator[None]:
    """Hold the folder's serve lock: a serving node refuses the move (`data_in_use`), and no node starts during it."""
    handle = datalock.hold(root)
    try:
        yield
    finally:
        handle.close()


def _check_version(data: DataDir, conn: sqlite3.Connection) -> None:
    version, head = ops_store.schema_version(conn), heads()
    if version < head:
        raise CommandError(
            f"{data.db_path} is at schema version {version}, older than this software's {head}: start the node once"
            f" ('bbs serve --data {data.root}') or migrate it ('bbs init --data {data.root}'), then move it"
        )
    if version > head:
        raise CommandError(
            f"{data.db_path} is at schema version {version}, newer than this software's {head}: upgrade agent-bbs"
        )


def _copy_and_verify(sqlite_conn: sqlite3.Connection, url: str, node_id: str, log: Log) -> Moved:
    """Steps 2 and 3 in one PostgreSQL transaction, committed only when every check agrees."""
    try:
        pg = pg_conn.connect(url, log=log)
    except sqlite3.DatabaseError as exc:  # the URL is not printed: it may hold a password
        raise CommandError(f"cannot connect to the target database: {_one_line(str(exc))}") from None
    try:
        with pg.raw.transaction():  # pg_schema.migrate's own transactions nest in it as savepoints
            copy.take_schema_lock(pg)
            tables = copy.pg_table_count(pg)
            if tables:
                raise CommandError(
                    f"the target database is not empty ({tables} tables or views); give a new empty database"
                    " (CREATE DATABASE ...)"
                )
            pg_schema.migrate(pg)
            rows = _copy(sqlite_conn, pg)
            checked = verify(sqlite_conn, pg, node_id, tables_of(sqlite_conn, pg), copy.undone)
            _continue_identities(sqlite_conn, pg)  # after the rebuild's trial, which restarts the projections' own
            records = copy.row_count(pg, "records")
            return Moved(node_id, len(tables_of(sqlite_conn, pg)), rows, records, checked, "")
    finally:
        pg.close()


def tables_of(sqlite_conn: sqlite3.Connection, pg: PgConn) -> list[str]:
    """The tables to copy, in PostgreSQL's foreign-key order; refused when the two schemas name different tables."""
    ours = [table for table in copy.pg_tables(pg) if table != copy.VERSION_TABLE]
    theirs = copy.sqlite_tables(sqlite_conn)
    if sorted(ours) != sorted(theirs):
        only_sqlite, only_pg = sorted(set(theirs) - set(ours)), sorted(set(ours) - set(theirs))
        raise Mismatch(f"the schemas differ: tables only in SQLite {only_sqlite}, only in PostgreSQL {only_pg}")
    return ours


def _copy(sqlite_conn: sqlite3.Connection, pg: PgConn) -> int:
    """Copy every table's rows (their keys included) with the triggers off. Returns the rows copied."""
    tables = tables_of(sqlite_conn, pg)
    triggered = copy.pg_triggered_tables(pg)
    copy.set_triggers(pg, triggered, enabled=False)
    rows = 0
    for table in tables:
        columns = copy.pg_columns(pg, table)
        if set(columns) != set(copy.sqlite_columns(sqlite_conn, table)):
            raise Mismatch(f"the schemas differ: table {table} has other columns on the two engines")
        copy.empty_table(pg, table)  # the rows the migrations wrote are in SQLite's copy of the table too
        rows += copy.copy_rows(pg, table, columns, copy.sqlite_rows(sqlite_conn, table, columns))
    copy.set_triggers(pg, triggered, enabled=True)
    return rows


def _continue_identities(sqlite_conn: sqlite3.Connection, pg: PgConn) -> None:
    """Set each identity past the largest key copied, or past the largest SQLite's AUTOINCREMENT handed out (a purged
    record's seq), so the next record's seq follows the last one SQLite gave."""
    handed_out = copy.sqlite_handed_out(sqlite_conn)
    for table, column in copy.pg_identities(pg):
        after = max(copy.largest(sqlite_conn, table, column), handed_out.get(table, 0))
        copy.continue_identity(pg, table, column, after)


def verify(original: Conn, copied: Conn, node_id: str, tables: list[str], undone: Trial) -> int:
    """Every check of step 3, of a copy of the node's database against the original (either way between the two
    engines); raises Mismatch naming what differs. `undone(copied)` runs the rebuild trial in a block it rolls back.
    Returns how many digests were compared."""
    counted = {table: (copy.row_count(original, table), copy.row_count(copied, table)) for table in tables}
    differ = [f"{table} {a} != {b}" for table, (a, b) in counted.items() if a != b]
    if differ:
        raise Mismatch("row counts differ (original != copy): " + ", ".join(differ))
    spaces: list[str | None] = [None, *copy.spaces_held(original)]
    for space in spaces:
        if digest(original, node_id, space=space) != digest(copied, node_id, space=space):
            raise Mismatch(f"the sync digest of {space or 'the public federation'} differs")
    as_copied, as_original = projections.snapshot(copied), projections.snapshot(original)
    if as_copied != as_original:
        raise Mismatch("the projections copied differ from the original's: " + _differing(as_copied, as_original))
    with undone(copied):
        projections.rebuild(copied)
        rebuilt = projections.snapshot(copied)
    if rebuilt != as_copied:
        raise Mismatch(
            "a rebuild of the projections from the copied log differs from the projections copied ("
            + _differing(as_copied, rebuilt)
            + "); run 'bbs rebuild' on the node first and look at what it reports"
        )
    return len(spaces)


def _differing(a: dict[str, list[Any]], b: dict[str, list[Any]]) -> str:
    return "tables " + ", ".join(sorted(table for table in a if a[table] != b.get(table)))


def _name_store(data: DataDir, url: str) -> None:
    """Write `url` to the folder's store.url (private, replaced in one rename)."""
    temporary = data.root / (STORE_FILE + ".new")
    old_umask = os.umask(0o077)
    try:
        temporary.write_text(url + "\n", "utf-8")
    finally:
        os.umask(old_umask)
    os.replace(temporary, data.store_url_path)


def _set_aside(data: DataDir, now: float) -> Path:
    """Rename bbs.db (and a WAL or shared-memory file left beside it) to a name no command opens; return it."""
    aside = aside_path(data.root, ASIDE_PREFIX, now)
    for suffix in ("-wal", "-shm"):
        leftover = data.db_path.with_name(data.db_path.name + suffix)
        if leftover.exists():
            os.replace(leftover, aside.with_name(aside.name + suffix))
    os.replace(data.db_path, aside)
    return aside


def aside_path(root: Path, prefix: str, now: float) -> Path:
    """A new name in folder `root` for a file set aside by a move: `prefix`, the UTC time, a number if taken."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    aside = root / f"{prefix}{stamp}"
    n = 1
    while aside.exists():
        n += 1
        aside = root / f"{prefix}{stamp}-{n}"
    return aside


def _one_line(text: str) -> str:
    return " ".join(text.split())
