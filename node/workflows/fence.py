"""The lease fence: what a home node has granted, kept outside its database so a restore cannot make it forget.

A small file in the data folder (`lease-fence.json`, never in a backup: node/backup.py copies only the
database and the key) holds the latest lease expiry this node has granted as a home node. It is written, fsynced
and renamed into place inside the write job that appends the grant, before that job commits, so the file is
never behind an acknowledged grant.

On its first grant after a start, the node compares the file with its database. A database whose latest grant
by this node ends before the fence has lost grants (a `bbs restore`, a hand-run `litestream restore`, an old
file copied back): the node then grants no lease at all until the fence has passed, because any grant it lost
ends by then. A database that says it once had a fence (`node_meta.lease_fence_id`) next to no fence file (a
restore into a new folder, a deleted file) has lost the fence too: the node waits the longest lease any grant
could have had (86,400 s plus the 5 minutes a task event may be dated ahead), counted from now.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from node.errors import BBSError
from node.sealing import MAX_FUTURE_SKEW_MS
from node.wire.workflows import LEASE_MAX_SECONDS

FENCE_NAME = "lease-fence.json"
META_KEY = "lease_fence_id"
# The longest any lease this node may have granted runs past the moment it was granted.
LONGEST_GRANT_MS = LEASE_MAX_SECONDS * 1000 + MAX_FUTURE_SKEW_MS

log = logging.getLogger("bbs.leases")


class LeaseAuthorityRestored(BBSError):
    status, code, title = 503, "lease_authority_restored", "Lease authority recovering from a restore"


@dataclass(frozen=True)
class FenceFile:
    """The fence file's content: whose store, which fence lineage and store epoch, the latest granted expiry."""

    node_id: str
    fence_id: str
    epoch: str
    expires_ms: int


def read_fence(path: Path) -> FenceFile | None:
    """The fence file at `path`, or None when it is missing or unreadable (both mean: the fence is unknown)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        fence = FenceFile(
            node_id=str(data["node_id"]),
            fence_id=str(data["fence_id"]),
            epoch=str(data["epoch"]),
            expires_ms=int(data["expires_ms"]),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("lease fence %s is unreadable (%s): treated as lost", path, exc)
        return None
    return fence


def write_fence(path: Path, fence: FenceFile) -> None:
    """Replace the fence file atomically and durably: temp file, fsync, rename, fsync of the folder."""
    tmp = path.with_name(path.name + ".tmp")
    body = json.dumps(fence.__dict__, sort_keys=True).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _meta(conn: sqlite3.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM node_meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def latest_grant_ms(conn: sqlite3.Connection, node_id: str) -> int:
    """The latest expiry of any lease grant by `node_id` that this database holds (0 when none)."""
    row = conn.execute(
        "SELECT max(expires_ms) FROM task_events WHERE author_id = ? AND event = 'lease'", (node_id,)
    ).fetchone()
    return int(row[0] or 0)


class LeaseFence:
    """The fence of one node's data folder. `load` once (in a write job), then `check` and `advance` in every grant.

    Used only on the writer thread: every grant is a write job, so there is one fence writer per process.
    """

    def __init__(self, path: Path, node_id: str) -> None:
        self.path = path
        self.node_id = node_id
        self.fence: FenceFile | None = None  # None until loaded
        self.hold_until_ms = 0  # no grant before this (after a detected restore)

    @property
    def loaded(self) -> bool:
        return self.fence is not None

    def load(self, conn: sqlite3.Connection, now_ms: int) -> None:
        """Compare the fence file with the database, decide whether grants must wait, and rewrite the file."""
        if self.fence is not None:
            return
        db_latest = latest_grant_ms(conn, self.node_id)
        fence_id = _meta(conn, META_KEY)
        epoch = _meta(conn, "epoch") or ""
        found = read_fence(self.path)
        if found is not None and found.node_id == self.node_id and fence_id in (None, found.fence_id):
            fence_ms = max(found.expires_ms, db_latest)
            if db_latest < found.expires_ms and found.expires_ms > now_ms:
                self.hold_until_ms = found.expires_ms
                log.warning(
                    "lease fence: this database's latest grant ends before one this node granted (store epoch %s,"
                    " fence epoch %s): it was restored or replaced; no lease is granted for %d s",
                    epoch,
                    found.epoch,
                    math.ceil((found.expires_ms - now_ms) / 1000),
                )
            fence_id = found.fence_id
        elif fence_id is None:  # a new node, or one from before the fence existed: the database is all there is
            fence_id = secrets.token_hex(16)
            fence_ms = db_latest
        else:  # the database had a fence and this folder holds none of it: every grant of the last day may be lost
            fence_ms = max(db_latest, now_ms + LONGEST_GRANT_MS)
            self.hold_until_ms = fence_ms
            log.warning(
                "lease fence: %s is missing or belongs to another store; no lease is granted for %d s",
                self.path,
                math.ceil((fence_ms - now_ms) / 1000),
            )
        conn.execute(
            "INSERT INTO node_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (META_KEY, fence_id),
        )
        fence = FenceFile(node_id=self.node_id, fence_id=fence_id, epoch=epoch, expires_ms=fence_ms)
        write_fence(self.path, fence)
        self.fence = fence

    def check(self, now_ms: int) -> None:
        """503 `lease_authority_restored` (with Retry-After) while a detected restore may hide a live grant."""
        if now_ms < self.hold_until_ms:
            wait = math.ceil((self.hold_until_ms - now_ms) / 1000)
            raise LeaseAuthorityRestored(
                f"this node's database was restored and may have lost a lease it granted; it grants no lease"
                f" for {wait} s more, until every lease it could have granted before has ended",
                field="task_id",
                headers={"Retry-After": str(wait)},
            )

    def advance(self, expires_ms: int) -> None:
        """Record a grant's expiry in the fence (durably) before the grant is committed and acknowledged."""
        assert self.fence is not None, "load the fence first"
        if expires_ms <= self.fence.expires_ms:
            return
        fence = FenceFile(self.fence.node_id, self.fence.fence_id, self.fence.epoch, expires_ms)
        write_fence(self.path, fence)
        self.fence = fence
