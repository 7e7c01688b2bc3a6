"""The store epoch follows the history of a PostgreSQL database (docs/decisions.md record 94).

A database brought back by the server rather than by `bbs restore` (a point-in-time recovery, a promoted replica, a
dump restored into another cluster) may have lost the end of the log while keeping the store epoch: peers would then
trust their cursors, and the sequence numbers handed out next would name records they never pull. Each process checks
at its start (`Node.open`) and every HISTORY_CHECK_SECONDS while serving; the first to find the history moved gives
the store a new epoch, so peers reconcile (docs/sync.md, `reset` `epoch_changed`). Nothing on SQLite.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

from node.ops import store
from node.store.conn import Conn
from node.store.db import Database, transaction

log = logging.getLogger("bbs.node")
HISTORY_CHECK_SECONDS = 5.0


def follow_txn(conn: Conn, now_ms: int) -> store.Renewed | None:
    """`store.follow_history_txn` with a fresh epoch, logged when it renewed the store's."""
    renewed = store.follow_history_txn(conn, secrets.token_hex(16), now_ms)
    if renewed is not None:
        log.warning(
            "store: this database's history moved (%s, now %s: a promotion, a point-in-time recovery, another cluster"
            " or a restore by hand); the store epoch %s is renewed as %s, so peers reconcile instead of trusting"
            " their cursors",
            renewed.was,
            renewed.now,
            renewed.previous_epoch,
            renewed.epoch,
        )
    return renewed


def follow_at_start(conn: Any, now_ms: int) -> store.Renewed | None:
    """At a start (`Node.open`, a `bbs` command too), on the start's connection (`connect_store`'s): a read, then a
    write transaction only when the two histories differ (the writer lock is not taken, nor the write clock moved,
    on every start)."""
    was, now = store.recorded_history(conn)
    if was == now:
        return None
    with transaction(conn, immediate=True):
        return follow_txn(conn, now_ms)


async def follow(db: Database, now_ms: Callable[[], int]) -> store.Renewed | None:
    """While serving: a read of the recorded history and the database's, then a write only when they differ."""
    if db.pg_url is None:
        return None
    was, now = await db.read(store.recorded_history)
    if was == now:
        return None
    return await db.write(lambda conn: follow_txn(conn, now_ms()))
