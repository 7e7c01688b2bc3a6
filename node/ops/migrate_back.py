"""`bbs migrate-store --to sqlite`: move a node's database from PostgreSQL back into a SQLite file in its folder.

The reverse of node/ops/migrate_store.py (docs/operations.md, "Moving a node back to SQLite"; docs/decisions.md
record 95):

1. Refuse, with one line and nothing changed: a folder that is serving (its lock), that holds no node, that is on
   SQLite already, that holds a bbs.db beside its store.url; a database at another schema version than this
   software's head; a database another client is connected to (another process of the node, a `bbs` command, a
   psql): every process of the node must be stopped, since the node can live in one place only.
2. Hold the folder's serve lock, and in ONE PostgreSQL transaction holding the node's writer lock (no process of the
   node writes meanwhile): make a new SQLite file, DIR/bbs.db.moving, at this software's schema, and copy every
   table into it in one SQLite transaction (node/store/to_sqlite.py).
3. Verify the copy as the forward move does (`migrate_store.verify`: row counts, the sync digests, the projections
   copied and rebuilt from the copied log), refusing on any difference; set AUTOINCREMENT past the largest key
   PostgreSQL handed out. Commit the SQLite file and make it durable.
4. Check again that no other client connected meanwhile, then mark the PostgreSQL database as moved (node_meta
   `moved_to_sqlite`: every command and `bbs serve` on it refuses from then on) and commit.
5. Rename bbs.db.moving to bbs.db, and set store.url aside as store.url.before-sqlite-<time>. An interruption
   between 4 and 5 leaves the database marked and the folder naming it: running the command again finishes 5.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from node.ops import datalock
from node.ops import store as ops_store
from node.ops.datadir import DataDir, no_node, require_node
from node.ops.migrate_store import Mismatch, heads, verify
from node.store import db, pg_conn
from node.store import to_postgresql as pg_side
from node.store import to_sqlite as copy
from node.store.pg_conn import PgConn
from node.store.projections import Log
from wire.cli import CommandError

MOVING_NAME = "bbs.db.moving"  # the SQLite file while it is made; renamed to bbs.db once the database is marked
ASIDE_PREFIX = "store.url.before-sqlite-"  # + the UTC time of the move: where store.url is kept


@dataclass(frozen=True)
class MovedBack:
    """What `migrate_back` did: the node moved, what was copied and checked, and where store.url now lies.
    `finished` is true when this run only finished a move an earlier run had committed (nothing copied)."""

    node_id: str
    tables: int
    rows: int
    records: int
    digests_checked: int
    kept_aside: str
    finished: bool = False


def migrate_back(root: Path, log: Log, *, now: Callable[[], float] = time.time) -> MovedBack:
    """Move the node of data folder `root` from the PostgreSQL database its store.url names into DIR/bbs.db (the
    steps above). Raises CommandError (one line) or Conflict `data_in_use` when refused; then nothing has changed."""
    data = DataDir(root)
    if not root.is_dir():
        raise CommandError(f"{root} is a file, not a data folder") if root.exists() else no_node(root)
    url = data.store_url
    if url is None:
        raise CommandError(f"{root} keeps its node in SQLite already") if data.db_path.exists() else no_node(root)
    handle = datalock.hold(root)
    try:
        pg = _connect(url, log)
        try:
            marked = copy.moved(pg)
            if marked is not None:
                return _finish(data, marked, now())
            if data.db_path.exists():
                raise CommandError(
                    f"{root} holds a bbs.db beside its store.url; move that file out of the folder first (the node"
                    f" is in the PostgreSQL database store.url names)"
                )
            node_id = require_node(root)
            moved = _copy_and_verify(data, pg, node_id, log, now())
        finally:
            pg.close()
        return _finish(data, "", now(), moved)
    finally:
        handle.close()


def _connect(url: str, log: Log) -> PgConn:
    try:
        return pg_conn.connect(url, log=log)
    except sqlite3.DatabaseError as exc:  # the URL is not printed: it may hold a password
        raise CommandError(f"cannot connect to the node's database: {' '.join(str(exc).split())}") from None


def _copy_and_verify(data: DataDir, pg: PgConn, node_id: str, log: Log, now: float) -> MovedBack:
    """Steps 2 to 4: the SQLite file made, filled, checked and made durable inside one PostgreSQL transaction that
    ends by marking the database moved."""
    moving = data.root / MOVING_NAME
    _remove(moving)  # a file an interrupted run left: the database was not marked, so it never counted
    with pg.raw.transaction():
        copy.take_writer_lock(pg)
        _refuse_other_clients(pg)
        version, head = ops_store.schema_version(pg), heads()
        if version != head:
            newer = "newer" if version > head else "older"
            remedy = "upgrade agent-bbs" if version > head else "start the node once with this version, then move it"
            raise CommandError(
                f"the node's database is at schema version {version}, {newer} than this software's {head}: {remedy}"
            )
        try:
            moved = _fill(moving, pg, node_id, log)
        except BaseException:
            _remove(moving)
            raise
        _refuse_other_clients(pg)
        copy.mark_moved(pg, json.dumps({"at_ms": int(now * 1000), "folder": str(data.root.resolve())}))
    return moved


def _fill(moving: Path, pg: PgConn, node_id: str, log: Log) -> MovedBack:
    """Make `moving` at this software's schema, copy every table into it and check the copy, in one SQLite
    transaction; close it (the WAL folded back into the file) and make it durable."""
    old_umask = os.umask(0o077)
    try:
        conn = db.connect(moving, log=log)
    finally:
        os.umask(old_umask)
    try:
        db.migrate_store(conn)
        with db.transaction(conn, immediate=True):
            tables = _tables(conn, pg)
            rows = _copy(conn, pg, tables)
            checked = verify(pg, conn, node_id, tables, copy.undone)
            _continue_autoincrement(conn, pg)
            db.record_vacuumed_txn(conn)  # a file made with secure_delete on throughout
            records = pg_side.row_count(conn, "records")
    finally:
        conn.close()
    _fsync(moving)
    return MovedBack(node_id, len(tables), rows, records, checked, "")


def _tables(conn: sqlite3.Connection, pg: PgConn) -> list[str]:
    """The tables to copy, in PostgreSQL's foreign-key order; refused when the two schemas name different tables."""
    theirs = [table for table in pg_side.pg_tables(pg) if table != pg_side.VERSION_TABLE]
    ours = pg_side.sqlite_tables(conn)
    if sorted(ours) != sorted(theirs):
        only_sqlite, only_pg = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
        raise Mismatch(f"the schemas differ: tables only in SQLite {only_sqlite}, only in PostgreSQL {only_pg}")
    return theirs


def _copy(conn: sqlite3.Connection, pg: PgConn, tables: list[str]) -> int:
    """Copy every table's rows (keys included) with SQLite's triggers dropped, then made again. Returns the rows."""
    triggers = copy.sqlite_triggers(conn)
    copy.drop_triggers(conn, triggers)
    rows = 0
    for table in tables:
        columns = pg_side.pg_columns(pg, table)
        if set(columns) != set(pg_side.sqlite_columns(conn, table)):
            raise Mismatch(f"the schemas differ: table {table} has other columns on the two engines")
        copy.empty_table(conn, table)  # the rows the migrations wrote are in PostgreSQL's table too
        rows += copy.copy_rows(conn, table, columns, copy.pg_rows(pg, table, columns))
    copy.create_triggers(conn, triggers)
    return rows


def _continue_autoincrement(conn: sqlite3.Connection, pg: PgConn) -> None:
    """Set SQLite's AUTOINCREMENT past the largest key PostgreSQL's identity handed out (a purged record's seq too;
    SQLite itself moved it past every key copied)."""
    identities = dict(pg_side.pg_identities(pg))
    for table in copy.autoincrement_tables(conn):
        if table in identities:
            copy.continue_autoincrement(conn, table, pg_side.next_key(pg, table, identities[table]) - 1)


def _refuse_other_clients(pg: PgConn) -> None:
    others = copy.other_clients(pg)
    if others:
        raise CommandError(
            f"{others} other connection(s) to the node's database: stop every process of the node ('bbs processes'"
            " lists them) and any command or client using the database, then run this again"
        )


def _finish(data: DataDir, marked: str, now: float, moved: MovedBack | None = None) -> MovedBack:
    """Step 5: bbs.db.moving becomes bbs.db, store.url is set aside. `marked` is the database's record of a move an
    earlier run committed (finished here), or "" right after this run's."""
    moving = data.root / MOVING_NAME
    if moving.exists():
        os.replace(moving, data.db_path)
    elif not data.db_path.exists():
        raise CommandError(
            f"the node's database records that it moved to SQLite ({marked}), but {moving} is gone: restore"
            f" {data.db_path} from a backup of the folder"
        )
    kept = _set_aside(data, now)
    _fsync(data.root)
    if moved is not None:
        return MovedBack(moved.node_id, moved.tables, moved.rows, moved.records, moved.digests_checked, str(kept))
    return MovedBack(require_node(data.root), 0, 0, 0, 0, str(kept), finished=True)


def _set_aside(data: DataDir, now: float) -> Path:
    """Rename store.url to a name no command reads; return it."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    aside = data.root / f"{ASIDE_PREFIX}{stamp}"
    n = 1
    while aside.exists():
        n += 1
        aside = data.root / f"{ASIDE_PREFIX}{stamp}-{n}"
    os.replace(data.store_url_path, aside)
    return aside


def _remove(path: Path) -> None:
    for leftover in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        leftover.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
