"""The node's data folder: node key, database, first-run initialisation, and the checks commands run on it.

Only `bbs init` and `bbs serve` create a node (`initialise`, under the folder's init lock so that concurrent
commands never build two). Every other command opens an existing node through `require_node`, which refuses
a folder that holds none, or whose node.key does not belong to its database, with a one-line error; `bbs
digest` only reads the database (`require_database`), so a replica restored without its key has a digest.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from identity import key_files, keys
from node.agents import recovery_file
from node.agents import service as agents
from node.errors import Conflict
from node.ops import datalock, store
from node.store import db
from node.store.conn import SQLITE, engine_of
from node.store.key_fence import KEY_FENCE_NAME
from sync.replay import FENCE_NAME, ReplayFence
from wire.cli import CommandError

STORE_FILE = "store.url"  # a node on PostgreSQL: its database's URL (docs/decisions.md record 80)
# the id of a move to SQLite this folder made (bbs migrate-store --to sqlite), from before the database was marked
# with it until the move is finished (docs/decisions.md record 95)
MOVE_ID_NAME = "moved-to-sqlite.id"


@dataclass(frozen=True)
class DataDir:
    """Paths inside a data folder."""

    root: Path

    @property
    def db_path(self) -> Path:
        return self.root / "bbs.db"

    @property
    def key_path(self) -> Path:
        return self.root / "node.key"

    @property
    def store_url_path(self) -> Path:
        """The file naming the node's PostgreSQL database, written by `bbs init --store` (absent: SQLite)."""
        return self.root / STORE_FILE

    @property
    def store_url(self) -> str | None:
        """The PostgreSQL URL of the node's database, or None: the node's database is bbs.db in the folder."""
        try:
            return self.store_url_path.read_text("utf-8").strip() or None
        except FileNotFoundError:
            return None

    @property
    def store(self) -> Path | str:
        """What node.store.db opens: the PostgreSQL URL the folder names, else its bbs.db."""
        return self.store_url or self.db_path

    def has_store(self) -> bool:
        """Whether the folder names a database: a PostgreSQL URL, or a bbs.db file."""
        return self.store_url is not None or self.db_path.exists()

    def exists(self) -> bool:
        return self.key_path.exists() and self.has_store()


def no_node(root: Path) -> CommandError:
    return CommandError(f"{root} holds no node; run 'bbs init --data {root}' (or 'bbs serve --data {root}') first")


def _check_folder(root: Path) -> None:
    if root.exists() and not root.is_dir():
        raise CommandError(f"{root} is a file, not a data folder")


def _load_key(path: Path) -> keys.SigningKey:
    try:
        return key_files.load_key(path)
    except (keys.KeyError_, ValueError):
        # the reason is not shown: the file is secret and the parser's message could quote it
        raise CommandError(
            f"{path} is not a node key file (one line 'ed25519:<base64url seed>'); restore it from a backup"
        ) from None


def _stored_node_id(data: DataDir) -> str | None:
    """The node id recorded in the folder's database, or None if it holds none yet. Reads only."""
    where = data.store
    try:
        conn = db.connect_store(where, readonly=True)
        try:
            node_id = store.stored_node_id(conn)
            moved = store.meta_value(conn, db.MOVED_KEY) if node_id is not None and isinstance(where, str) else None
        finally:
            conn.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        reason = "text that is not UTF-8" if isinstance(exc, UnicodeDecodeError) else _one_line(str(exc))
        if isinstance(where, str):  # the URL is not printed: it may hold a password
            where_named = data.store_url_path
            raise CommandError(f"the PostgreSQL database named in {where_named} cannot be read: {reason}") from None
        raise CommandError(
            f"{where} is not a readable node database ({reason}); check it with 'bbs doctor --data {data.root}'"
        ) from None
    if moved is not None:
        raise moved_away(data, moved)
    return node_id


def moved_here(data: DataDir, mark: str) -> bool:
    """Whether the database's mark of a move to SQLite (JSON: when, the move's id, the folder and host it went to)
    is of this folder's move: the id the move wrote into MOVE_ID_NAME before it marked the database. Two folders at
    the same path (a container's /data, another host's) are told apart by it; a joined process's folder holds none.
    An id file that cannot be read (its owner, its mode) is refused, not taken for a folder without one."""
    path = data.root / MOVE_ID_NAME
    try:
        held = path.read_text("utf-8").strip()
    except FileNotFoundError:
        return False
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"cannot read {path} ({exc.__class__.__name__}): run this as the folder's owner") from None
    return held == _mark_field(mark, "move")


def moved_away(data: DataDir, mark: str) -> CommandError:
    """The refusal of a folder whose PostgreSQL database the node moved out of (`mark`: the database's record of the
    move; docs/decisions.md record 95): the folder it moved into finishes the move by running it again; another
    (a joined process's) is done, unless it holds a copy of the node, when the operator decides."""
    into = f"{_mark_field(mark, 'folder') or '?'} on {_mark_field(mark, 'host') or '?'}"
    said = f"the node in the PostgreSQL database named in {data.store_url_path} moved to SQLite, into {into}"
    if moved_here(data, mark):
        return CommandError(f"{said}; run 'bbs migrate-store --from {data.root} --to sqlite' again to finish")
    copies = [p.name for p in (data.root / "bbs.db.moving", data.db_path) if p.exists()]
    if copies:  # the folder it moved into, whose id file was lost? Never decided here: two copies would be two nodes
        return CommandError(
            f"{said}; this folder holds {' and '.join(copies)} but not the move's id ({MOVE_ID_NAME}): if it is the"
            f" folder the node moved into, write {_mark_field(mark, 'move')} into {data.root / MOVE_ID_NAME} and run"
            f" 'bbs migrate-store --from {data.root} --to sqlite' again; otherwise delete {data.root}"
        )
    return CommandError(f"{said}; no process serves it from this folder any more: delete {data.root}")


def _mark_field(mark: str, name: str) -> str | None:
    try:
        return str(json.loads(mark)[name])
    except (ValueError, KeyError, TypeError):
        return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _check_pair(data: DataDir, key: keys.SigningKey, node_id: str) -> None:
    if key.did != node_id:
        raise Conflict(
            f"{data.key_path} is {key.did} but {data.store_url_path if data.store_url else data.db_path} belongs to"
            f" {node_id};"
            " put the node's own node.key back (or restore a backup)",
            code="key_mismatch",
        )


def require_node(root: Path) -> str:
    """Check that `root` holds a node whose key matches its database; return the node id. Creates nothing.

    Raises CommandError (one line, for the CLI) or Conflict `key_mismatch`. Waits for an initialisation in
    progress (a `bbs serve` starting on a fresh folder) to finish first.
    """
    data = DataDir(root)
    _check_folder(root)
    with datalock.initialised(root):
        has_key, has_db = data.key_path.exists(), data.has_store()
        node_id = _stored_node_id(data) if has_db else None
        if node_id is not None and not has_key:
            raise CommandError(f"{data.key_path} is missing; the database belongs to {node_id}: restore its key")
        if node_id is None:
            raise no_node(root)
        _check_pair(data, _load_key(data.key_path), node_id)
    return node_id


def require_database(root: Path) -> str:
    """The node id of the database in `root`, for commands that only read it (a digest of a replica restored
    next to no key is fine). Creates nothing; CommandError when there is no node database."""
    data = DataDir(root)
    _check_folder(root)
    with datalock.initialised(root):
        node_id = _stored_node_id(data) if data.has_store() else None
    if node_id is None:
        raise no_node(root)
    return node_id


def initialise(root: Path, store_url: str | None = None) -> str | None:
    """Create the node key, database and admin token if missing. Returns the admin token if one was made.

    `store_url` (a `postgresql://` URL: `--store`) puts the node's database there, remembered in the folder's
    store.url; the folder keeps the key, the search index and the fences. A folder that already holds a node on
    another store (bbs.db, or another URL) is refused: a node's database is chosen once.

    Safe against concurrent processes: the work is done under the folder's init lock, so of several commands
    creating the same fresh folder exactly one creates the node (and gets the token); the others wait and find
    it. An existing node is checked instead: its key must belong to its database.
    """
    data = DataDir(root)
    _check_folder(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"cannot create the data folder {root}: {exc.strerror or exc}") from None
    try:
        os.chmod(root, 0o700)
    except OSError as exc:
        raise CommandError(f"cannot make the data folder {root} private (mode 700): {exc.strerror or exc}") from None
    with datalock.initialising(root):
        if store_url:
            _name_store(data, store_url)
        node_id = _stored_node_id(data) if data.has_store() else None
        if node_id is not None:
            if not data.key_path.exists():
                raise CommandError(f"{data.key_path} is missing; the database belongs to {node_id}: restore its key")
            _check_pair(data, _load_key(data.key_path), node_id)
            _migrate(data.store)  # as a start would: a newer schema is refused here (SchemaTooNew)
            return None
        if data.key_path.exists():  # a key without a node: an initialisation that was interrupted
            node_key = _load_key(data.key_path)
        else:
            node_key = keys.SigningKey.generate()
            key_files.save_key(data.key_path, node_key)
        token = _create_node(data.store, node_key, made_here=not data.has_store())
        ReplayFence.create(root / FENCE_NAME)  # a new node has accepted no peer request: no fence to keep
        return token


def _name_store(data: DataDir, url: str) -> None:
    """Remember `url` as the folder's database (store.url, private), unless the folder has one already: the same
    URL is fine, another store is refused."""
    if not db.is_postgresql_url(url):
        raise CommandError("--store takes a PostgreSQL URL (postgresql://user@host/database); omit it for SQLite")
    named = data.store_url
    if named == url:
        return
    if named is not None:
        raise CommandError(
            f"{data.root} keeps its node in another PostgreSQL database (named in {data.store_url_path})"
        )
    if data.db_path.exists():
        raise CommandError(f"{data.root} keeps its node in {data.db_path} (SQLite); it cannot move to --store")
    old_umask = os.umask(0o077)
    try:
        data.store_url_path.write_text(url + "\n", "utf-8")
    finally:
        os.umask(old_umask)


def _connect_private(where: Path | str) -> Any:
    old_umask = os.umask(0o077)
    try:
        return db.connect_store(where)
    finally:
        os.umask(old_umask)


def _migrate(where: Path | str) -> None:
    conn = _connect_private(where)
    try:
        db.migrate_store(conn)
    finally:
        conn.close()


def _create_node(where: Path | str, node_key: keys.SigningKey, *, made_here: bool) -> str:
    """Create the schema and record the node id, a fresh store epoch and the admin credential; return its token.
    `made_here`: no database was there before this call (a SQLite file it creates)."""
    conn = _connect_private(where)
    try:
        # a file this call creates has every write with secure_delete on (db.connect): no old text to VACUUM away at
        # the first start; a file that was there (another tool's, an interrupted init's) keeps its VACUUM
        new_file = made_here and engine_of(conn) == SQLITE and store.schema_version(conn) == 0
        db.migrate_store(conn)
        with db.transaction(conn, immediate=True):
            store.insert_node_identity_txn(conn, node_key.did, secrets.token_hex(16))
            token = agents.new_credential(conn, "admin", None, int(time.time() * 1000))
            if new_file:
                db.record_vacuumed_txn(conn)
    finally:
        conn.close()
    return token


def join(root: Path, existing: Path, store_url: str | None = None) -> str:
    """Make `root` the folder of another serving process of the node in `existing` (`bbs init --join`); return the
    node id. Several `bbs serve` processes act as one node only on PostgreSQL (docs/decisions.md record 89).

    The new folder gets what a process of the node needs of its own and cannot rebuild: the database's URL
    (store.url), the node key, the node's agent recovery key (made in `existing` first when the node has none yet,
    so that every process sets the same one) and the key fence (the rotations made through `existing`). Its search
    index is built from the log at its first start; its locks, replay and lease fences are its own. `existing` may
    be a copy of those files brought from another machine. Refused: a node on SQLite (one process per SQLite
    file), `existing` holding no node or a key that is not its database's, a `store_url` naming another database,
    and a `root` that holds a node already.
    """
    old = DataDir(existing)
    _check_folder(existing)
    if old.store_url is None:
        if old.db_path.exists():
            raise CommandError(
                f"{existing} keeps its node in {old.db_path} (SQLite): one process per SQLite file; move the node to"
                f" PostgreSQL first ('bbs migrate-store --from {existing} --to postgresql://...')"
            )
        raise no_node(existing)
    if store_url is not None and store_url != old.store_url:
        raise CommandError(
            f"--store names another database than the node of {existing} (named in {old.store_url_path})"
        )
    node_id = require_node(existing)
    new = DataDir(root)
    _check_folder(root)
    if _holds_node(new, old.store_url):
        raise CommandError(f"{root} holds a node already; --join makes the folder of a new process: give a new folder")
    recovery = recovery_file.load_or_create(old.root / recovery_file.FILE_NAME)
    key_fence = _read_optional(old.root / KEY_FENCE_NAME)
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(root, 0o700)
    except OSError as exc:
        raise CommandError(f"cannot create the data folder {root}: {exc.strerror or exc}") from None
    with datalock.initialising(root):
        if _holds_node(new, old.store_url):
            raise CommandError(f"{root} holds a node already; --join makes the folder of a new process")
        # store.url first and node.key last: an interrupted join leaves a folder naming the node's database without
        # its key, which every command refuses ("restore its key"), never a key that `bbs serve` would take for an
        # interrupted `bbs init` and give a SQLite database of its own
        key_files.write_private_file(new.store_url_path, (old.store_url + "\n").encode("utf-8"))
        key_files.save_key(root / recovery_file.FILE_NAME, recovery)
        if key_fence is not None:
            key_files.write_private_file(root / KEY_FENCE_NAME, key_fence)
        key_files.save_key(new.key_path, _load_key(old.key_path))
    return node_id


def _holds_node(data: DataDir, url: str) -> bool:
    """Whether `data` holds a node (or the start of one) other than a join to `url` that was interrupted."""
    if data.key_path.exists() or data.db_path.exists():
        return True
    return data.store_url not in (None, url)


def _read_optional(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
