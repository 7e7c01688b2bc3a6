"""node/store/db.py: transactions and savepoints, the writer thread (group commit, mergeable jobs) and quick reads
(answered on the event loop within the inline budget, moved to a reader thread past it).

The writer is held on a job that waits for an event (`Held`), so the jobs under test queue up behind it and reach
the writer together, as they do under load.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from node.errors import NotFound, Unavailable
from node.store import db as node_db
from node.store.db import WRITER_CACHE_KIB, Database, Mergeable, TransactionLost, connect, savepoint, transaction

pytestmark = pytest.mark.sqlite_only(
    reason="node/store/db.py over a SQLite file: sqlite3 transactions (BEGIN IMMEDIATE's write lock), its page cache "
    "and secure_delete VACUUM, quick reads stopped by SQLite's progress handler; test_db_pg.py runs the writer, "
    "savepoints, after_commit and quick reads of the same Database over PostgreSQL"
)

# ---- transaction() and savepoint() ----------------------------------------------------------------------


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    connection = connect(tmp_path / "txn.db")
    connection.execute("CREATE TABLE t (v INTEGER)")
    yield connection
    connection.close()


def committed(tmp_path: Path) -> list[int]:
    """What another connection sees: only committed rows."""
    other = connect(tmp_path / "txn.db", readonly=True)
    try:
        return [r[0] for r in other.execute("SELECT v FROM t ORDER BY v")]
    finally:
        other.close()


def test_a_transaction_commits_when_its_block_ends(conn: sqlite3.Connection, tmp_path: Path) -> None:
    with transaction(conn) as same:
        assert same is conn and conn.in_transaction
        conn.execute("INSERT INTO t VALUES (1)")
        assert committed(tmp_path) == []
    assert not conn.in_transaction
    assert committed(tmp_path) == [1]


def test_a_transaction_rolls_back_when_its_block_raises(conn: sqlite3.Connection, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="refused"), transaction(conn):
        conn.execute("INSERT INTO t VALUES (1)")
        raise ValueError("refused")
    assert not conn.in_transaction
    assert committed(tmp_path) == []


def test_a_failed_commit_is_rolled_back_and_raised(conn: sqlite3.Connection, tmp_path: Path) -> None:
    """A deferred foreign key is checked at COMMIT, which then fails and leaves the transaction open."""
    conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute("CREATE TABLE child (parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)")
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"), transaction(conn):
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("INSERT INTO child VALUES (7)")
    assert not conn.in_transaction
    assert committed(tmp_path) == []


def test_an_immediate_transaction_takes_the_write_lock_at_begin(conn: sqlite3.Connection, tmp_path: Path) -> None:
    rival = connect(tmp_path / "txn.db")
    rival.execute("PRAGMA busy_timeout = 0")
    try:
        with transaction(conn, immediate=True), pytest.raises(sqlite3.OperationalError, match="locked"):
            rival.execute("BEGIN IMMEDIATE")
        with transaction(conn), transaction(rival, immediate=True):  # deferred: no lock until it reads or writes
            rival.execute("INSERT INTO t VALUES (2)")
        assert committed(tmp_path) == [2]
    finally:
        rival.close()


def test_a_begin_that_fails_inside_a_callers_transaction_leaves_it_open(conn: sqlite3.Connection) -> None:
    with transaction(conn):
        conn.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(sqlite3.OperationalError, match="within a transaction"), transaction(conn):
            pass
        assert conn.in_transaction  # the caller's transaction is the caller's to end
        conn.execute("INSERT INTO t VALUES (2)")
    assert [r[0] for r in conn.execute("SELECT v FROM t ORDER BY v")] == [1, 2]


def test_a_transaction_that_keeps_nothing_ends_with_rollback(conn: sqlite3.Connection, tmp_path: Path) -> None:
    with transaction(conn, commit=False):
        conn.execute("INSERT INTO t VALUES (1)")
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 1
    assert not conn.in_transaction
    assert committed(tmp_path) == []


def test_a_savepoint_that_raises_rolls_back_alone(conn: sqlite3.Connection, tmp_path: Path) -> None:
    with transaction(conn):
        conn.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(ValueError), savepoint(conn, "failing"):
            conn.execute("INSERT INTO t VALUES (2)")
            raise ValueError("refused")
        assert conn.in_transaction  # the transaction goes on
        with savepoint(conn, "kept") as same:
            assert same is conn
            conn.execute("INSERT INTO t VALUES (3)")
    assert committed(tmp_path) == [1, 3]


def test_a_nested_savepoint_rolls_back_alone_and_its_outer_one_with_everything_inside(
    conn: sqlite3.Connection, tmp_path: Path
) -> None:
    with transaction(conn):
        with savepoint(conn, "outer"):
            conn.execute("INSERT INTO t VALUES (1)")
            with pytest.raises(ValueError), savepoint(conn, "inner"):
                conn.execute("INSERT INTO t VALUES (2)")
                raise ValueError("inner only")
            conn.execute("INSERT INTO t VALUES (3)")
        with pytest.raises(ValueError), savepoint(conn, "outer"):
            with savepoint(conn, "inner"):
                conn.execute("INSERT INTO t VALUES (4)")  # released into the outer savepoint...
            raise ValueError("outer")  # ...and rolled back with it
    assert committed(tmp_path) == [1, 3]


def test_a_savepoint_whose_transaction_ended_is_lost_with_the_error(conn: sqlite3.Connection, tmp_path: Path) -> None:
    """SQLite ends the whole transaction on some errors (a full disk): nothing under the savepoint can be rolled
    back alone. A ROLLBACK run inside the block stands for that here."""
    with pytest.raises(TransactionLost) as lost, transaction(conn), savepoint(conn, "job"):
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("ROLLBACK")
        raise ValueError("the disk is full")
    assert isinstance(lost.value.error, ValueError) and not conn.in_transaction
    with pytest.raises(TransactionLost) as released, transaction(conn), savepoint(conn, "job"):
        conn.execute("ROLLBACK")  # the block ends well, but its savepoint is gone
    assert isinstance(released.value.error, sqlite3.OperationalError)
    with pytest.raises(KeyboardInterrupt), transaction(conn), savepoint(conn, "job"):
        conn.execute("ROLLBACK")
        raise KeyboardInterrupt  # goes up as it is
    assert committed(tmp_path) == []


# ---- migrations -------------------------------------------------------------------------------------------


def _schema(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    return conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()


def test_a_new_database_takes_every_migration_in_one_commit_and_ends_as_one_migrated_script_by_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    every = node_db.migrations()
    latest = every[-1][0]
    commits: list[str] = []

    def count(sql: str) -> None:
        if sql.strip().upper() == "COMMIT":
            commits.append(sql)

    new = connect(tmp_path / "new.db")
    new.set_trace_callback(count)
    assert node_db.migrate(new) == latest
    assert len(commits) == 1
    old = connect(tmp_path / "old.db")  # a database the first release made: the other scripts come one by one
    monkeypatch.setattr(node_db, "migrations", lambda: every[:1])
    assert node_db.migrate(old) == every[0][0]
    monkeypatch.setattr(node_db, "migrations", lambda: every)
    commits.clear()
    old.set_trace_callback(count)
    assert node_db.migrate(old) == latest
    assert len(commits) == len(every) - 1
    assert _schema(new) == _schema(old)
    assert node_db.migrate(new) == latest and node_db.migrate(old) == latest  # nothing left to apply


# ---- the writer thread ------------------------------------------------------------------------------------


class Bad(Exception):
    """The failure of one item."""


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(tmp_path / "writer.db")
    database.open()
    await database.write(lambda c: c.execute("CREATE TABLE scratch (item TEXT PRIMARY KEY)"))
    yield database
    database.close()


class Held:
    """Holds the writer on one job until released; `queued(n)` waits until n more jobs wait behind it, or, given
    `kind`, until n jobs of that mergeable kind were queued while held (a served node's other jobs not counted)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.release = threading.Event()
        self.running = threading.Event()
        self.task: asyncio.Task[None] | None = None
        self.merged: dict[int, int] = {}  # id of a Mergeable: its jobs queued while held

    async def __aenter__(self) -> Held:
        def hold(conn: sqlite3.Connection) -> None:
            self.running.set()
            self.release.wait(60)

        write_merged = self.db.write_merged

        async def counted(kind: Mergeable[Any, Any], item: Any) -> Any:
            self.merged[id(kind)] = self.merged.get(id(kind), 0) + 1
            return await write_merged(kind, item)  # queues the job before it first yields

        self.task = asyncio.create_task(self.db.write(hold))
        self.db.write_merged = counted  # type: ignore[method-assign]
        deadline = time.monotonic() + 50
        while not self.running.is_set():
            assert not self.task.done(), self.task
            assert time.monotonic() < deadline, "the writer never ran the holding job"
            await asyncio.sleep(0.001)
        return self

    async def queued(self, n: int, kind: Mergeable[Any, Any] | None = None) -> None:
        deadline = time.monotonic() + 50
        while time.monotonic() < deadline:
            if (self.db._jobs.qsize() if kind is None else self.merged.get(id(kind), 0)) >= n:
                return
            await asyncio.sleep(0.002)
        raise AssertionError(f"{n} jobs never queued up")

    async def __aexit__(self, *exc: object) -> None:
        del self.db.write_merged  # the class's method again
        self.release.set()
        assert self.task is not None
        await self.task


def scratch_kind(calls: list[list[str]]) -> Mergeable[str, int]:
    """Insert each item into `scratch`; an item starting with 'bad' fails after its insert."""

    def run(conn: sqlite3.Connection, items: list[str]) -> list[int]:
        calls.append(list(items))
        out = []
        for item in items:
            conn.execute("INSERT INTO scratch (item) VALUES (?)", (item,))
            if item.startswith("bad"):
                raise Bad(item)
            out.append(len(item))
        return out

    return Mergeable(run)


async def stored(db: Database) -> list[str]:
    return await db.read(lambda c: [r[0] for r in c.execute("SELECT item FROM scratch ORDER BY item")])


def test_a_write_whose_event_loop_closed_still_commits_and_the_writer_lives_on(tmp_path: Path) -> None:
    """A caller that gave up (its loop closed before the answer) must not take the writer thread with it."""
    database = Database(tmp_path / "writer.db")
    database.open()
    gate = threading.Event()

    def slow(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE scratch (item TEXT PRIMARY KEY)")
        gate.wait(5)
        conn.execute("INSERT INTO scratch VALUES ('kept')")

    async def give_up() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(database.write(slow), 0.05)

    try:
        asyncio.run(give_up())  # returns with its loop closed while the job still runs
        gate.set()

        async def later() -> list[str]:
            return await asyncio.wait_for(
                database.write(lambda c: [r[0] for r in c.execute("SELECT item FROM scratch")]), 10
            )

        assert asyncio.run(later()) == ["kept"]
    finally:
        gate.set()
        database.close()


async def test_the_writer_keeps_a_larger_page_cache_than_readers(db: Database) -> None:
    def cache_pages(conn: sqlite3.Connection) -> int:
        return int(conn.execute("PRAGMA cache_size").fetchone()[0])

    assert await db.write(cache_pages) == -WRITER_CACHE_KIB  # negative: KiB rather than pages
    reader_cache = await db.read(cache_pages)
    assert reader_cache != -WRITER_CACHE_KIB
    assert reader_cache == sqlite3.connect(":memory:").execute("PRAGMA cache_size").fetchone()[0]


async def test_queued_jobs_of_one_kind_run_in_one_call(db: Database) -> None:
    calls: list[list[str]] = []
    kind = scratch_kind(calls)
    async with Held(db) as held:
        futures = [asyncio.ensure_future(db.write_merged(kind, item)) for item in ("a", "bb", "ccc")]
        await held.queued(3)
    assert await asyncio.gather(*futures) == [1, 2, 3]
    assert calls == [["a", "bb", "ccc"]]
    assert await stored(db) == ["a", "bb", "ccc"]


async def test_the_writer_counts_its_transactions_jobs_and_busy_time(db: Database) -> None:
    before = dataclasses.replace(db.stats)
    kind = scratch_kind([])
    async with Held(db) as held:
        futures = [asyncio.ensure_future(db.write_merged(kind, item)) for item in ("a", "bb", "ccc", "dddd")]
        futures.append(asyncio.ensure_future(db.write(lambda c: c.execute("SELECT 1").fetchone()[0])))
        await held.queued(5)
    await asyncio.gather(*futures)
    after = db.stats
    # the held job was one transaction; the five queued behind it were the next one, committed together
    assert (after.transactions - before.transactions, after.jobs - before.jobs) == (2, 6)
    assert after.rolled_back == before.rolled_back and after.busy_seconds > before.busy_seconds


async def test_under_load_the_writer_waits_for_the_next_jobs_and_commits_them_together(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two jobs queued behind a running one: the writer takes them, then waits for more before it begins (here
    for as long as it takes: the window is widened so the test does not race it), and the job that arrives
    meanwhile is committed in the same call."""
    monkeypatch.setattr(node_db, "GATHER_UNDER", 3)
    monkeypatch.setattr(node_db, "GATHER_GAP_S", 60.0)
    monkeypatch.setattr(node_db, "GATHER_MAX_S", 60.0)
    monkeypatch.setattr(node_db, "GATHER_SHARE", 1e9)
    calls: list[list[str]] = []
    kind = scratch_kind(calls)
    async with Held(db) as held:
        first = [asyncio.ensure_future(db.write_merged(kind, item)) for item in ("a", "b")]
        await held.queued(2)
    while db._jobs.qsize():  # the writer has taken both and is waiting for more
        await asyncio.sleep(0.001)
    late = asyncio.ensure_future(db.write_merged(kind, "c"))
    assert await asyncio.gather(*first, late) == [1, 1, 1]
    assert calls == [["a", "b", "c"]]


async def test_a_failing_item_fails_alone(db: Database) -> None:
    """The merged call fails: it is rolled back and each item runs alone; only the bad one errs."""
    calls: list[list[str]] = []
    kind = scratch_kind(calls)
    async with Held(db) as held:
        futures = [asyncio.ensure_future(db.write_merged(kind, item)) for item in ("a", "bad1", "ccc")]
        await held.queued(3)
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert results[0] == 1 and results[2] == 3
    assert isinstance(results[1], Bad)
    assert calls == [["a", "bad1", "ccc"], ["a"], ["bad1"], ["ccc"]]
    assert await stored(db) == ["a", "ccc"]  # nothing of the failed item, nothing twice


async def test_other_jobs_split_the_runs(db: Database) -> None:
    calls: list[list[str]] = []
    kind = scratch_kind(calls)
    async with Held(db) as held:
        first = [asyncio.ensure_future(db.write_merged(kind, item)) for item in ("a", "b")]
        await held.queued(2)
        plain = asyncio.ensure_future(db.write(lambda c: c.execute("INSERT INTO scratch VALUES ('plain')").rowcount))
        await held.queued(3)
        second = [asyncio.ensure_future(db.write_merged(kind, item)) for item in ("c", "d")]
        await held.queued(5)
    assert await asyncio.gather(*first, plain, *second) == [1, 1, 1, 1, 1]
    assert calls == [["a", "b"], ["c", "d"]]


async def test_a_wrong_result_count_is_a_failure_of_the_call(db: Database) -> None:
    def run(conn: sqlite3.Connection, items: list[str]) -> list[int]:
        for item in items:
            conn.execute("INSERT INTO scratch (item) VALUES (?)", (item,))
        return [0]  # one result, whatever the number of items

    kind: Mergeable[str, int] = Mergeable(run)
    async with Held(db) as held:
        futures = [asyncio.ensure_future(db.write_merged(kind, item)) for item in ("a", "b")]
        await held.queued(2)
    assert await asyncio.gather(*futures) == [0, 0]  # each ran alone after the merged call was refused
    assert await stored(db) == ["a", "b"]


@pytest.mark.parametrize("then_raise", [False, True])
async def test_a_job_that_ends_the_transaction_fails_its_whole_batch(db: Database, then_raise: bool) -> None:
    """What a job committed into its batch's transaction is gone with it: no job of that batch is acknowledged."""

    def end(conn: sqlite3.Connection) -> None:
        conn.execute("ROLLBACK")
        if then_raise:
            raise Bad("after the end")

    before = dataclasses.replace(db.stats)
    async with Held(db) as held:
        first = asyncio.ensure_future(db.write(lambda c: c.execute("INSERT INTO scratch VALUES ('first')").rowcount))
        await held.queued(1)
        ender = asyncio.ensure_future(db.write(end))
        await held.queued(2)
    results = await asyncio.gather(first, ender, return_exceptions=True)
    expected = Bad if then_raise else sqlite3.OperationalError
    assert all(isinstance(r, expected) for r in results), results
    assert db.stats.rolled_back - before.rolled_back == 1
    assert await stored(db) == []
    assert await db.write(lambda c: c.execute("INSERT INTO scratch VALUES ('later')").rowcount) == 1
    assert await stored(db) == ["later"]  # the writer lives on


# ---- quick reads ------------------------------------------------------------------------------------------


# A statement that runs far longer than any inline budget (about a second of SQLite work).
LONG_SQL = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000000) SELECT count(*) FROM n"


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(tmp_path / "quick.db")
    db.open()
    await db.write(lambda c: c.execute("CREATE TABLE t (v INTEGER)"))
    yield db
    db.close()


async def test_a_quick_read_runs_on_the_event_loop_thread(database: Database) -> None:
    database.inline_budget_s = 5.0  # where it runs is checked, not the budget a loaded machine may make it overrun
    await database.write(lambda c: c.execute("INSERT INTO t VALUES (7)"))
    ran_on: list[threading.Thread] = []

    def fn(conn: sqlite3.Connection) -> int:
        ran_on.append(threading.current_thread())
        return int(conn.execute("SELECT v FROM t").fetchone()[0])

    assert await database.read(fn, quick=True) == 7  # sees the write committed before it
    assert ran_on == [threading.current_thread()]
    assert (database.read_stats.inline, database.read_stats.moved) == (1, 0)


async def test_a_read_not_marked_quick_runs_on_a_reader_thread(database: Database) -> None:
    ran_on: list[str] = []
    await database.read(lambda c: ran_on.append(threading.current_thread().name))
    assert ran_on[0].startswith("bbs-read")
    assert database.read_stats.inline == 0


async def test_a_quick_read_over_budget_is_stopped_and_run_again_on_a_reader_thread(database: Database) -> None:
    ran_on: list[str] = []

    def fn(conn: sqlite3.Connection) -> int:
        ran_on.append(threading.current_thread().name)
        return int(conn.execute(LONG_SQL).fetchone()[0])

    assert await database.read(fn, quick=True) == 3000000
    assert ran_on[0] == threading.current_thread().name and ran_on[1].startswith("bbs-read")
    assert (database.read_stats.inline, database.read_stats.moved) == (0, 1)
    # the loop's connection is usable again, with a fresh budget
    assert await database.read(lambda c: c.execute("SELECT 1").fetchone()[0], quick=True) == 1
    assert database.read_stats.inline == 1


async def test_a_budget_run_out_after_the_last_select_never_stops_the_end_of_the_read(database: Database) -> None:
    """The progress handler also runs inside the statement that ends a read (SQLite counts a cached statement's
    steps across runs, so about one run in 300 of a three-step ROLLBACK crosses the check interval). A read whose
    budget ran out in Python after its last SELECT must still end cleanly and answer from the loop: a stopped
    ROLLBACK would leave the loop's connection inside a transaction and fail every later quick read."""
    database.inline_budget_s = 0.0001

    def fn(conn: sqlite3.Connection) -> int:
        value = int(conn.execute("SELECT 1").fetchone()[0])
        time.sleep(0.0002)  # past the deadline, outside SQLite: nothing stops this part
        return value

    for _ in range(700):
        assert await database.read(fn, quick=True) == 1
    # Each read ends cleanly and answers; one whose own SELECT ran past the tiny budget (a loaded machine preempts
    # it) is moved to a reader thread and answers there, which is the budget working, not this bug, so only the
    # total is exact. The bug failed every quick read after the first stopped ROLLBACK.
    stats = database.read_stats
    assert stats.inline + stats.moved == 700 and stats.inline > 0
    assert await database.read(lambda c: c.in_transaction, quick=True) is True  # a fresh transaction of its own


async def test_an_answer_made_after_catching_the_interruption_is_discarded(database: Database) -> None:
    def fn(conn: sqlite3.Connection) -> int:
        try:
            return int(conn.execute(LONG_SQL).fetchone()[0])
        except sqlite3.OperationalError:
            return -1  # a partial answer: must never reach the caller

    assert await database.read(fn, quick=True) == 3000000
    assert database.read_stats.moved == 1


async def test_an_interruption_turned_into_another_error_still_moves_the_read(database: Database) -> None:
    def fn(conn: sqlite3.Connection) -> int:
        try:
            return int(conn.execute(LONG_SQL).fetchone()[0])
        except sqlite3.OperationalError:
            raise NotFound("gone") from None

    assert await database.read(fn, quick=True) == 3000000
    assert database.read_stats.moved == 1


async def test_an_error_of_the_read_itself_reaches_the_caller_once(database: Database) -> None:
    database.inline_budget_s = 5.0  # no read here may run over it, however loaded the machine: errors alone decide
    calls: list[str] = []

    def fn(conn: sqlite3.Connection) -> None:
        calls.append(threading.current_thread().name)
        raise NotFound("no such thing", code="entry_not_found")

    with pytest.raises(NotFound):
        await database.read(fn, quick=True)
    assert len(calls) == 1 and database.read_stats.moved == 0
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        await database.read(lambda c: c.execute("SELECT * FROM missing"), quick=True)
    assert database.read_stats.moved == 0


async def test_a_database_closed_and_opened_again_reads_on_fresh_connections(database: Database) -> None:
    assert await database.read(lambda c: 1, quick=True) == 1
    assert await database.read(lambda c: 2) == 2
    database.close()
    for quick in (True, False):
        with pytest.raises(Unavailable):
            await database.read(lambda c: 3, quick=quick)
    database.open()
    assert await database.read(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0], quick=True) == 0
    assert await database.read(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) == 0


async def test_an_error_made_by_hand_reaches_the_caller_unchanged(database: Database) -> None:
    def fn(conn: sqlite3.Connection) -> None:
        raise sqlite3.OperationalError("made by fn")  # no sqlite_errorcode attribute

    with pytest.raises(sqlite3.OperationalError, match="made by fn"):
        await database.read(fn, quick=True)


async def test_a_keyboard_interrupt_is_never_turned_into_a_moved_read(database: Database) -> None:
    """Raised by fn once the budget has run out: it goes up, the read does not quietly run again."""

    def fn(conn: sqlite3.Connection) -> int:
        try:
            return int(conn.execute(LONG_SQL).fetchone()[0])
        except sqlite3.OperationalError:
            raise KeyboardInterrupt from None

    with pytest.raises(KeyboardInterrupt):
        await database.read(fn, quick=True)
    assert database.read_stats.moved == 0
    assert await database.read(lambda c: c.in_transaction, quick=True) is True  # the connection is clean


async def test_a_signal_that_raises_during_the_sql_fails_the_read_cleanly(database: Database) -> None:
    """Python runs a signal handler during a long statement inside the progress handler, where sqlite3 prints and
    drops what it raised: the read fails as interrupted (it is not moved: the budget did not run out), and the
    loop's connection is left clean. `bbs serve` takes its signals through the event loop instead."""
    database.inline_budget_s = 60.0  # the statement runs on; only the signal stops it

    def on_alarm(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises((KeyboardInterrupt, sqlite3.OperationalError)):
            await database.read(lambda c: c.execute(LONG_SQL).fetchone()[0], quick=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert database.read_stats.moved == 0
    assert await database.read(lambda c: c.in_transaction, quick=True) is True


async def test_a_zero_budget_sends_every_read_to_a_reader_thread(tmp_path: Path) -> None:
    db = Database(tmp_path / "zero.db", inline_budget_s=0)
    db.open()
    try:
        name = await db.read(lambda c: threading.current_thread().name, quick=True)
        assert name.startswith("bbs-read") and db.read_stats.inline == 0
    finally:
        db.close()


async def test_a_busy_database_moves_the_read_instead_of_blocking_the_loop(database: Database) -> None:
    """SQLITE_BUSY on the loop's connection (busy_timeout 0 there: it never sleeps) moves the read to a reader
    thread, which waits for the lock with its normal busy timeout. The loop thread's attempt is told busy here:
    a WAL database gives a reader SQLITE_BUSY only in rare moments (recovery) that a test cannot arrange."""
    loop_thread = threading.current_thread()

    def fn(conn: sqlite3.Connection) -> str:
        if threading.current_thread() is loop_thread:
            busy = sqlite3.OperationalError("database is locked")
            busy.sqlite_errorcode = sqlite3.SQLITE_BUSY
            raise busy
        return threading.current_thread().name

    assert (await database.read(fn, quick=True)).startswith("bbs-read")
    assert database.read_stats.moved == 1
    assert await database.read(lambda c: c.execute("PRAGMA busy_timeout").fetchone()[0], quick=True) == 0


async def test_every_after_commit_listener_is_called_and_a_failing_one_stops_none(db: Database) -> None:
    """The push dispatcher and the search indexer both listen; one listener's bug must not silence the other."""
    calls: list[str] = []

    def broken() -> None:
        calls.append("broken")
        raise RuntimeError("a listener's bug")

    db.after_commit.extend([broken, lambda: calls.append("second")])
    await db.write(lambda c: c.execute("INSERT INTO node_meta(key, value) VALUES ('listeners', '2')"))
    assert calls == ["broken", "second"]
    await db.write(lambda c: c.execute("SELECT 1"))  # a job that commits too: both are called again
    db.after_commit.clear()
    await db.write(lambda c: c.execute("SELECT 1"))
    assert calls == ["broken", "second", "broken", "second"]


def test_the_one_vacuum_after_secure_delete_runs_once_and_leaves_no_free_page(tmp_path: Path) -> None:
    conn = node_db.connect(tmp_path / "bbs.db")
    node_db.migrate(conn)
    assert conn.execute("PRAGMA secure_delete").fetchone()[0] == 1  # the writer zeroes what it deletes
    conn.execute("CREATE TABLE scratch (body TEXT)")
    conn.executemany("INSERT INTO scratch VALUES (?)", [("old text " * 100,) for _ in range(200)])
    conn.execute("DELETE FROM scratch")
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] > 0
    assert node_db.vacuum_once(conn) is True
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert conn.execute("SELECT value FROM node_meta WHERE key = ?", (node_db.SECURE_DELETE_VACUUM,)).fetchone()
    assert node_db.vacuum_once(conn) is False  # recorded: never again
