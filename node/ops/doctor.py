"""`bbs doctor`: check a data folder without changing it, safe while the node serves.

A SQLite database is only read: it is copied (`VACUUM INTO`), and the checks that must write (rebuilding
projections from the log) run on the copy, which is then deleted. A PostgreSQL database (docs/decisions.md record
77) is checked where it is: the trial rebuild runs in a transaction that is rolled back, holding the writer's lock
and the projection tables for its length (writes and reads of those tables wait, nothing is changed); the checks
that are SQLite's own (integrity_check, the WAL file) are said not to apply there, one line each.
"""

from __future__ import annotations

import json
import sqlite3
import stat
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Literal

import msgspec

from identity import key_files, keys
from node.ops import store
from node.ops.backup import leftovers, snapshot_db
from node.ops.datadir import DataDir, moved_away
from node.redaction import store as redaction_store
from node.retention import store as retention_store
from node.search_index import indexer as search_indexer
from node.store import db, pg_schema, projections, void
from node.store.authority import dropped_counts
from node.store.conn import Conn
from node.store.projections import Log
from sync.auth import clock_advice, clock_offset

Status = Literal["ok", "warn", "fail"]


class Check(msgspec.Struct):
    """One finding."""

    name: str
    status: Status
    detail: str


def diagnose(data_root: Path, log: Log, *, scratch: Path | None = None, peer_timeout: float = 5.0) -> list[Check]:
    """Run every check on a data folder; the live files are never modified. `log` is the node's
    (node.features.LOG): the projectors and tables the projections check rebuilds."""
    data = DataDir(data_root)
    checks: list[Check] = []
    if not data_root.is_dir():
        return [Check("data_folder", "fail", f"{data_root} does not exist"), *_check_leftovers(data_root)]
    checks += _check_leftovers(data_root)
    mode = stat.S_IMODE(data_root.stat().st_mode)
    checks.append(
        Check("data_folder", "ok", f"{data_root} (mode {mode:o})")
        if not mode & 0o077
        else Check("data_folder", "warn", f"{data_root} is readable by others (mode {mode:o}); chmod 700 it")
    )
    key_did = _check_key(data, checks)
    url = data.store_url
    if url is None and not data.db_path.exists():
        checks.append(Check("database", "fail", f"{data.db_path} does not exist"))
        return checks
    if url is not None and not _check_reachable(data, url, checks):
        return checks
    current = _check_schema(data, checks)
    if current is None:
        return checks
    if url is not None:
        _check_peers(_diagnose_postgresql(data, url, log, key_did, current, checks), checks, peer_timeout)
        return checks
    peers: list[tuple[str, str | None]] = []
    with tempfile.TemporaryDirectory(dir=scratch, prefix="bbs-doctor-") as tmp:
        copy = Path(tmp) / "bbs.db"
        try:
            snapshot_db(data.db_path, copy)
        except sqlite3.DatabaseError as exc:
            checks.append(Check("database", "fail", f"cannot read {data.db_path}: {exc}"))
            return checks
        conn = db.connect(copy, log=log)
        try:
            if _check_integrity(conn, checks):
                db.migrate(conn)  # the copy, brought to this software's schema so its projectors apply
                peers = _check_store(data_root, conn, key_did, checks)
        finally:
            conn.close()
    _check_peers(peers, checks, peer_timeout)
    return checks


def _check_store(data_root: Path, conn: Conn, key_did: str | None, checks: list[Check]) -> list[tuple[str, str | None]]:
    """The checks both engines run on the node's database (a SQLite copy, or the PostgreSQL database itself); the
    peers to ask."""
    _check_identity(conn, key_did, checks)
    _check_key_fence(data_root, conn, key_did, checks)
    checks.append(Check("search_index", *search_indexer.check(data_root, conn)))  # type: ignore[arg-type]
    _check_projections(conn, checks)
    _check_void(conn, checks)
    _check_redactions(conn, data_root, checks)
    _check_retention(conn, checks)
    _check_dropped_key_events(conn, checks)
    return _peer_urls(conn)


def _diagnose_postgresql(
    data: DataDir, url: str, log: Log, key_did: str | None, current: int, checks: list[Check]
) -> list[tuple[str, str | None]]:
    """The checks of a node whose database is PostgreSQL, on the database itself (nothing of it is kept)."""
    conn = db.connect_store(url, log=log)
    try:
        mark = store.meta_value(conn, db.MOVED_KEY)
        if mark is not None:  # the node moved out of this database (bbs migrate-store --to sqlite, record 95)
            checks.append(Check("database", "fail", str(moved_away(data, mark))))
            return []
        checks.append(
            Check(
                "integrity",
                "ok",
                f"PostgreSQL checksums its own pages (data_checksums {store.data_checksums(conn)}); SQLite's"
                " integrity_check does not apply: pg_amcheck (the amcheck extension) checks tables and indexes",
            )
        )
        checks.append(
            Check(
                "wal",
                "ok",
                "the write-ahead log is the PostgreSQL server's, not a file of the data folder: archive it there"
                " (archive_command, pg_basebackup) for point-in-time recovery",
            )
        )
        if current != pg_schema.migrations()[-1][0]:  # the trial rebuild needs this software's schema
            checks.append(Check("projections", "warn", "not checked: the schema is migrated at the next start"))
            return []
        return _check_store(data.root, conn, key_did, checks)
    finally:
        conn.close()


def _check_leftovers(data_root: Path) -> list[Check]:
    """The folders restores left beside the data folder (node/ops/backup.py `leftovers`), listed, never removed."""
    found = leftovers(data_root)
    if not found:
        return []
    listed = "; ".join(f"{left.path} ({left.kind}, {left.bytes} bytes)" for left in found)
    return [
        Check(
            "restore_leftovers",
            "warn",
            f"{len(found)} folders left by restores: {listed}. Keep what you need, then remove the rest with"
            f" bbs restore-leftovers --data {data_root} --remove (keeps the newest replaced folder; --all too)",
        )
    ]


def _check_key(data: DataDir, checks: list[Check]) -> str | None:
    path = data.key_path
    if not path.exists():
        checks.append(Check("node_key", "fail", f"{path} does not exist"))
        return None
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        checks.append(Check("node_key", "fail", f"{path} has mode {mode:o}; it must be 600 (chmod 600 {path})"))
        return None
    try:
        did = key_files.load_key(path).did
    except Exception as exc:  # any unreadable key is a finding, not a crash
        checks.append(Check("node_key", "fail", f"{path} cannot be loaded: {exc}"))
        return None
    checks.append(Check("node_key", "ok", f"{did} (mode 600)"))
    return did


def _check_reachable(data: DataDir, url: str, checks: list[Check]) -> bool:
    """Whether the PostgreSQL database the folder names answers (its URL is never shown: it may hold a password)."""
    try:
        db.read_sync(url, store.record_count)
    except sqlite3.DatabaseError as exc:  # the engine-neutral errors subclass sqlite3's (record 76)
        detail = str(exc).replace(url, "<store.url>")
        checks.append(Check("database", "fail", f"cannot open the database named in {data.store_url_path}: {detail}"))
        return False
    return True


def _check_schema(data: DataDir, checks: list[Check]) -> int | None:
    """The database's schema version, or None when it cannot be read or is newer than this software's."""
    on_postgresql = data.store_url is not None
    latest = (pg_schema.migrations() if on_postgresql else db.migrations())[-1][0]
    try:
        current = db.read_sync(data.store, store.schema_version)
    except sqlite3.DatabaseError as exc:  # either engine's (record 76); never the URL, which may hold a password
        where = f"the database named in {data.store_url_path}" if on_postgresql else str(data.db_path)
        checks.append(Check("schema", "fail", f"cannot open {where}: {exc}"))
        return None
    if current > latest:
        checks.append(Check("schema", "fail", f"schema version {current} is newer than this software ({latest})"))
        return None
    if current < latest:
        checks.append(Check("schema", "warn", f"schema version {current}; {latest} will be applied at next start"))
    else:
        checks.append(Check("schema", "ok", f"schema version {current}"))
    return current


def _check_integrity(conn: sqlite3.Connection, checks: list[Check]) -> bool:
    problems = store.integrity_problems(conn)
    if problems == ["ok"]:
        checks.append(Check("integrity", "ok", "PRAGMA integrity_check: ok"))
        return True
    checks.append(Check("integrity", "fail", "; ".join(problems[:10])))
    return False


def _check_identity(conn: Conn, key_did: str | None, checks: list[Check]) -> None:
    node_id, epoch = store.meta_value(conn, "node_id"), store.meta_value(conn, "epoch")
    if node_id is None or epoch is None:
        checks.append(Check("identity", "fail", "node_meta lacks node_id or epoch"))
    elif key_did is not None and node_id != key_did:
        checks.append(Check("identity", "fail", f"database belongs to {node_id}, node.key is {key_did}"))
    else:
        checks.append(Check("identity", "ok", f"node {node_id}, store epoch {epoch}"))


def _check_key_fence(data_root: Path, conn: Conn, key_did: str | None, checks: list[Check]) -> None:
    """Whether the database holds a key the key fence lists as rotated out (node/store/key_fence.py): a restore
    from before a rotation of the node key or of a node-kept agent's key. The node signs nothing with such a key."""
    from node.agents import store as agent_store
    from node.federation import node_key
    from node.federation import store as sync_store
    from node.store.key_fence import KEY_FENCE_NAME, KeyFence

    fence = KeyFence(data_root / KEY_FENCE_NAME)
    fenced = fence.identities()
    if not fenced:
        return
    node_id = store.meta_value(conn, "node_id")
    found: list[str] = []
    for identity in sorted(fenced):  # what the node would sign with for each identity a rotation here touched
        if identity == node_id:
            held = node_key.parse_state(sync_store.node_keys_meta(conn))[0]
            key = held[-1].did if held else key_did
        else:
            seed = agent_store.key_seed(conn, identity)
            key = None if seed is None else keys.SigningKey.from_seed(seed).did
        refused = None if key is None else fence.refusal(identity, key)
        if refused is not None:
            found.append(refused)
    if found:
        checks.append(Check("key_fence", "fail", " | ".join(found)))
    else:
        checks.append(Check("key_fence", "ok", f"no rotated-out key in use ({len(fenced)} identities rotated here)"))


def _check_projections(conn: Any, checks: list[Check]) -> None:  # either engine's connection (db.transaction)
    with db.transaction(conn, immediate=True, commit=False):  # a trial rebuild: nothing of it is kept
        before = projections.snapshot(conn)
        count = projections.rebuild(conn)
        after = projections.snapshot(conn)
    differing = sorted(t for t in set(before) | set(after) if before.get(t) != after.get(t))
    if differing:
        checks.append(Check("projections", "fail", f"tables differ from a rebuild of the log: {', '.join(differing)}"))
    else:
        checks.append(Check("projections", "ok", f"match a rebuild from {count} records"))


def _check_redactions(conn: Conn, data_root: Path, checks: list[Check]) -> None:
    """Redacted and purged records (node/redaction/): how many tombstones, how many purges of how many authors,
    whether dropped bodies still wait for their scrub (their bytes may be on disk until then), and a warning when
    folders a restore left beside the data folder may hold them (any, once a body was dropped)."""
    tombstones = redaction_store.count(conn)
    purged, authors = redaction_store.purge_counts(conn)
    waiting, oldest = redaction_store.pending_scrubs(conn)
    detail = f"{tombstones} redacted (tombstones), {purged} purged by the operator ({authors} authors)"
    if waiting:
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((oldest or 0) / 1000))
        detail += f"; {waiting} dropped bodies wait for their scrub (redaction_grace_s; the oldest dropped {since})"
    left = leftovers(data_root) if redaction_store.last_drop_ms(conn) is not None else []
    if left:
        detail += (
            f"; {len(left)} folders a restore left beside the data folder may hold dropped bodies (copies of the"
            f" data folder from before): bbs restore-leftovers --data {data_root} --remove --all"
        )
        checks.append(Check("redactions", "warn", detail))
        return
    checks.append(Check("redactions", "ok", detail))


def _check_retention(conn: Conn, checks: list[Check]) -> None:
    """Each retention policy (node/retention/) as the node last ran it: the days it keeps (or off) and what it
    removed. A policy the node never ran shows as off."""
    ran = {row.policy: row for row in retention_store.policies(conn)}
    parts = []
    for policy in retention_store.POLICIES:
        row = ran.get(policy)
        if row is None or row.last_run_ms is None:
            parts.append(f"{policy}: off (never run)")
            continue
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(row.last_run_ms / 1000))
        setting = f"older than {row.days} days removed" if row.days else "off"
        parts.append(f"{policy}: {setting}, {row.removed} removed in all (last run {at})")
    checks.append(Check("retention", "ok", "; ".join(parts)))


def _check_void(conn: Conn, checks: list[Check]) -> None:
    """How many stored records a later key event made void (node/store/void.py): a warning when any, since a
    revocation or recovery voided records someone signed with the identity's key."""
    flagged = void.count(conn)
    if flagged:
        checks.append(
            Check(
                "void_records",
                "warn",
                f"{flagged} stored records were made void by a later key event (revoked or not vouched for);"
                " hidden from reads and peers, kept in the log: GET /v1/admin/void-records lists them",
            )
        )
    else:
        checks.append(Check("void_records", "ok", "no stored record was made void by a later key event"))


def _check_dropped_key_events(conn: Conn, checks: list[Check]) -> None:
    """How many allowed key events this node did not keep (docs/format-v3.md 3.4, decision 64): a warning when any,
    since competing key events signed by one identity's key mean someone else may hold that key."""
    events, identities = dropped_counts(conn)
    if events:
        checks.append(
            Check(
                "dropped_key_events",
                "warn",
                f"{events} key event{'s' * (events != 1)} of {identities} identit{'ies' if identities != 1 else 'y'}"
                " not kept (competing events beyond the chain"
                " and one runner-up per place: someone else may hold the identity's key); records by their keys"
                " are void",
            )
        )
    else:
        checks.append(Check("dropped_key_events", "ok", "no competing key event beyond one runner-up per place"))


def _peer_urls(conn: Conn) -> list[tuple[str, str | None]]:
    """(url, expected node id) of each peer, if this store has a peers table with a url column."""
    columns = store.table_columns(conn, "peers")
    url_col = next((c for c in ("url", "base_url", "endpoint") if c in columns), None)
    if url_col is None:
        return []
    id_col = next((c for c in ("node_id", "peer_id", "did", "key") if c in columns), None)
    return store.peer_urls(conn, url_col, id_col)


def _check_peers(peers: list[tuple[str, str | None]], checks: list[Check], timeout: float) -> None:
    for url, expected in peers:
        name = f"peer {url}"
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/v1/node", timeout=timeout) as resp:
                info = json.loads(resp.read())
                offset = clock_offset(resp.headers.get("Date"), time.time())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            checks.append(Check(name, "warn", f"unreachable: {exc}"))
            continue
        found = info.get("node_id") if isinstance(info, dict) else None
        advice = clock_advice(offset)
        if expected and found != expected:
            checks.append(Check(name, "warn", f"answers as {found}, expected {expected}"))
        elif advice is not None:
            checks.append(Check(name, "warn", f"reachable ({found}), but {advice}"))
        else:
            clock = "" if offset is None else f", clock offset {offset:+.1f} s"
            checks.append(Check(name, "ok", f"reachable ({found}{clock})"))


def exit_status(checks: list[Check]) -> int:
    """0 when nothing failed (warnings allowed), else 1."""
    return 1 if any(c.status == "fail" for c in checks) else 0
