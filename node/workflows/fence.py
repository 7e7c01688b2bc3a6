"""The lease fence: what a home node has granted, kept outside its database so a restore cannot make it forget.

A small file in the data folder (`lease-fence.json`, never in a backup: node/ops/backup.py copies only the
database and the key) holds the latest lease expiry this node has granted as a home node, and how many grants
it has made that expire after a baseline moment (`since_ms`, `grants`). It is written, fsynced and renamed into
place inside the write job that appends the grant, before that job commits, so the file is never behind an
acknowledged grant.

On its first grant after a start, the node compares the file with its database. A database whose latest grant
by this node ends before the fence, or that holds fewer of its grants expiring after `since_ms` than the fence
counted, has lost grants (a `bbs restore`, a hand-run `litestream restore`, an old file copied back): the node
then grants no lease at all until the fence has passed, because any grant it lost ends by then, or until its
database holds every grant the fence counted again (sync brought them back from peers: then it knows every
grant that can still be live, `settle_txn`). A database that says it once had a fence (`node_meta.lease_fence_id`)
next to no fence file (a restore into a new folder, a deleted file) has lost the fence too: the node waits the
longest lease any grant could have had (86,400 s plus the 5 minutes a task event may be dated ahead), counted
from now.

Why counting is sound: every grant this node makes from the baseline on expires after `since_ms` and is counted
before it commits, and at the baseline every earlier grant that expires after `since_ms` was in the database
(a new fence is made from the database; a later baseline is taken only when every grant the fence knew of has
ended). So the grants expiring after `since_ms` are at most `grants` in number, and a database holding that
many holds all of them; any other grant has ended by `since_ms` (a file from before the count takes its own
expiry as the baseline, which may lie ahead: an early end waits for it).
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
from dataclasses import dataclass, replace
from pathlib import Path

from node.errors import BBSError
from node.store.conn import Conn
from node.store.sealing import MAX_FUTURE_SKEW_MS
from node.workflows.store import fence as fence_store
from wire.workflows import LEASE_MAX_SECONDS

FENCE_NAME = "lease-fence.json"
META_KEY = "lease_fence_id"
# The longest any lease this node may have granted runs past the moment it was granted.
LONGEST_GRANT_MS = LEASE_MAX_SECONDS * 1000 + MAX_FUTURE_SKEW_MS

log = logging.getLogger("bbs.leases")


class LeaseAuthorityRestored(BBSError):
    status, code, title = 503, "lease_authority_restored", "Lease authority recovering from a restore"


@dataclass(frozen=True)
class FenceFile:
    """The fence file's content: whose store, which fence lineage and store epoch, the latest granted expiry, and
    how many grants expiring after `since_ms` this node made (None in a file from before the count)."""

    node_id: str
    fence_id: str
    epoch: str
    expires_ms: int
    since_ms: int | None = None
    grants: int | None = None


def read_fence(path: Path) -> FenceFile | None:
    """The fence file at `path`, or None when it is missing or unreadable (both mean: the fence is unknown)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        fence = FenceFile(
            node_id=str(data["node_id"]),
            fence_id=str(data["fence_id"]),
            epoch=str(data["epoch"]),
            expires_ms=int(data["expires_ms"]),
            since_ms=_optional_int(data.get("since_ms")),
            grants=_optional_int(data.get("grants")),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("lease fence %s is unreadable (%s): treated as lost", path, exc)
        return None
    return fence


def _optional_int(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"not an integer: {value!r}")
    return value


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


class LeaseFence:
    """The fence of one node's data folder. `load_txn` once (in a write job), then `check` and `advance` in every grant.

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

    def load_txn(self, conn: Conn, now_ms: int) -> None:
        """Compare the fence file with the database, decide whether grants must wait, and rewrite the file."""
        if self.fence is not None:
            return
        db_latest = fence_store.latest_grant_ms(conn, self.node_id)
        fence_id = fence_store.meta(conn, META_KEY)
        epoch = fence_store.meta(conn, "epoch") or ""
        found = read_fence(self.path)
        since_ms: int | None = now_ms  # a new baseline, unless the file's still holds
        carried: int | None = None  # the file's count, when its baseline still holds
        if found is not None and found.node_id == self.node_id and fence_id in (None, found.fence_id):
            fence_ms = max(found.expires_ms, db_latest)
            if found.expires_ms > now_ms:  # some grant the fence knows of may be live: keep its count
                if found.since_ms is not None and found.grants is not None:
                    since_ms, carried = found.since_ms, found.grants
                else:  # a file from before the count: every grant it knew of ends by its expiry
                    since_ms = found.expires_ms
                if self._lost(conn, found, db_latest):
                    self.hold_until_ms = found.expires_ms
                    log.warning(
                        "lease fence: this database lacks a grant this node made (store epoch %s, fence epoch %s):"
                        " it was restored or replaced; no lease is granted for %d s, or until sync brings back"
                        " every grant",
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
            since_ms = None  # nothing counted what was lost: only time ends this wait
            log.warning(
                "lease fence: %s is missing or belongs to another store; no lease is granted for %d s",
                self.path,
                math.ceil((fence_ms - now_ms) / 1000),
            )
        count = None if since_ms is None else max(carried or 0, fence_store.grants_since(conn, self.node_id, since_ms))
        fence_store.set_meta_txn(conn, META_KEY, fence_id)
        fence = FenceFile(self.node_id, fence_id, epoch, fence_ms, since_ms, count)
        write_fence(self.path, fence)
        self.fence = fence

    def _lost(self, conn: Conn, found: FenceFile, db_latest: int) -> bool:
        """Whether the database lacks a grant the fence file knows of: an earlier latest expiry, or fewer grants
        expiring after the baseline than the fence counted."""
        if db_latest < found.expires_ms:
            return True
        if found.since_ms is None or found.grants is None:
            return False
        return fence_store.grants_since(conn, self.node_id, found.since_ms) < found.grants

    def settle_txn(self, conn: Conn, now_ms: int) -> None:
        """While a detected restore holds grants back: end the wait once the database holds every grant the fence
        counted (sync brought them back), or, once the wait has run out, take a new baseline for the count."""
        fence = self.fence
        if fence is None or self.hold_until_ms == 0:
            return
        if now_ms >= self.hold_until_ms:  # every grant the fence knew of has ended: count afresh from now
            self.hold_until_ms = 0
            self.fence = replace(fence, since_ms=now_ms, grants=fence_store.grants_since(conn, self.node_id, now_ms))
            write_fence(self.path, self.fence)
            return
        if fence.since_ms is None or fence.grants is None or now_ms < fence.since_ms:
            return  # nothing counted the lost grants, or some not counted may still be live
        if fence_store.grants_since(conn, self.node_id, fence.since_ms) >= fence.grants:
            self.hold_until_ms = 0
            log.warning(
                "lease fence: this database holds every grant this node made that may still be live again"
                " (sync brought them back): granting leases again"
            )

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
        """Record a grant (its expiry, and one more in the count) durably, before it is committed and acknowledged."""
        fence = self.fence
        assert fence is not None, "load the fence first"
        counted = fence.since_ms is not None and fence.grants is not None and expires_ms > fence.since_ms
        if expires_ms <= fence.expires_ms and not counted:
            return
        grants = fence.grants + 1 if counted and fence.grants is not None else fence.grants
        self.fence = replace(fence, expires_ms=max(fence.expires_ms, expires_ms), grants=grants)
        write_fence(self.path, self.fence)
