"""The node's leader: which of the processes serving one database runs the work done once per node, and the epoch
its writes are fenced by (docs/decisions.md record 87).

On PostgreSQL any number of `bbs serve` processes share the node's database. The one row of `node_leader` (migration
0054) is a lease: a process takes it when it is free or expired, with the epoch + 1 (a new term), renews it every
`RENEW_S` for `TTL_MS`, and gives it up on a clean stop. Expiry is read on the database server's clock
(`clock_timestamp()`), the one clock every process sees, whatever machine it runs on and however its own clock is
set; the node's clock (`Node.now_ms`, which tests set) never decides who leads.

The fence: a write job of leader work runs `Fence.check` inside its write transaction, after the writer's advisory
lock (node/store/db.py `WRITER_LOCK`), and is refused (`NotLeader`, rolled back) unless the stored epoch is still its
term's. A take-over writes the new epoch under that same lock, so it falls between two write transactions of the
node: every fenced write that commits after it would have read the new epoch, and none does. Renewals change only
`expires_ms` of the holder's own term, without the writer's lock (a row lock orders them against a take-over), so a
busy writer does not delay them.

On SQLite a single process serves the file (the data folder's lock), so it is always the leader: `Leadership` then
leads from the start, with no fence and no traffic on the table.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from node.errors import NotLeader
from node.store.conn import Conn
from node.store.db import transaction
from wire.stopping import stop_task

log = logging.getLogger("bbs.leader")
RENEW_S = 1.0  # how often the leader renews its lease, and how often another process looks whether it is free
TTL_MS = 3000  # how long a renewal holds the lease: the leader's death is taken over within TTL_MS + RENEW_S (< 5 s)
# A leader that could not renew stops its leader work this long before its lease can have expired on the server's
# clock (its last good renewal began at least that early), so two processes never run leader work at once
# unless a process is paused; the fence refuses a paused one's writes.
MARGIN_S = RENEW_S
STATEMENT_TIMEOUT_MS = 1000  # a lease statement waits no longer (a take-over waiting for the writer's lock, say)
NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"  # the server's clock, epoch milliseconds
TAKE_SQL = (
    f"UPDATE node_leader SET process_id = ?, epoch = epoch + 1, expires_ms = {NOW_MS} + ?"
    f" WHERE id = 1 AND (process_id IS NULL OR expires_ms < {NOW_MS}) RETURNING epoch"
)
RENEW_SQL = (
    f"UPDATE node_leader SET expires_ms = {NOW_MS} + ? WHERE id = 1 AND process_id = ? AND epoch = ? RETURNING 1"
)
# by the process alone: a take-over of its own still under way when it stopped is given up too
RELEASE_SQL = "UPDATE node_leader SET process_id = NULL, expires_ms = 0 WHERE id = 1 AND process_id = ?"
FREE_SQL = f"SELECT process_id IS NULL OR expires_ms < {NOW_MS} FROM node_leader WHERE id = 1"


@dataclass(frozen=True)
class Fence:
    """A term of leadership as its writes carry it: the process and the epoch it took."""

    process_id: str
    epoch: int

    def check(self, conn: Conn) -> None:
        """Refuse (`NotLeader`) unless the stored lease is still this term's: run inside a write transaction, after
        the writer's lock, by every write job of leader work (node/store/db.py `leader_fence`)."""
        row = conn.execute("SELECT process_id, epoch FROM node_leader WHERE id = 1").fetchone()
        if row is None or row[0] != self.process_id or int(row[1]) != self.epoch:
            held = "nobody" if row is None or row[0] is None else f"process {row[0]}"
            stored = "none" if row is None else int(row[1])
            raise NotLeader(
                f"leader work of process {self.process_id} (epoch {self.epoch}) refused: the stored epoch is {stored},"
                f" held by {held}; nothing of this write is kept"
            )


def stored(conn: Conn) -> tuple[str | None, int]:
    """(the leading process's id or None, the epoch) as stored."""
    row = conn.execute("SELECT process_id, epoch FROM node_leader WHERE id = 1").fetchone()
    return (None, 0) if row is None else (row[0], int(row[1]))


@dataclass
class Term:
    """One term of this process as leader: its fence, and an event set when it ends (lost, or given up)."""

    fence: Fence | None  # None on SQLite: the only process, nothing to fence
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def epoch(self) -> int:
        return 0 if self.fence is None else self.fence.epoch


class Leadership:
    """This process's part in choosing the node's leader (see the module's docstring).

    `start` takes the lead if it is free and starts the loop renewing it (or trying for it every RENEW_S);
    `term` is the current term while this process leads; `next_term()` waits for the next one; `stop` ends the
    loop and gives the lead up, so another process takes over within one RENEW_S."""

    def __init__(self, url: str | None, process_id: str) -> None:
        self.url, self.process_id = url, process_id
        self.term: Term | None = None
        self.takeovers = 0  # terms this process began (each one a new epoch)
        self.last_epoch = 0  # the epoch of this process's latest term (0: it never led)
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._conn: Any = None  # PostgreSQL: the lease's own connection (never the writer's: no queue to wait in)
        self._io = threading.Lock()  # one lease statement at a time on it
        self._renewed_at = 0.0  # time.monotonic() when the current term's last good renewal began
        self._step_task: asyncio.Future[int | None] | None = None  # the lease statement under way, on a thread
        self._step_of: tuple[Term | None, float] = (None, 0.0)  # the term it renews (None: a take-over) and its start

    @property
    def leading(self) -> bool:
        """Whether this process leads now."""
        return self.term is not None

    async def start(self) -> None:
        """Lead at once on SQLite; on PostgreSQL try once now (a lone process leads from its first request), then
        keep trying, or renewing, every RENEW_S."""
        self._changed = asyncio.Condition()  # of this event loop (a node may be served again by another)
        if self.url is None:
            self._begin(None)
            return
        await self._round()
        self._task = asyncio.create_task(self._run(), name="leader lease")

    async def stop(self) -> None:
        """Stop the loop, end the term and give the lead up (PostgreSQL), so another process takes it at once."""
        task, self._task = self._task, None
        try:
            if task is not None:
                await stop_task(task)
        finally:  # a stop of the caller during that wait is raised, after the term ended and the lead was given up
            await self._end("it stops", quiet=True)
            self._step_task = None
            if self.url is not None:
                await self._give_up()

    async def _give_up(self) -> None:
        try:  # bounded: a server gone silent must not hold the stop (the lease then expires on its own)
            await asyncio.wait_for(asyncio.to_thread(self._release_and_close), timeout=2 * RENEW_S)
        except Exception as exc:
            log.warning("could not give the lead up (it expires within %d ms): %r", TTL_MS, exc)

    async def next_term(self, after: Term | None = None) -> Term:
        """The term this process leads in now, once it leads, other than `after` (wait for the next one)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.term is not None and self.term is not after)
            assert self.term is not None
            return self.term

    def pause(self) -> None:
        """Stop renewing without giving the lead up or ending the term, as a process paused (SIGSTOP, a long GC,
        a frozen VM) would: its leader work keeps running, and its writes are refused once another process took
        over. For tests and fault drills."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    # ---- the loop ------------------------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(RENEW_S)
            await self._round()

    async def _round(self) -> None:
        """Renew the term, or try to take the lead; end the term when it was lost or could not be renewed in time.

        A statement that hangs (a server gone silent) is not waited for past RENEW_S, nor started again while it
        hangs: the rounds meanwhile only check how old the last good renewal is."""
        if self._step_task is None:
            term = self.term
            self._step_of = (term, time.monotonic())
            fence = term.fence if term is not None else None
            self._step_task = asyncio.ensure_future(asyncio.to_thread(self._step, fence))
        step = self._step_task
        term, started = self._step_of
        done, _ = await asyncio.wait({step}, timeout=RENEW_S)
        outcome: int | None = None
        if step in done:
            self._step_task = None
            try:
                outcome = step.result()
            except Exception as exc:
                log.warning("the leader lease could not be %s: %s", "renewed" if term else "read", exc)
        if self.term is not term:  # stopped, or the term ended, meanwhile
            return
        if term is not None:
            if outcome == term.epoch:
                self._renewed_at = started
            elif outcome is not None:  # another process holds it
                await self._end(f"process lost the lead (epoch {term.epoch})")
            elif time.monotonic() - self._renewed_at > TTL_MS / 1000 - MARGIN_S:
                await self._end(f"lease of epoch {term.epoch} could not be renewed in time")
        elif outcome:
            self._renewed_at = started
            self._begin(Fence(self.process_id, outcome))
            async with self._changed:
                self._changed.notify_all()

    def _begin(self, fence: Fence | None) -> None:
        self.term = Term(fence)
        self.takeovers += 1
        self.last_epoch = self.term.epoch
        if fence is not None:
            log.info("process %s leads the node (epoch %d)", self.process_id, fence.epoch)

    async def _end(self, why: str, *, quiet: bool = False) -> None:
        term, self.term = self.term, None
        if term is None:
            return
        term.ended.set()
        if term.fence is not None:
            log.log(logging.INFO if quiet else logging.WARNING, "process %s no longer leads: %s", self.process_id, why)

    # ---- statements (on a thread) --------------------------------------------------------------------------------

    def _step(self, fence: Fence | None) -> int | None:
        """Renew `fence`'s term: its epoch if renewed, 0 if no longer held. Without a term: take the lead if it is
        free or expired, under the writer's lock (the fence's ordering); the new epoch, or 0 if held."""
        with self._io:
            conn = self._connection()
            if fence is not None:
                renewed = conn.execute(RENEW_SQL, (TTL_MS, fence.process_id, fence.epoch)).fetchone()
                return fence.epoch if renewed is not None else 0
            free = conn.execute(FREE_SQL).fetchone()
            if free is None or not free[0]:
                return 0
            with transaction(conn, immediate=True):  # BEGIN and the writer's advisory lock (WRITER_LOCK)
                taken = conn.execute(TAKE_SQL, (self.process_id, TTL_MS)).fetchone()
            return 0 if taken is None else int(taken[0])

    def _release_and_close(self) -> None:
        with self._io:
            try:
                self._connection().execute(RELEASE_SQL, (self.process_id,))
            finally:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

    def _connection(self) -> Any:
        conn = self._conn
        if conn is None or conn.raw.closed:
            from node.store import pg_conn  # PostgreSQL only (node/store/db.py says why)

            conn = pg_conn.connect(self.url or "")
            conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
            self._conn = conn
        return conn
