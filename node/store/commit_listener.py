"""Wakeups across processes (issue 41, docs/decisions.md record 85): one LISTEN connection per serving process.

On PostgreSQL every write transaction begins with `NOTIFY bbs_commit` (db.PG_BEGIN_WRITE: the same round trip as
BEGIN; the server delivers it only when the transaction commits, and the writer lock already orders those
commits). Each serving process holds one connection that LISTENs on that channel, on a thread of its own, and on
a notification from another process's commit calls `wake` (Database.wake_waiters: the listeners of
`Database.after_commit`, the very ones the process's own writer calls after its commits). A notification sent by
this process's own writer connection is skipped: its after_commit has woken them already.

Notifications sent while the connection is down are lost, so every (re)connect wakes every waiter once: each
re-reads what it waits on and misses nothing. A lost connection is reopened with backoff, logged once per outage.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("bbs.store.wakeups")

CHANNEL = "bbs_commit"
NOTIFY_SQL = f"NOTIFY {CHANNEL}"
RETRY_FIRST_S = 0.05  # the first wait before reconnecting; doubled per failed try up to RETRY_MAX_S
RETRY_MAX_S = 2.0
# TCP keepalives: a server gone without closing the socket (a machine lost) is noticed within about 30 s.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 4}


@dataclass
class WakeupStats:
    """What the listener has done since the process started (written by its thread; read as a snapshot)."""

    received: int = 0  # notifications of another process's commit (one per committed transaction)
    reconnects: int = 0  # LISTEN connections opened again after one was lost (the first is not counted)
    connected: bool = False  # whether a LISTEN connection is up now


class CommitListener:
    """A thread holding a LISTEN connection to `url`, calling `wake()` for other processes' commits and on every
    (re)connect. `own_pid()` is the backend pid of this process's writer connection (its notifications skipped)."""

    def __init__(self, url: str, wake: Callable[[], None], own_pid: Callable[[], int | None]) -> None:
        self.url = url
        self.wake = wake
        self.own_pid = own_pid
        self.stats = WakeupStats()
        self.listening = threading.Event()  # set while a LISTEN is in place (tests wait on it)
        self._stopping = threading.Event()
        self._stop_r, self._stop_w = os.pipe()  # written by stop(): ends the thread's select at once
        self._thread = threading.Thread(target=self._run, name="bbs-listen", daemon=True)
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None

    def start(self) -> None:
        """Start listening (returns at once; the first connection is made on the thread)."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close its connection."""
        self._stopping.set()
        os.write(self._stop_w, b"x")
        self._thread.join()
        os.close(self._stop_r)
        os.close(self._stop_w)

    def backend_pid(self) -> int | None:
        """The server process of the LISTEN connection now (tests end it with pg_terminate_backend), if up."""
        conn = self._conn
        return conn.info.backend_pid if conn is not None and self.listening.is_set() else None

    def _run(self) -> None:
        import psycopg  # on the thread: a node on SQLite never imports it (node/store/db.py says why)

        delay, down_since, first = RETRY_FIRST_S, None, True
        while not self._stopping.is_set():
            try:
                conn = psycopg.connect(self.url, autocommit=True, **KEEPALIVES)  # type: ignore[arg-type]
            except (psycopg.Error, OSError) as exc:
                if down_since is None:
                    down_since = time.monotonic()
                    log.warning("cannot LISTEN for other processes' commits (%s); retrying with backoff", exc)
                if self._stopping.wait(delay):
                    break
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            self._conn = conn
            try:
                conn.execute(f"LISTEN {CHANNEL}")
                if not first:
                    self.stats.reconnects += 1
                if down_since is not None:
                    log.warning("LISTEN connection back after %.1f s", time.monotonic() - down_since)
                first, down_since, delay = False, None, RETRY_FIRST_S
                self.stats.connected = True
                self.listening.set()
                self.wake()  # what was committed while no one listened: every waiter reads again
                self._listen(conn)
            except (psycopg.Error, OSError) as exc:  # OSError: the socket, as select sees it
                if not self._stopping.is_set() and down_since is None:
                    down_since = time.monotonic()
                    log.warning("the LISTEN connection was lost (%s); reconnecting with backoff", exc)
            finally:
                self.listening.clear()
                self.stats.connected = False
                self._conn = None
                conn.close()
            if not self._stopping.is_set() and self._stopping.wait(delay):
                break

    def _listen(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        """Wait on the socket (and the stop pipe); wake once per read that brought another process's commit."""
        import psycopg
        from psycopg import pq

        pgconn = conn.pgconn
        while True:
            ready, _, _ = select.select([pgconn.socket, self._stop_r], [], [])
            if self._stop_r in ready:
                return
            pgconn.consume_input()  # raises OperationalError when the connection is lost
            if pgconn.status != pq.ConnStatus.OK:
                raise psycopg.OperationalError("the LISTEN connection is closed")
            own, foreign = self.own_pid(), 0
            while (n := pgconn.notifies()) is not None:
                if n.be_pid != own:
                    foreign += 1
            if foreign:
                self.stats.received += foreign
                self.wake()


class Wakeups:
    """A Database's wakeups from other processes: the LISTEN thread a serving process starts (`start`) and stops,
    its counters (kept over restarts) and the backend pid of the Database's writer connection (kept by the writer)."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self.wake = wake
        self.stats = WakeupStats()
        self.own_pid: int | None = None
        self.listener: CommitListener | None = None  # while one runs

    def start(self, url: str | None) -> None:
        """On PostgreSQL (`url`), start listening for other processes' commits; nothing on SQLite (None)."""
        if url is None or self.listener is not None:
            return
        self.listener = CommitListener(url, self.wake, lambda: self.own_pid)
        self.listener.stats = self.stats
        self.listener.start()

    def stop(self) -> None:
        """Stop what `start` started (nothing if nothing runs)."""
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.stop()
