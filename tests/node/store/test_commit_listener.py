"""node.store.commit_listener on a real PostgreSQL server: a committed write transaction's NOTIFY wakes the
listener of another process, a rolled-back one does not, its own writer's is skipped, and a LISTEN connection
ended by the server is reopened with a wake. tests/node/multiproc/test_wakeups.py checks the waiters of served
processes."""

from __future__ import annotations

import threading

import psycopg
import pytest

from node.store import commit_listener, db

pytestmark = pytest.mark.postgresql

BOUND_S = 5.0


class Woken:
    """A `wake` that counts its calls and lets a test wait for the next one."""

    def __init__(self) -> None:
        self.count = 0
        self.cond = threading.Condition()

    def __call__(self) -> None:
        with self.cond:
            self.count += 1
            self.cond.notify_all()

    def wait_past(self, count: int, timeout: float = BOUND_S) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.count > count, timeout)


def write(conn: psycopg.Connection[tuple[object, ...]], *, commit: bool = True) -> None:
    """A write transaction as the node's writer begins one (db.PG_BEGIN_WRITE), committed or rolled back."""
    conn.execute(db.PG_BEGIN_WRITE)
    conn.execute("COMMIT" if commit else "ROLLBACK")


def test_a_commit_wakes_a_rollback_does_not_and_own_commits_are_skipped(pg_migrated_url: str) -> None:
    woken = Woken()
    with (
        psycopg.connect(pg_migrated_url, autocommit=True) as other,
        psycopg.connect(pg_migrated_url, autocommit=True) as own,
    ):
        wakeups = commit_listener.Wakeups(woken)
        wakeups.own_pid = own.info.backend_pid
        wakeups.start(pg_migrated_url)
        try:
            assert wakeups.listener is not None and wakeups.listener.listening.wait(BOUND_S)
            assert woken.wait_past(0)  # the connect wakes once
            write(other, commit=False)
            write(own)
            write(other)
            assert woken.wait_past(1)
            assert woken.count == 2 and wakeups.stats.received == 1  # neither the rollback nor its own commit
        finally:
            wakeups.stop()
    assert wakeups.listener is None and not wakeups.stats.connected


def test_a_terminated_listen_connection_is_reopened_and_wakes(pg_migrated_url: str) -> None:
    woken = Woken()
    wakeups = commit_listener.Wakeups(woken)
    wakeups.start(pg_migrated_url)
    try:
        listener = wakeups.listener
        assert listener is not None and listener.listening.wait(BOUND_S) and woken.wait_past(0)
        pid = listener.backend_pid()
        with psycopg.connect(pg_migrated_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            assert woken.wait_past(1)  # reconnected: every waiter reads again
            assert wakeups.stats.reconnects == 1 and listener.backend_pid() not in (None, pid)
            write(admin)
            assert woken.wait_past(2)
    finally:
        wakeups.stop()


def test_nothing_listens_on_sqlite() -> None:
    wakeups = commit_listener.Wakeups(Woken())
    wakeups.start(None)
    assert wakeups.listener is None
    wakeups.stop()
