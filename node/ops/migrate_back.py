"""`bbs migrate-store --to sqlite`: move a node's database from PostgreSQL back into a SQLite file in its folder.

The reverse of node/ops/migrate_store.py (docs/operations.md, "Moving a node back to SQLite"; docs/decisions.md
record 95):

1. Refuse, with one line and nothing changed: a folder that is serving (its lock), that holds no node, that is on
   SQLite already, that holds a bbs.db beside its store.url; a database at another schema version than this
   software's head; a database another client is connected to (another process of the node, a `bbs` command, a
   psql): every process of the node must be stopped, since the node can live in one place only.
2. Hold the folder's serve lock, and in ONE PostgreSQL transaction holding the node's writer lock (no process of the
   node writes meanwhile): make a new SQLite file, DIR/bbs.db.filling, at this software's schema, and copy every
   table into it in one SQLite transaction (node/store/to_sqlite.py).
3. Verify the copy as the forward move does (`migrate_store.verify`: row counts, the sync digests, the projections
   copied and rebuilt from the copied log), refusing on any difference; set AUTOINCREMENT past the largest key
   PostgreSQL handed out. Commit the SQLite file, make it durable, rename it DIR/bbs.db.moving (always a whole copy).
4. Check again that no other client connected meanwhile; write a new move id into DIR/moved-to-sqlite.id, then mark
   the PostgreSQL database as moved with that id (node_meta `moved_to_sqlite`: every command and `bbs serve` on it
   refuses from then on, and every write transaction on it is refused) and commit. Any failure before the COMMIT
   removes the files.
5. Rename bbs.db.moving to bbs.db, set store.url aside as store.url.before-sqlite-<time>, remove the id file. An
   interruption between 4 and 5 leaves the database marked and the folder naming it: running the command again in
   the folder holding the mark's id finishes 5 (or copies again if both files are gone); in any other folder it
   refuses, so no copy left elsewhere becomes a second node.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from identity import key_files, keys
from node.ops import datalock, migrate_store
from node.ops import store as ops_store
from node.ops.datadir import MOVE_ID_NAME, DataDir, moved_away, moved_here, no_node, require_node
from node.ops.migrate_store import Mismatch, Moved, heads
from node.store import db, pg_conn
from node.store import to_postgresql as pg_side
from node.store import to_sqlite as copy
from node.store.conn import LOCK_NOT_AVAILABLE, DatabaseError
from node.store.pg_conn import PgConn
from node.store.projections import Log
from wire.cli import CommandError

FILLING_NAME = "bbs.db.filling"  # the SQLite file while it is filled; renamed bbs.db.moving once whole and checked
MOVING_NAME = "bbs.db.moving"  # the whole copy, until the database is marked; then renamed to bbs.db
ASIDE_PREFIX = "store.url.before-sqlite-"  # + the UTC time of the move: where store.url is kept


@dataclass(frozen=True)
class MovedBack(Moved):
    """What `migrate_back` did: `Moved`'s account, `kept_aside` naming where store.url now lies; `finished` is true
    when this run only finished a move an earlier run had committed (nothing copied)."""

    finished: bool = False


def migrate_back(root: Path, log: Log, *, now: Callable[[], float] = time.time) -> MovedBack:
    """Move the node of data folder `root` from the PostgreSQL database its store.url names into DIR/bbs.db (the
    steps above). Raises CommandError (one line) or Conflict `data_in_use` when refused; then nothing has changed."""
    data = DataDir(root)
    if not root.is_dir():
        raise CommandError(f"{root} is a file, not a data folder") if root.exists() else no_node(root)
    url = data.store_url
    if url is None:
        if data.db_path.exists():
            (root / MOVE_ID_NAME).unlink(missing_ok=True)  # left by a move interrupted after its last rename
            raise CommandError(f"{root} keeps its node in SQLite already")
        raise no_node(root)
    handle = datalock.hold(root)
    try:
        pg = _connect(url, log)
        try:
            mark = ops_store.meta_value(pg, db.MOVED_KEY)
            if mark is None:
                if data.db_path.exists():
                    raise CommandError(
                        f"{root} holds a bbs.db beside its store.url; move that file out of the folder first (the"
                        " node is in the PostgreSQL database store.url names)"
                    )
                moved = _copy_and_verify(data, pg, require_node(root), log, now(), move=secrets.token_hex(16))
            elif not moved_here(data, mark):
                raise moved_away(data, mark)  # another folder's move: this one (a joined process's) is done
            elif (data.root / MOVING_NAME).exists() or data.db_path.exists():
                return _finish(data, now())  # an earlier run committed the move: the renames are left
            else:  # neither file is here (deleted, or a disk that lost them): copy again, the database holds it all
                moved = _copy_and_verify(data, pg, _marked_node(data, pg), log, now(), move=None)
        finally:
            pg.close()
        return _finish(data, now(), moved)
    finally:
        handle.close()


def _marked_node(data: DataDir, pg: PgConn) -> str:
    """The node id of a marked database (which `require_node` refuses), checked against the folder's key."""
    node_id = ops_store.stored_node_id(pg)
    try:
        did = key_files.load_key(data.key_path).did
    except (OSError, ValueError, keys.KeyError_):
        did = None
    if node_id is None or did != node_id:
        raise CommandError(f"{data.key_path} is not the key of the node the database holds: restore the folder's key")
    return node_id


def _check_version(pg: PgConn, marked: bool) -> None:
    version, head = ops_store.schema_version(pg), heads()
    if version > head:
        raise CommandError(
            f"the node's database is at schema version {version}, newer than this software's {head}: upgrade agent-bbs"
        )
    if version < head:
        remedy = (
            "run this with the version of agent-bbs that moved it"
            if marked
            else "start the node once with this version, then move it"
        )
        raise CommandError(
            f"the node's database is at schema version {version}, older than this software's {head}: {remedy}"
        )


def _connect(url: str, log: Log) -> PgConn:
    try:
        return pg_conn.connect(url, log=log)
    except sqlite3.DatabaseError as exc:  # the URL is not printed: it may hold a password
        raise CommandError(f"cannot connect to the node's database: {' '.join(str(exc).split())}") from None


def _copy_and_verify(data: DataDir, pg: PgConn, node_id: str, log: Log, now: float, *, move: str | None) -> MovedBack:
    """Steps 2 to 4: the SQLite file made, filled, checked and made durable inside one PostgreSQL transaction that
    ends by marking the database moved with the id `move`, written first into the folder's MOVE_ID_NAME (None: the
    database is marked already, by this folder's move). The file is filled under FILLING_NAME and renamed
    bbs.db.moving once complete, so a bbs.db.moving is always a whole copy. Both files are removed on any failure
    before the COMMIT; a COMMIT whose outcome is unknown keeps them (the next run reads the mark)."""
    moving, filling = data.root / MOVING_NAME, data.root / FILLING_NAME
    # an interrupted run's files: the database was not marked by that run, or this is its own folder's copy again
    for leftover in (filling, moving):
        _remove(leftover)
    committing = False
    try:
        with pg.raw.transaction():
            _refuse_other_clients(pg)  # first: a session left idle in a transaction may hold the writer lock
            _take_writer_lock(pg)
            # first, so the copy holds it too: a writer at REPEATABLE READ that waited on the lock fails on this row
            copy.bump_write_clock(pg)
            _check_version(pg, marked=move is None)
            moved = _fill(filling, pg, node_id, log)
            os.replace(filling, moving)
            _fsync_folder(data.root)  # the whole file's name is on the disk before the mark names this folder
            _refuse_other_clients(pg)
            if move is not None:
                key_files.write_private_file(data.root / MOVE_ID_NAME, move.encode())  # fsynced, with its folder
                where = {"folder": str(data.root.resolve()), "host": socket.gethostname()}
                copy.mark_moved(pg, json.dumps({"at_ms": int(now * 1000), "move": move, **where}))
            committing = True
    except BaseException as exc:
        if not committing:
            _remove(filling)
            _remove(moving)
            if move is not None:
                (data.root / MOVE_ID_NAME).unlink(missing_ok=True)
            raise
        if not isinstance(exc, Exception):
            raise
        raise CommandError(
            f"the move's COMMIT failed and its outcome is unknown ({' '.join(str(exc).split())}): run 'bbs"
            f" migrate-store --from {data.root} --to sqlite' again, which finishes the move or makes it again"
        ) from None
    return moved


def _take_writer_lock(pg: PgConn) -> None:
    try:
        copy.take_writer_lock(pg)
    except DatabaseError as exc:
        if exc.sqlstate != LOCK_NOT_AVAILABLE:
            raise
        raise CommandError(
            f"the node's writer lock stayed held for {copy.LOCK_WAIT}: a session of the database holds it (look in"
            " pg_stat_activity for one idle in a transaction); end it, then run this again"
        ) from None


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
            tables = migrate_store.tables_of(conn, pg)
            rows = _copy(conn, pg, tables)
            checked = migrate_store.verify(pg, conn, node_id, tables, copy.undone)
            copy.forget_mark(conn)  # a copy made again of a marked database holds its mark: not the SQLite node's
            _continue_autoincrement(conn, pg)
            db.record_vacuumed_txn(conn)  # a file made with secure_delete on throughout
            records = pg_side.row_count(conn, "records")
        if not copy.checkpoint(conn):  # the rename takes the file alone: nothing may be left in its WAL
            raise CommandError(f"cannot fold {moving}'s write-ahead log into it; nothing was changed")
    finally:
        conn.close()
    if moving.with_name(moving.name + "-wal").exists():
        raise CommandError(f"{moving}'s write-ahead log is still beside it after its last close; nothing was changed")
    key_files.fsync_path(moving)
    return MovedBack(node_id, len(tables), rows, records, checked, "")


def _copy(conn: sqlite3.Connection, pg: PgConn, tables: list[str]) -> int:
    """Copy every table's rows (keys included) with SQLite's triggers dropped, then made again. Returns the rows."""
    triggers = copy.sqlite_triggers(conn)
    copy.drop_triggers(conn, triggers)
    rows = 0
    for table in tables:
        columns = pg_side.pg_columns(pg, table)
        if set(columns) != set(pg_side.sqlite_columns(conn, table)):
            raise Mismatch(f"the schemas differ: table {table} has other columns on the two engines")
        pg_side.empty_table(conn, table)  # the rows the migrations wrote are in PostgreSQL's table too
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
            " lists them) and any command, client or extension's worker using the database, then run this again"
        )


def _finish(data: DataDir, now: float, moved: MovedBack | None = None) -> MovedBack:
    """Step 5: bbs.db.moving becomes bbs.db, store.url is set aside, the move's id file goes. `moved`: what this run
    copied; None when it only finishes a move an earlier run committed."""
    moving = data.root / MOVING_NAME
    if moving.exists():
        os.replace(moving, data.db_path)
    kept = _set_aside(data, now)
    _fsync_folder(data.root)
    (data.root / MOVE_ID_NAME).unlink(missing_ok=True)  # the folder no longer names the marked database
    if moved is not None:
        return MovedBack(moved.node_id, moved.tables, moved.rows, moved.records, moved.digests_checked, str(kept))
    return MovedBack(require_node(data.root), 0, 0, 0, 0, str(kept), finished=True)


def _set_aside(data: DataDir, now: float) -> Path:
    """Rename store.url to a name no command reads; return it."""
    aside = migrate_store.aside_path(data.root, ASIDE_PREFIX, now)
    os.replace(data.store_url_path, aside)
    return aside


def _remove(path: Path) -> None:
    for leftover in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        leftover.unlink(missing_ok=True)


def _fsync_folder(folder: Path) -> None:
    """Make the folder's names durable, where the file system allows it (as identity/key_files.py does)."""
    with contextlib.suppress(OSError):
        key_files.fsync_path(folder)
