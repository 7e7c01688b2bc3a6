"""The node-wide write clock (docs/decisions.md record 90): how a writer learns that another process of the node
committed since its own last transaction.

On PostgreSQL every write transaction moves the one-row `write_clock` (migration 0056) right after it takes the
writer's advisory lock, in the same round trip as BEGIN (node/store/db.py PG_BEGIN_WRITE). A value that is not one
past what this process's last commit left means another process wrote in between: the listeners revalidate the
caches that write decisions read, inside the transaction and under the lock. SQLite has one process and no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from node.store.conn import Conn


class WriteClock:
    """One process's view of the write clock, and what runs when another process moved it."""

    def __init__(self) -> None:
        self.value: int | None = None  # as this process's last write transaction left it (None: none yet)
        # Each revalidates a cache write decisions read (`Node` registers them); one that raises fails the batch,
        # as a failing statement does.
        self.on_foreign_write: list[Callable[[Conn], None]] = []
        self.foreign_writes = 0  # write transactions that found another process's commit before them

    def observe(self, conn: Conn, begun: Any) -> int:
        """The value this transaction moved the clock to (`begun`: the row PG_BEGIN_WRITE's UPDATE returned). If it
        is not one past the value this process's last commit left, another process committed in between (or this
        process has not written since it opened): the listeners revalidate their caches now, so nothing this
        transaction decides reads a cache older than the database."""
        clock = int(begun[0])
        if self.value is None or clock != self.value + 1:
            self.foreign_writes += 1
            for listener in tuple(self.on_foreign_write):
                listener(conn)
        self.value = clock - 1  # a rollback of this transaction leaves the clock here, which the caches now reflect
        return clock

    def committed(self, clock: int) -> None:
        """The transaction that moved the clock to `clock` committed: the clock stands there."""
        self.value = clock
