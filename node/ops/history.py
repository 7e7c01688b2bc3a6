"""The store epoch follows the history of a PostgreSQL database, and a serving process follows the store epoch
(docs/decisions.md record 94).

A database brought back by the server rather than by `bbs restore` (a point-in-time recovery, a promoted replica, a
dump restored into another cluster) may have lost the end of the log while keeping the store epoch: peers would then
trust their cursors, and the sequence numbers handed out next would name records they never pull. Each process checks
at its start (`Node.open`) and every EPOCH_WATCH_SECONDS while serving (`EpochWatch`); the first to find the history
moved gives the store a new epoch, so peers reconcile (docs/sync.md, `reset` `epoch_changed`). The same look tells
the process's own listeners the epoch (its search indexer, its sync store), which act when it changed under them.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

from node.ops import store
from node.store.conn import POSTGRESQL, Conn, engine_of
from node.store.db import Database, transaction

log = logging.getLogger("bbs.node")
EPOCH_WATCH_SECONDS = 5.0


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
    moved, _ = _looked(conn)
    if not moved:
        return None
    with transaction(conn, immediate=True):
        return follow_txn(conn, now_ms)


def _looked(conn: Conn) -> tuple[bool, str]:
    """(whether the database's history moved since the store epoch was given: PostgreSQL only; the store epoch)."""
    moved = False
    if engine_of(conn) == POSTGRESQL:
        was, now = store.recorded_history(conn)
        moved = was != now
    return moved, store.meta_value(conn, "epoch") or ""


class EpochWatch:
    """One process's look at the store epoch while serving (node/web/background.py runs `look` every
    EPOCH_WATCH_SECONDS): one read, and a write only when the database's history moved. Each listener is told the
    epoch at every look and acts when it is not the one it knew: the search indexer rebuilds its index, the sync store
    reconciles with every peer to take back what the store lost."""

    def __init__(self, db: Database, now_ms: Callable[[], int]) -> None:
        self.db = db
        self.now_ms = now_ms
        self.listeners: list[Callable[[str], None]] = []

    async def look(self) -> store.Renewed | None:
        """Follow the database's history (the epoch renewed when it moved; what renewed it, or None), then tell every
        listener the store epoch."""
        moved, epoch = await self.db.read(_looked)
        renewed = None
        if moved:
            # the epoch read in the same transaction: renewed here, or by another process that found the move first
            renewed, epoch = await self.db.write(
                lambda conn: (follow_txn(conn, self.now_ms()), store.meta_value(conn, "epoch") or "")
            )
        for listener in tuple(self.listeners):
            try:
                listener(epoch)
            except Exception:  # one listener's failure does not keep the epoch from the others
                log.exception("store: a listener of the store epoch failed: %r", listener)
        return renewed
