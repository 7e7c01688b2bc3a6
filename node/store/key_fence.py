"""The key fence: which signing keys this node has rotated out, kept outside its database so a restore cannot
bring one back into use (issue 36, "Restore"; docs/operations.md, "Keys after a restore").

A small file in the data folder (`key-fence.json`, mode 600, never in a backup: node/ops/backup.py copies only the
database and node.key, and `bbs restore --force` carries the replaced folder's file into the restored one, as it
carries the lease fence) holds, for every identity whose key this node rotated (the node's own, node-kept agents'),
the key rotated out, the key the rotation installed, its key event and the store epoch. It is written, fsynced and
renamed into place inside the write job that stores the rotation, after the job's last statement and before it
commits, so the file is never behind a committed rotation. Once the commit is known the entry is marked so
(`committed`). A commit that fails takes its entry out, once the database is found to lack its event
(`node.agents.key_events.put_back_unless_committed`). A process that died before the commit leaves an unmarked
entry of this very store epoch whose event the database lacks, which `settle` forgets a minute on (at a start, or
every 30 s while serving); a marked one whose event the database lacks is a database put back from before the
rotation, and stays, whether the put-back kept the store epoch (a file copied back, a dump restored by hand) or
renewed it (`bbs restore`).

A database restored from a backup taken before a rotation holds a key the fence lists as rotated out: the node
then signs nothing with it (`refusal`): a node-kept agent's writes are refused 409 `signing_key_rotated_out`, and
the node key's signing (sync requests, forwarded leases, node-signed records) stops with `node_key_rotated_out`;
`bbs doctor` says what to do (restore a backup taken after the rotation). The file holds no secret.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from identity.key_files import fsync_path
from node.errors import StorageFull, Unavailable

KEY_FENCE_NAME = "key-fence.json"
# A rotation whose event is missing is forgotten only this long after its entry was written: another process (a
# `bbs` command opening the folder a node serves) must not forget a rotation that is committing right now.
SETTLE_AFTER_MS = 60_000

log = logging.getLogger("bbs.node")


class FenceNotDurable(Unavailable):
    """The fence file was replaced by the change, but its folder could not be synced: the change is what the file
    and this process hold, and it may not survive a crash."""

    status, code, title = 503, "key_fence_unwritable", "Service unavailable"


@dataclass
class KeyFence:
    """The key fence of one data folder (see the module's docstring), read once and kept in memory: one entry per
    rotation made here, {"identity", "retired", "key", "event", "epoch"} (the store epoch it was made in)."""

    path: Path | None  # None: no folder (a node without a key fence refuses nothing)
    _rotations: list[dict[str, str]] = field(default_factory=list)
    _loaded: bool = False
    # changes come from the writer thread (a rotation, `learn`), threads of the default pool (`committed`,
    # `put_back`) and a reader thread (`settle`); reentrant, as the first `rotations()` loads the file under it
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    def rotations(self) -> list[dict[str, str]]:
        """Every rotation recorded here, oldest first."""
        if not self._loaded:
            with self._lock:
                if not self._loaded:
                    self._rotations, self._loaded = self._read(), True
        return self._rotations

    def unsettled(self) -> bool:
        """Whether an entry is not known committed yet (`settle` has something to look at)."""
        return any(r["committed"] != "1" for r in self.rotations())

    def identities(self) -> set[str]:
        """The identities a rotation here took a key from."""
        return {r["identity"] for r in self.rotations()}

    def _read(self, *, strict: bool = False) -> list[dict[str, str]]:
        """The file's entries ([] when there is none). An unreadable file reads as empty, loudly, when the fence is
        loaded; `strict` (a change about to write the file) refuses it instead, 503 `key_fence_unwritable`: a write
        built on it would replace every rotation it lists."""
        if self.path is None:
            return []
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            found = data["rotations"]
            if not isinstance(found, list):
                raise TypeError("rotations is not a list")
            return [
                {k: str(r[k]) for k in ("identity", "retired", "key", "event", "epoch", "at_ms")}
                | {"committed": str(r.get("committed", "0"))}  # a file from before the mark: not known committed
                for r in found
            ]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if strict:
                raise Unavailable(
                    f"the key fence {self.path} cannot be read ({exc}): nothing was written; put back a readable copy"
                    " (it lists the keys rotated out here) or move it away, then try again",
                    code="key_fence_unwritable",
                ) from exc
            # unreadable: treated as empty, loudly; it never widens what may sign beyond the database's own keys
            log.warning("key fence %s is unreadable (%s): no rotated-out key is known", self.path, exc)
            return []

    def refusal(self, identity: str, key: str) -> str | None:
        """Why this node may not sign for `identity` with `key` (a key a rotation here took out), or None."""
        for rotation in self.rotations():
            if rotation["identity"] == identity and rotation["retired"] == key:
                if rotation["committed"] != "1":  # the commit was never known: cut off, or a database from before
                    return (
                        f"key {key} of {identity} was being rotated out on this node by key event"
                        f" {rotation['event']} (installing {rotation['key']}) when its write failed or its process"
                        " stopped, and this database does not hold that event. If the rotation never committed and"
                        f" the store epoch is still {rotation['epoch']}, the node forgets it"
                        f" {SETTLE_AFTER_MS // 1000} s after it was made; under another epoch (the database was put"
                        " back from before it, or a failover or point-in-time recovery renewed the epoch) the node"
                        " keeps refusing: restore one taken after it; run bbs doctor"
                    )
                return (
                    f"key {key} of {identity} was rotated out on this node by key event {rotation['event']} (it"
                    f" installed {rotation['key']}), and this database holds no newer key: it was restored from a"
                    " backup taken before the rotation. Restore a backup taken after it (or the replaced folder's"
                    " bbs.db); run bbs doctor"
                )
        return None

    def record(self, identity: str, retired: str, key: str, event: str, epoch: str, now_ms: int) -> dict[str, str]:
        """Write that a rotation of `identity` in store `epoch` took `retired` out and installed `key` by `event`
        (at `now_ms`); returns the entry written (for `put_back` when the rotation's commit fails)."""
        entry = {"identity": identity, "retired": retired, "key": key, "event": event, "epoch": epoch}
        entry |= {"at_ms": str(now_ms), "committed": "0"}  # `committed` marks it once the commit is known
        self._change(lambda rotations: [*rotations, entry])
        return entry

    def learn(self, found: Iterable[tuple[str, str, str, str]], epoch: str, now_ms: int) -> list[dict[str, str]]:
        """Record each rotation in `found`, (identity, retired key, installed key, key event), that this fence does
        not list yet: rotations of keys this node keeps that the database holds but another process of the node made
        (record 92). They are read from committed events, so they are marked committed, and so is an entry listed
        unmarked for the same event. Written once, with store `epoch` and `now_ms`; returns what was added.

        Listed means the same event, not merely the same key: an unmarked entry of a rotation that never committed
        may name the key another rotation took out since, and `settle` forgets the former."""
        found = list(found)
        events = {(identity, event) for identity, _, _, event in found}
        added: dict[tuple[str, str], dict[str, str]] = {}

        def change(rotations: list[dict[str, str]]) -> list[dict[str, str]]:
            listed = {(r["identity"], r["event"]) for r in rotations}
            added.clear()
            for identity, retired, key, event in found:
                if (identity, event) not in listed:
                    entry = {"identity": identity, "retired": retired, "key": key, "event": event, "epoch": epoch}
                    added.setdefault((identity, event), {**entry, "at_ms": str(now_ms), "committed": "1"})
            marked = [{**r, "committed": "1"} if (r["identity"], r["event"]) in events else r for r in rotations]
            return [*marked, *added.values()]

        listed = {(r["identity"], r["event"], r["committed"]) for r in self.rotations()}
        if all((identity, event, "1") in listed for identity, event in events):
            return []  # all of it listed and marked already: no lock, no write (the common case)
        self._change(change)
        if added:
            log.info("key fence: %d rotation(s) made through another process of the node recorded", len(added))
        return list(added.values())

    def put_back(self, entry: dict[str, str]) -> None:
        """Take out the entry `record` wrote (the rotation it recorded did not commit); what was written since stays."""
        self._change(lambda rotations: [r for r in rotations if r != entry])

    def committed(self, entry: dict[str, str]) -> None:
        """Mark the entry `record` wrote as committed: its rotation's write job committed. `settle` never forgets
        such an entry, so a database put back from before the rotation that kept the store epoch (a copy of the file
        or a dump restored by hand, a point-in-time recovery) still signs nothing with the retired key. A mark that
        cannot be written is left to `settle` (it marks an entry whose event the database holds). An entry no longer
        listed (forgotten by a `settle` while its write job waited past SETTLE_AFTER_MS) is written again, marked: a
        rotation known committed is always safe to fence."""

        def mark(rotations: list[dict[str, str]]) -> list[dict[str, str]]:
            if entry not in rotations:
                log.warning("key fence: rotation %s committed after its entry was forgotten; listed again", entry)
                return [*rotations, {**entry, "committed": "1"}]
            return [{**r, "committed": "1"} if r == entry else r for r in rotations]

        try:
            self._change(mark)
        except FenceNotDurable as exc:
            log.warning("key fence: rotation %s marked committed, but %s", entry["event"], exc)
        except (Unavailable, StorageFull) as exc:
            log.warning("key fence: rotation %s committed but not marked so (%s)", entry["event"], exc)

    def settle(self, epoch: str, held: Callable[[str, str], bool], now_ms: int) -> list[dict[str, str]]:
        """At a start, and every 30 s while serving (`NodeKeys.settle_txn`): mark committed the rotations whose key
        event the database holds (`held(identity, event)`), and forget those of store `epoch` (this database, not a
        restore: a restore gets a new epoch) written more than SETTLE_AFTER_MS before `now_ms`, never marked
        committed and whose event the database does not hold: the process died between writing the fence and the
        commit, so the rotation never happened. An entry marked committed whose event the database lacks is a
        database put back from before the rotation, and stays. A file that cannot be read or written leaves
        everything as it was (logged); one written whose folder could not be synced is logged and counts as
        written. Returns what was forgotten."""
        stale: list[dict[str, str]] = []

        def change(rotations: list[dict[str, str]]) -> list[dict[str, str]]:
            # only the entries asked about below and still unmarked: one written since waits for the next settle
            unmarked = [r for r in rotations if r["committed"] != "1"]
            found = [r for r in unmarked if answers.get(_unmarked(r)) is True]
            limit = now_ms - SETTLE_AFTER_MS
            stale[:] = [
                r
                for r in unmarked
                if answers.get(_unmarked(r)) is False and r["epoch"] == epoch and int(r["at_ms"]) < limit
            ]
            return [{**r, "committed": "1"} if r in found else r for r in rotations if r not in stale]

        if not self.unsettled():
            return []  # every entry marked (or none): nothing to read or write
        try:
            # The database is asked before the flock is taken: on PostgreSQL a read may queue behind a lock that a
            # restore emptying the database asks for, itself queued behind a write transaction of this node that
            # waits for the flock (a rotation's `record`, a `learn`).
            asked = {_unmarked(r) for r in self._read(strict=True) if r["committed"] != "1"}
            answers = {key: held(key[0], key[1]) for key in asked}
            self._change(change)
        except FenceNotDurable as exc:  # written: what was forgotten is forgotten
            log.warning("key fence: settled, but %s", exc)
        except (Unavailable, StorageFull) as exc:  # a start goes on: what is listed stays listed, refusing
            log.warning("key fence: cannot settle it now (%s)", exc)
            return []
        if stale:
            log.warning("key fence: %d rotation(s) that never committed forgotten: %s", len(stale), stale)
        return list(stale)

    def _change(self, change: Callable[[list[dict[str, str]]], list[dict[str, str]]]) -> None:
        """Apply `change` to the fence as its file holds it now, and write the result: under this process's lock
        and an exclusive `flock` of `key-fence.json.lock`, so another process writing the same folder's file (a
        `bbs` command opening a folder a node serves) cannot lose what this one wrote, nor this one what it wrote.
        The file first, atomically and durably (temp file, fsync, rename, fsync of the folder), then what this
        process holds in memory, so a write that fails changes neither: 507 on a full disk, else 503
        `key_fence_unwritable` (the write job that asked fails whole). Once the rename is done both hold the change,
        and a folder that cannot be synced then raises `FenceNotDurable` (503 too)."""
        with self._lock:
            if self.path is None:
                self._rotations, self._loaded = change(self.rotations()), True
                return
            replaced = False
            try:
                lock_fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(lock_fd, fcntl.LOCK_EX)
                    now = self._read(strict=True)
                    new = change(now)
                    if new != now:
                        _replace_file(self.path, new)
                        replaced = True
                        fsync_path(self.path.parent)
                finally:
                    os.close(lock_fd)  # lets the flock go
            except OSError as exc:
                if replaced:  # the file holds the change; only its rename may not survive a crash
                    self._rotations, self._loaded = new, True
                    raise FenceNotDurable(
                        f"the key fence {self.path} was replaced but its folder could not be synced"
                        f" ({exc.strerror or exc}): the change may not survive a crash"
                    ) from exc
                detail = f"the key fence {self.path} cannot be written ({exc.strerror or exc}); nothing was written"
                if exc.errno == errno.ENOSPC:
                    raise StorageFull(detail) from exc
                raise Unavailable(detail, code="key_fence_unwritable") from exc
            self._rotations, self._loaded = new, True


def _unmarked(rotation: dict[str, str]) -> tuple[str, str, str]:
    """What `settle` asks the database about an entry by: its identity and key event, and its time (an entry of the
    same event written again since is another entry)."""
    return rotation["identity"], rotation["event"], rotation["at_ms"]


def _replace_file(path: Path, rotations: list[dict[str, str]]) -> None:
    # one temporary name: every write of the file is under its flock, and one a crash left is written over
    tmp = path.with_name(path.name + ".tmp")
    body = json.dumps({"rotations": rotations}, sort_keys=True, indent=1).encode()
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
