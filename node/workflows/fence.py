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

Several processes on one PostgreSQL database (docs/decisions.md record 88). Each `bbs serve` has its own folder and
file, so the file's numbers are the NODE's: every grant, under the writer's advisory lock, counts the grants the
database holds (every process's) plus its own, and takes the database's latest expiry. A file then knows every grant
the node made up to this process's last one. What one process finds, every process obeys: the fence's node-wide part
lives in the database (migration 0055), written after whatever restore it answers, so that restore cannot undo it:

- a count hold: a process whose file shows a grant the database lacks (checked at every grant, not only at a
  start) records a hold every process's grant checks; it ends by the same rule as the file's (time, or the count);
- a history hold: every check reads the database's history identity (the cluster's system identifier, its WAL
  timeline, the store epoch: a promotion of a replica, a point-in-time recovery, another cluster, `bbs restore`
  change it); when it differs from the identity the database recorded at its last check, grants may have been made
  in the history the database left and lost with it, by any process. The node grants nothing until every process
  that holds a fence has checked its file against the database under the new identity (each finding a loss records
  a count hold), or the longest lease has passed;
- joining: a process without a file (a new one, or one whose folder was lost) knows nothing; it registers and
  grants once a process holding a fence has checked the database after it registered (a vouch, within the
  periodic check's seconds), or the longest lease has passed. Alone, it waits the day, as a single node does.

SQLite (one process) never writes the node-wide part: its behaviour is the single node's, above.
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
from node.ops import store as ops_store
from node.store.conn import POSTGRESQL, Conn, engine_of
from node.store.sealing import MAX_FUTURE_SKEW_MS
from node.workflows.store import fence as fence_store
from wire.workflows import LEASE_MAX_SECONDS

FENCE_NAME = "lease-fence.json"
META_KEY = "lease_fence_id"
IDENTITY_KEY = "lease_fence_identity"  # the database history the node's fence last checked it under (record 88)
# The longest any lease this node may have granted runs past the moment it was granted.
LONGEST_GRANT_MS = LEASE_MAX_SECONDS * 1000 + MAX_FUTURE_SKEW_MS

log = logging.getLogger("bbs.leases")


class LeaseAuthorityRestored(BBSError):
    status, code, title = 503, "lease_authority_restored", "Lease authority recovering from a restore"


@dataclass(frozen=True)
class FenceFile:
    """The fence file's content: whose store, which fence lineage and store epoch, the latest granted expiry, and
    how many grants expiring after `since_ms` this node made (None in a file from before the count). On PostgreSQL
    also this folder's process id in the node's fence, the database history it last checked under, and whether it
    knows what it counts (False: it joined without a fence and waits for a vouch)."""

    node_id: str
    fence_id: str
    epoch: str
    expires_ms: int
    since_ms: int | None = None
    grants: int | None = None
    process: str | None = None
    identity: str | None = None
    vouched: bool = True


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
            process=_optional_str(data.get("process")),
            identity=_optional_str(data.get("identity")),
            vouched=bool(data.get("vouched", True)),
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


def _optional_str(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"not a string: {value!r}")
    return value


def write_fence(path: Path, fence: FenceFile) -> None:
    """Replace the fence file atomically and durably: temp file, fsync, rename, fsync of the folder."""
    tmp = path.with_name(path.name + ".tmp")
    data = dict(fence.__dict__)
    for key in ("process", "identity"):  # a SQLite node's file stays as it was
        if data[key] is None:
            del data[key]
    if data["vouched"]:
        del data["vouched"]
    body = json.dumps(data, sort_keys=True).encode()
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

    Used only on the writer thread: every grant is a write job, so there is one fence writer per process. On
    PostgreSQL `node_txn` (run by `load_txn` and `settle_txn`) also checks and settles the node-wide part.
    """

    def __init__(self, path: Path, node_id: str) -> None:
        self.path = path
        self.node_id = node_id
        self.fence: FenceFile | None = None  # None until loaded
        self.hold_until_ms = 0  # no grant before this (after a detected restore)
        self.multi = False  # on PostgreSQL: one of the processes that may serve the node (record 88)
        self.node_hold_until_ms = 0  # no grant before this: the node-wide holds, as last read
        self.awaiting_vouch = False  # joined without a fence: waits for another process's check (or the day)

    @property
    def loaded(self) -> bool:
        return self.fence is not None

    def load_txn(self, conn: Conn, now_ms: int) -> None:
        """Compare the fence file with the database, decide whether grants must wait, and rewrite the file."""
        if self.fence is not None:
            return
        self.multi = engine_of(conn) == POSTGRESQL
        db_latest = fence_store.latest_grant_ms(conn, self.node_id)
        fence_id = ops_store.meta_value(conn, META_KEY)
        epoch = ops_store.meta_value(conn, "epoch") or ""
        found = read_fence(self.path)
        since_ms: int | None = now_ms  # a new baseline, unless the file's still holds
        carried: int | None = None  # the file's count, when its baseline still holds
        process, identity, vouched = None, None, True
        if found is not None and found.node_id == self.node_id and fence_id in (None, found.fence_id):
            fence_ms = max(found.expires_ms, db_latest)
            if found.expires_ms > now_ms:  # some grant the fence knows of may be live: keep its count
                if found.since_ms is not None and found.grants is not None:
                    since_ms, carried = found.since_ms, found.grants
                else:  # a file from before the count: every grant it knew of ends by its expiry
                    since_ms = found.expires_ms
                vouched = found.vouched
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
            process, identity = found.process, found.identity
        elif fence_id is None:  # a new node, or one from before the fence existed: the database is all there is
            fence_id = secrets.token_hex(16)
            fence_ms = db_latest
        else:  # the database had a fence and this folder holds none of it: every grant of the last day may be lost
            fence_ms = max(db_latest, now_ms + LONGEST_GRANT_MS)
            self.hold_until_ms = fence_ms
            since_ms = None  # nothing counted what was lost: only time ends this wait
            vouched = False  # on PostgreSQL another process's check ends it sooner (a vouch)
            log.warning(
                "lease fence: %s is missing or belongs to another store; no lease is granted for %d s%s",
                self.path,
                math.ceil((fence_ms - now_ms) / 1000),
                ", or until another process of the node vouches for its database" if self.multi else "",
            )
        count = None if since_ms is None else max(carried or 0, fence_store.grants_since(conn, self.node_id, since_ms))
        ops_store.set_meta_txn(conn, META_KEY, fence_id)
        if self.multi:
            process = process or secrets.token_hex(8)
            self.awaiting_vouch = not vouched
        else:
            vouched = True
        fence = FenceFile(self.node_id, fence_id, epoch, fence_ms, since_ms, count, process, identity, vouched)
        write_fence(self.path, fence)
        self.fence = fence
        if self.multi:
            self.node_txn(conn, now_ms)

    def _lost(self, conn: Conn, found: FenceFile, db_latest: int) -> bool:
        """Whether the database lacks a grant the fence file knows of: an earlier latest expiry, or fewer grants
        expiring after the baseline than the fence counted."""
        if db_latest < found.expires_ms:
            return True
        if found.since_ms is None or found.grants is None:
            return False
        return fence_store.grants_since(conn, self.node_id, found.since_ms) < found.grants

    def node_txn(self, conn: Conn, now_ms: int) -> None:
        """PostgreSQL: check this process's file against the database (a count hold when a grant is missing), notice
        a change of the database's history (a history hold), register, vouch for processes waiting to join or be
        vouched for, and settle the node's holds (`node_hold_until_ms`)."""
        fence = self.fence
        assert fence is not None and fence.process is not None, "load the fence first"
        identity = fence_store.history_identity(conn)
        recorded = ops_store.meta_value(conn, IDENTITY_KEY)
        if recorded is not None and recorded != identity:
            hold = fence_store.Hold(f"history:{identity}", now_ms + LONGEST_GRANT_MS, None, None, identity)
            fence_store.hold_txn(conn, hold, now_ms)
            fence_store.end_earlier_history_holds_txn(conn, hold.hold_id)
            fence_store.uncheck_all_txn(conn)
            log.warning(
                "lease fence: this database's history changed since the node's last check (%s, now %s: a promotion,"
                " a point-in-time recovery, another cluster or a restore); no lease is granted until every process"
                " of the node has checked its fence against it, or for %d s",
                recorded,
                identity,
                LONGEST_GRANT_MS // 1000,
            )
        if recorded != identity:
            ops_store.set_meta_txn(conn, IDENTITY_KEY, identity)
        row = fence_store.process_row(conn, fence.process)
        if self.awaiting_vouch:
            if row is not None and row.vouched:  # a process holding a fence checked this database after we registered
                self._join(conn, now_ms, identity)
            elif row is None:
                fence_store.register_txn(conn, fence.process, False, None, now_ms)
            else:
                _check_in(conn, fence.process, row, now_ms)
        else:
            latest = fence_store.latest_grant_ms(conn, self.node_id)
            if self.hold_until_ms == 0 and fence.expires_ms > now_ms and self._lost(conn, fence, latest):
                self.hold_until_ms = fence.expires_ms  # a restore while this process runs
                log.warning("lease fence: this database lacks a grant the node made: it was restored")
            if self.hold_until_ms > now_ms:  # every process waits for what this one knows was lost
                hold = fence_store.Hold(
                    f"count:{fence.process}", self.hold_until_ms, fence.since_ms, fence.grants, None
                )
                fence_store.hold_txn(conn, hold, now_ms)
            if row is None or (row.vouched, row.identity) != (True, identity):
                fence_store.register_txn(conn, fence.process, True, identity, now_ms)
            else:  # nothing changed: the periodic check writes nothing but, once a minute, that it ran
                _check_in(conn, fence.process, row, now_ms)
            fence_store.vouch_txn(conn)
            if fence.identity != identity:
                self.fence = replace(fence, identity=identity)
                write_fence(self.path, self.fence)
        until = 0
        for held in fence_store.holds(conn):
            if self._settled(conn, held, now_ms):
                fence_store.end_hold_txn(conn, held.hold_id)
            else:
                until = max(until, held.until_ms)
        self.node_hold_until_ms = until

    def _join(self, conn: Conn, now_ms: int, identity: str) -> None:
        """Vouched for: the database holds every grant that may be live, as far as the node's fences know. Count
        from here, as a new fence does."""
        fence = self.fence
        assert fence is not None and fence.process is not None
        self.awaiting_vouch = False
        self.hold_until_ms = 0
        self.fence = replace(
            fence,
            expires_ms=fence_store.latest_grant_ms(conn, self.node_id),
            since_ms=now_ms,
            grants=fence_store.grants_since(conn, self.node_id, now_ms),
            identity=identity,
            vouched=True,
        )
        write_fence(self.path, self.fence)
        fence_store.register_txn(conn, fence.process, True, identity, now_ms)
        log.warning("lease fence: another process of the node vouched for this database: granting leases")

    def _settled(self, conn: Conn, held: fence_store.Hold, now_ms: int) -> bool:
        """Whether a node-wide hold has ended: its time passed, the database holds every grant it counted, or every
        vouched process has checked in under its identity."""
        if now_ms >= held.until_ms:
            return True
        if held.since_ms is not None and held.grants is not None and now_ms >= held.since_ms:
            return fence_store.grants_since(conn, self.node_id, held.since_ms) >= held.grants
        if held.identity is not None:
            return not fence_store.unchecked(conn, held.identity)
        return False

    def settle_txn(self, conn: Conn, now_ms: int) -> None:
        """While a detected restore holds grants back: end the wait once the database holds every grant the fence
        counted (sync brought them back), or, once the wait has run out, take a new baseline for the count. On
        PostgreSQL, then the node-wide part (`node_txn`)."""
        self._settle_own(conn, now_ms)
        if self.multi and self.fence is not None:
            self.node_txn(conn, now_ms)

    def _settle_own(self, conn: Conn, now_ms: int) -> None:
        fence = self.fence
        if fence is None or self.hold_until_ms == 0:
            return
        if now_ms >= self.hold_until_ms:  # every grant the fence knew of has ended: count afresh from now
            self.hold_until_ms = 0
            self.awaiting_vouch = False
            grants = fence_store.grants_since(conn, self.node_id, now_ms)
            self.fence = replace(fence, since_ms=now_ms, grants=grants, vouched=True)
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
        until = max(self.hold_until_ms, self.node_hold_until_ms)
        if now_ms < until:
            wait = math.ceil((until - now_ms) / 1000)
            raise LeaseAuthorityRestored(
                f"this node's database was restored and may have lost a lease it granted; it grants no lease"
                f" for {wait} s more, until every lease it could have granted before has ended",
                field="task_id",
                headers={"Retry-After": str(wait)},
            )

    def advance(self, expires_ms: int, conn: Conn | None = None) -> None:
        """Record a grant (its expiry, and one more in the count) durably, before it is committed and acknowledged.
        With `conn` (PostgreSQL, in the grant's transaction under the writer's lock): the node's count and latest
        expiry, every process's grants included."""
        fence = self.fence
        assert fence is not None, "load the fence first"
        counted = fence.since_ms is not None and fence.grants is not None and expires_ms > fence.since_ms
        grants = fence.grants
        latest = max(fence.expires_ms, expires_ms)
        if conn is not None and self.multi:
            latest = max(latest, fence_store.latest_grant_ms(conn, self.node_id))
            if counted and fence.since_ms is not None:
                grants = max(grants or 0, fence_store.grants_since(conn, self.node_id, fence.since_ms)) + 1
        elif counted and grants is not None:
            grants += 1
        if latest == fence.expires_ms and grants == fence.grants:
            return
        self.fence = replace(fence, expires_ms=latest, grants=grants)
        write_fence(self.path, self.fence)


def _check_in(conn: Conn, process: str, row: fence_store.ProcessRow, now_ms: int) -> None:
    """Record this process's check-in when the last one recorded is `CHECK_IN_EVERY_MS` old, or later than this
    process's clock (stepped back, or another machine's: waiting for it to catch up would show a live process as
    silent) (`bbs processes`)."""
    if not 0 <= now_ms - row.checked_in_ms < fence_store.CHECK_IN_EVERY_MS:
        fence_store.checked_in_txn(conn, process, now_ms)
