"""What an operator of a node on PostgreSQL asks of its processes and restores, as commands rather than SQL typed by
hand (docs/operations.md, "Leases across processes, restores and failover"; docs/decisions.md records 88 and 94):

- `bbs processes`: the processes the node's lease fence registered, whether each has checked its fence against the
  database's current history, and the holds on grants;
- `bbs processes --forget ID`: a process retired for good (its folder gone), so that no hold waits for it again;
- `bbs restore --by-hand`: a database brought back in a way the server cannot tell apart (a `pg_restore` into the
  same cluster, a filesystem snapshot), marked so that the next start of any process renews the store epoch and
  the lease fence holds grants until every process has checked in.

Each connects to the database the folder names and works while the node serves: a mark made then is a change of
history like a failover, which serving processes follow within seconds.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from node.ops import store as ops_store
from node.ops.datadir import CommandError, DataDir, require_node
from node.store.db import connect_store, transaction
from node.workflows.fence import FENCE_NAME, IDENTITY_KEY, read_fence
from node.workflows.store import fence as fence_store

RESTORED = "restored"  # the mark: a history no database is in, so the next look finds it moved
# A serving process checks every 5 s and records a check-in once the last recorded is CHECK_IN_EVERY_MS (a minute)
# old, so about once a minute: one not heard from in three minutes has stopped (retired, stopped, its folder gone, or
# it cannot reach the database).
SILENT_AFTER_MS = 3 * fence_store.CHECK_IN_EVERY_MS


@dataclass(frozen=True)
class Process:
    """One process registered in the node's lease fence."""

    process: str
    vouched: bool  # holds a fence it checked (False: joined without one, waits for another process's vouch)
    checked: bool  # has checked its fence against the database's current history
    registered_ms: int
    checked_in_ms: int  # when it last checked its fence against the database (recorded about once a minute)
    silent: bool  # not checked in for SILENT_AFTER_MS: stopped, or retired (then forget it)
    this_folder: bool  # the process of the data folder the command was given


@dataclass(frozen=True)
class Processes:
    """The node's registered processes, the holds on its grants, and whether the database's history changed since
    the fence's last check (a failover, or a restore marked by hand): then no process has checked in under it yet."""

    processes: list[Process]
    holds: list[fence_store.Hold]
    history_changed: bool


def _url(data: Path) -> str:
    require_node(data)
    url = DataDir(data).store_url
    if url is None:
        raise CommandError(
            f"{data} keeps its node on SQLite: one process serves it, and a copy brought back by hand cannot be told"
            " from the original (bring it back with bbs restore)"
        )
    return url


def registered(data: Path, now_ms: int | None = None) -> Processes:
    """The processes the node's fence registered (in process id order) and its holds; `now_ms` (default: this
    machine's clock) decides which are silent."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    url = _url(data)
    fence = read_fence(data / FENCE_NAME)
    mine = None if fence is None else fence.process
    with contextlib.closing(connect_store(url, readonly=True)) as conn, transaction(conn, commit=False):
        identity = fence_store.history_identity(conn)
        recorded = ops_store.meta_value(conn, IDENTITY_KEY)
        rows = fence_store.processes(conn)
        holds = fence_store.holds(conn)
    changed = recorded is not None and recorded != identity  # the next check unchecks every process
    return Processes(
        [
            Process(p, vouched, not changed and checked == identity, at, seen, now - seen > SILENT_AFTER_MS, p == mine)
            for p, vouched, checked, at, seen in rows
        ],
        holds,
        changed,
    )


def forget(data: Path, process: str) -> None:
    """Remove `process` from the node's fence; CommandError when the node has no such process, or when it is the
    process of `data` itself (a folder still in use: its process registers again at its next check)."""
    url = _url(data)
    fence = read_fence(data / FENCE_NAME)
    if fence is not None and fence.process == process:
        raise CommandError(
            f"{process} is the process of {data} itself; forget a process retired for good from another process's"
            " folder"
        )
    with contextlib.closing(connect_store(url)) as conn, transaction(conn, immediate=True):
        if not fence_store.forget_process_txn(conn, process):
            raise CommandError(f"the node has no process {process} (bbs processes lists them)")


def mark_restored(data: Path) -> None:
    """Mark the node's database as brought back by hand: both the store epoch's history and the lease fence's read
    `restored`, so the next look of each finds the history moved."""
    url = _url(data)
    with contextlib.closing(connect_store(url)) as conn, transaction(conn, immediate=True):
        for key in (ops_store.HISTORY_KEY, IDENTITY_KEY):
            ops_store.set_meta_txn(conn, key, RESTORED)
