"""The node's database (SQLite, or PostgreSQL at a URL): one writer thread with group commit, reader threads.

Every write is a function run on the writer thread inside a transaction. Jobs
that queue up while a commit is in flight are committed together, each inside
its own SAVEPOINT so one failing job rolls back alone (a transaction of one job
needs none: it is rolled back whole). Under load the writer waits briefly for
more jobs before it begins (GATHER_*), never for a lone one. A job's future
resolves only after COMMIT returns: an acknowledged write is a committed write.

Jobs of one `Mergeable` kind that are queued next to each other run as one call
(`write_merged`): concurrent single posts become one set-based append. If that
call fails, it is rolled back and each of its jobs runs alone, so an error
still reaches only the request that caused it. Every statement a writer job runs
costs a GIL hand-off (docs/architecture.md), so jobs keep their statements few
and set-based; `WriterStats` times them (bbs_writer_* on /metrics).

Reads run whole functions on reader threads, each with its own connection, so
many reads proceed in parallel with the writer (WAL). A read marked `quick` (a
bounded page of rows) is first tried on the event loop's own connection with a
budget of SQLite time; one that runs longer is stopped and run on a reader
thread instead (see `Database.read`).

Over PostgreSQL (a `postgresql://` URL: docs/decisions.md records 76 and 80) the same machinery runs on
node/store/pg_conn.py's `Conn`: a write transaction takes `pg_advisory_xact_lock(WRITER_LOCK)` after BEGIN (one
writer per node, even across processes, as BEGIN IMMEDIATE is on SQLite), readers are read-only connections whose
transactions are REPEATABLE READ (one snapshot per read, as SQLite's), and a quick read's budget is the server's
`SET LOCAL statement_timeout`. psycopg is imported when a PostgreSQL connection is first opened (node/store/pg_conn.py):
a node on SQLite never imports it, which would cost every `bbs` command and start about 0.15 s of CPU.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import hashlib
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from node.errors import BBSError, StorageFull, StoreMoved, Unavailable
from node.errors import SchemaTooNew as SchemaTooNew  # where the CLI and the tests import it from
from node.store import commit_listener, pg_schema
from node.store import conn as neutral
from node.store.conn import POSTGRESQL, Conn, engine_of
from node.store.write_clock import WriteClock

if TYPE_CHECKING:
    from node.store.projections import Log

T = TypeVar("T")
ItemT = TypeVar("ItemT")  # an item of a mergeable write
log = logging.getLogger("bbs.db")
MAX_BATCH = 256
# Group commit under load: when the writer finds a few jobs queued behind the first (so requests are arriving) it
# waits up to GATHER_GAP_S for each next one, for at most GATHER_SHARE of its last COMMIT's time (an fsync costs
# the same for 5 jobs as for 50) and GATHER_MAX_S, while the batch holds fewer than GATHER_UNDER jobs. A lone
# job never waits: an idle node answers as fast as before (docs/performance.md, "Group commit").
GATHER_UNDER = 32
GATHER_GAP_S = 0.0005
GATHER_SHARE = 0.5
GATHER_MAX_S = 0.002
# Compiled statements each connection keeps (sqlite3's LRU; its default is 128). The writer's also holds
# insert_rows' shapes of up to EXACT_ROWS_UP_TO rows for the few tables a post writes, so a merged run of any size
# finds its statements compiled.
READER_CACHED_STATEMENTS = 128
WRITER_CACHED_STATEMENTS = 512
# How long a quick read may hold the event loop before its SQL is stopped and it moves to a reader thread, and
# how often (in SQLite virtual machine instructions, about 0.1 ms) the budget is looked at. 0.5 ms moved most
# rare-term searches in a served node (a query right after the loop wakes runs 3-4x slower than in a hot loop);
# 2 ms keeps them inline (docs/performance.md; measured when SQLite FTS5 still answered searches).
INLINE_BUDGET_S = 0.002
_BUDGET_CHECK_OPS = 1000
# The page cache of a connection that writes (SQLite's default is 2 MiB). An insert touches a leaf page of
# every index; past a few thousand entries those no longer fit in 2 MiB, and each commit
# read pages back from the file (3 reads per single post). SQLite allocates the cache as pages are used, so a
# small database costs no more. 64 MiB: +18% raw batched inserts, +13% single posts (docs/performance.md).
WRITER_CACHE_KIB = 65536
# PostgreSQL (record 80): the key of the transaction-level advisory lock every write transaction takes after BEGIN
# (pg_schema.MIGRATION_LOCK is ...0001), and what a write transaction and a reader connection begin with. Under the
# lock a write transaction moves the node-wide write clock (migration 0056, record 90), in the same round trip: its
# RETURNING tells the writer whether another process committed since its own last transaction (`Database`).
WRITER_LOCK = 0x6262_7300_0000_0002
# Its NOTIFY wakes the other processes of the node when it commits (node/store/commit_listener.py, record 85); the
# write clock's UPDATE comes last, its row the script's last result (pg_conn.PgCursor.last_result).
# A database the node moved out of to SQLite carries MOVED_KEY in node_meta (record 95): the clock's UPDATE then moves
# no row, and the transaction is refused (StoreMoved). Read after the lock, so a write that waited for the move's
# commit sees its mark.
MOVED_KEY = "moved_to_sqlite"
PG_BEGIN_WRITE = (
    f"BEGIN; SELECT pg_advisory_xact_lock({WRITER_LOCK}); {commit_listener.NOTIFY_SQL}; "
    "UPDATE write_clock SET n = n + 1 WHERE id = 1"
    f" AND NOT EXISTS (SELECT 1 FROM node_meta WHERE key = '{MOVED_KEY}') RETURNING n"
)
PG_READER_SETTINGS = "SET default_transaction_read_only = on; SET default_transaction_isolation = 'repeatable read'"
# A quick read on PostgreSQL runs every statement with parameters on its generic plan: the server, left to choose,
# planned the entry's and the links' statements anew at each run (1.1 to 2.2 ms against 0.45 to 0.55 ms on their
# generic plans; docs/decisions.md record 80). One that runs past the budget is stopped, and the read runs again on a
# reader thread, which plans as the server chooses.
QUICK_PLANS = "plan_cache_mode = force_generic_plan"

# SQLSTATEs of a quick read stopped by its budget: statement_timeout (57014) or a lock it would wait for (55P03).
_PG_STOPPED = {neutral.QUERY_CANCELED, neutral.LOCK_NOT_AVAILABLE}
PG_URL_SCHEMES = ("postgresql://", "postgres://")
# The fence of the leader work this task runs (docs/decisions.md record 87): a check every write job submitted from
# the task (and from the tasks it starts, which copy its context) runs first inside its write transaction, after the
# writer's lock; raising refuses that job alone. None (request-driven work, SQLite): no check.
WRITE_FENCE: contextvars.ContextVar[Callable[[Conn], None] | None] = contextvars.ContextVar("write_fence", default=None)


@contextlib.contextmanager
def leader_fence(check: Callable[[Conn], None] | None) -> Iterator[None]:
    """`with leader_fence(fence.check):` fences every write submitted in the block, and from every task created in
    it (node/store/leader.py `Fence.check`: the stored epoch must still be the term's)."""
    token = WRITE_FENCE.set(check)
    try:
        yield
    finally:
        WRITE_FENCE.reset(token)


def is_postgresql_url(store: Path | str) -> bool:
    """Whether `store` names a PostgreSQL database (a `postgresql://` or `postgres://` URL), not a SQLite file."""
    return isinstance(store, str) and store.startswith(PG_URL_SCHEMES)


def connect_store(store: Path | str, *, readonly: bool = False, log: Log | None = None) -> Any:
    """A node connection to `store`: a SQLite file's (`connect`) or a PostgreSQL URL's (pg_conn.connect; readonly:
    its transactions are read-only). Typed Any: callers hand it to store functions, which take a `Conn`, and to
    `transaction`/`migrate_store`, which take either engine's."""
    if not is_postgresql_url(store):
        return connect(store, readonly=readonly, log=log)
    from node.store import pg_conn  # psycopg is imported by a node on PostgreSQL only (module docstring)

    conn = pg_conn.connect(str(store), log=log)
    if readonly:
        conn.execute(PG_READER_SETTINGS)
    return conn


def migrate_store(conn: Any) -> int:
    """Apply pending migrations on either engine's connection (`migrate`, or pg_schema.migrate's
    node/store/migrations_pg); return the schema version."""
    if engine_of(conn) == POSTGRESQL:
        return pg_schema.migrate(conn)
    return migrate(conn)


def migrations() -> list[tuple[int, str, str]]:
    """Numbered migration scripts shipped in node/store/migrations, as (number, name, sql), in order."""
    return pg_schema.scripts_in("node.store.migrations")


class Connection(sqlite3.Connection):
    """A connection of the node: it carries the log its writes project through (`projections.Log`, the one
    node/features.py builds from the features), so a write job appends with `projections.append_many(conn, ...)`
    and never imports the feature list. `connect` sets it; None: the connection can neither append nor rebuild."""

    log: Log | None = None


def connect(
    path: Path | str, *, readonly: bool = False, factory: type[Connection] = Connection, log: Log | None = None
) -> sqlite3.Connection:
    """Open a connection with the node's pragmas (autocommit mode: transactions are explicit), carrying `log`."""
    conn = sqlite3.connect(
        str(path),
        isolation_level=None,
        check_same_thread=False,
        timeout=30.0,
        factory=factory,
        cached_statements=READER_CACHED_STATEMENTS if readonly else WRITER_CACHED_STATEMENTS,
    )
    assert isinstance(conn, Connection)
    conn.log = log
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout = 30000")
    conn.execute("PRAGMA foreign_keys = ON")
    if readonly:
        conn.execute("PRAGMA query_only = ON")
    else:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        # deleted content is overwritten with zeros, not left in free pages (a redacted body: node/redaction/)
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
    return conn


class TransactionLost(Exception):
    """A savepoint could not be rolled back: SQLite had already ended the whole transaction (a full disk, an I/O
    error). Nothing of the transaction can be kept; `error` is what the block under the savepoint raised."""

    def __init__(self, error: Exception) -> None:
        super().__init__(f"the transaction ended under a savepoint: {error!r}")
        self.error = error


def transaction(conn: sqlite3.Connection, *, immediate: bool = False, commit: bool = True) -> _Transaction:
    """`with transaction(conn):` runs the block in one transaction: COMMIT when it ends, ROLLBACK when it raises
    or when the COMMIT fails (the error goes up either way).

    `immediate` takes the write lock at BEGIN (BEGIN IMMEDIATE), so a writer waits there for another process's
    write rather than failing later on upgrading a read lock. `commit=False` ends with ROLLBACK even when the
    block succeeds: a read snapshot, or a trial whose writes must not be kept. The connection must be in
    autocommit mode (`connect` opens it so).
    """
    if engine_of(conn) == POSTGRESQL:  # one writer per node: the advisory lock (PostgreSQL has no BEGIN IMMEDIATE)
        return _Transaction(conn, PG_BEGIN_WRITE if immediate else "BEGIN", commit)
    return _Transaction(conn, "BEGIN IMMEDIATE" if immediate else "BEGIN", commit)


def savepoint(conn: Conn, name: str) -> _Savepoint:
    """`with savepoint(conn, name):` inside a transaction: when the block raises, its changes alone are rolled
    back and the error goes up; the transaction goes on. If the whole transaction ended meanwhile (SQLite ends it
    on a full disk, for one), the savepoint is gone: `TransactionLost` goes up instead, carrying the error (or
    the failed RELEASE's), and nothing can be kept.
    """
    return _Savepoint(conn, name)


class _Transaction:
    # A class rather than @contextmanager: the writer opens one per batch, and a generator costs more.
    __slots__ = ("begin", "begun", "commit", "conn")

    def __init__(self, conn: sqlite3.Connection, begin: str, commit: bool) -> None:
        self.conn, self.begin, self.commit = conn, begin, commit
        self.begun: Any = None  # PostgreSQL's write transaction: the write clock's row, as its BEGIN moved it

    def __enter__(self) -> sqlite3.Connection:
        outer = self.conn.in_transaction  # a caller's transaction, which a failed BEGIN must not end
        try:
            begun: Any = self.conn.execute(self.begin)  # PostgreSQL's: a PgCursor
            if self.begin is PG_BEGIN_WRITE:  # the clock's row, kept for the writer (record 90)
                self.begun = begun.last_result()
                if self.begun is None:  # no clock moved: the database is marked as moved to SQLite
                    raise StoreMoved("the node moved to SQLite; this database takes no write (bbs migrate-store)")
        except BaseException as exc:  # a BEGIN script that failed after its BEGIN (the lock's wait cut short) too
            if not outer:
                _rollback(self.conn, exc)
            raise
        return self.conn

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        conn = self.conn
        if exc is not None:
            _rollback(conn, exc)
        elif not self.commit:
            if conn.in_transaction:  # an interrupted statement may have ended it already
                conn.execute("ROLLBACK")
        else:
            try:
                _check_not_aborted(conn)
                conn.execute("COMMIT")
            except BaseException as failed:  # e.g. SQLITE_BUSY leaves the transaction open: end it
                _rollback(conn, failed)
                raise


def _lost(conn: Any) -> bool:
    """Whether `conn` is a PostgreSQL connection found closed (its server restarted, its backend ended): a reader
    then opens a new one; the read that found it so failed with the error."""
    return engine_of(conn) == POSTGRESQL and bool(conn.raw.closed)


def _check_not_aborted(conn: Any) -> None:
    """Raise if PostgreSQL has aborted the transaction (an error the block caught and went on from): its COMMIT
    would roll back without an error, so a write would be acknowledged that was never kept. SQLite: nothing."""
    if engine_of(conn) == POSTGRESQL and conn.aborted():
        raise neutral.OperationalError(
            "a statement failed inside the transaction and PostgreSQL aborted it (its error was caught): nothing of"
            " it is kept"
        )


def _rollback(conn: sqlite3.Connection, cause: BaseException) -> None:
    """End a failed transaction if SQLite has not ended it already; a failing ROLLBACK is logged, so the error
    that caused it is the one that goes up."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except neutral.ConnectionLost as lost:  # the server rolls back what its connection held
            log.warning("rollback failed after %r: the connection was lost (%s)", cause, " ".join(str(lost).split()))
        except sqlite3.Error:
            log.exception("rollback failed after %r", cause)


class _Savepoint:
    __slots__ = ("conn", "name")

    def __init__(self, conn: Conn, name: str) -> None:
        self.conn, self.name = conn, name

    def __enter__(self) -> Conn:
        self.conn.execute("SAVEPOINT " + self.name)
        return self.conn

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            try:
                _check_not_aborted(self.conn)  # a caught error on PostgreSQL: fail this block alone, as raised
            except Exception as aborted:
                self.__exit__(type(aborted), aborted, None)
                raise
            try:
                self.conn.execute("RELEASE " + self.name)
            except sqlite3.Error as gone:  # the block itself ended the transaction (or released this savepoint)
                raise TransactionLost(gone) from gone
            return
        if isinstance(exc, TransactionLost):  # lost under an inner savepoint: this one is gone too
            return
        try:
            self.conn.execute("ROLLBACK TO " + self.name)
            self.conn.execute("RELEASE " + self.name)
        except sqlite3.Error:
            if isinstance(exc, Exception):  # a KeyboardInterrupt or SystemExit goes up as it is
                raise TransactionLost(exc) from exc


def migrate(conn: sqlite3.Connection) -> int:
    """Apply pending migrations, each in its own transaction with its number (all of them in one on a new database);
    return the schema version."""
    scripts = migrations()
    # 0014 computes each entry's version (the SHA-256 of its body) in SQL
    conn.create_function("bbs_sha256_hex", 1, lambda body: hashlib.sha256(body).hexdigest(), deterministic=True)
    latest = scripts[-1][0] if scripts else 0
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    if current > latest:
        raise SchemaTooNew(
            f"database schema version {current} is newer than this software supports ({latest}); upgrade agent-bbs"
        )
    if current == 0 and scripts:
        with transaction(conn, immediate=True):
            # a new database takes every script in one transaction (one commit, not one per script): it holds
            # nothing to keep between them, and a crash leaves it new; unless another process began on it meanwhile
            current = conn.execute("PRAGMA user_version").fetchone()[0]
            if current == 0:
                for _number, _name, sql in scripts:
                    _apply(conn, sql)
                conn.execute(f"PRAGMA user_version = {latest}")
                return latest
    for number, _name, sql in scripts:
        if number <= current:
            continue
        with transaction(conn, immediate=True):
            # another process (a CLI command beside a starting node) may have applied it while we waited
            if conn.execute("PRAGMA user_version").fetchone()[0] >= number:
                continue  # nothing was written: ending with COMMIT keeps nothing
            _apply(conn, sql)
            conn.execute(f"PRAGMA user_version = {number}")
        current = number
    return current


def _apply(conn: sqlite3.Connection, sql: str) -> None:
    """Run one migration script's statements, in the caller's transaction."""
    for statement in _split_sql(sql):
        conn.execute(statement)


SECURE_DELETE_VACUUM = "secure_delete_vacuum_ms"  # node_meta: when the one VACUUM after secure_delete ran


def vacuum_once(conn: sqlite3.Connection) -> bool:
    """Run one VACUUM the first time a database is opened with `secure_delete` on, and record it in `node_meta`:
    `secure_delete` zeroes only what is freed after it is switched on, and free pages of older deletes (migrations
    that rewrote tables, evicted versions) still hold old text; VACUUM rewrites the file without them. Whether it ran
    now (docs/operations.md, "Redaction")."""
    if conn.execute("SELECT 1 FROM node_meta WHERE key = ?", (SECURE_DELETE_VACUUM,)).fetchone() is not None:
        return False
    try:
        conn.execute("VACUUM")
    except sqlite3.OperationalError as exc:  # another process writes (a CLI command beside a starting node)
        log.warning("the one VACUUM after enabling secure_delete waits for the next start: %s", exc)
        return False
    with transaction(conn, immediate=True):
        record_vacuumed_txn(conn)
    return True


def record_vacuumed_txn(conn: sqlite3.Connection) -> None:
    """Record the one VACUUM after secure_delete as done (`vacuum_once` then skips it): after it ran, or at the
    creation of a database whose every write had secure_delete on (`connect`), which freed no byte unzeroed."""
    conn.execute(
        "INSERT INTO node_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
        (SECURE_DELETE_VACUUM, str(int(time.time() * 1000))),
    )


def _split_sql(script: str) -> list[str]:
    """Split a script into statements (trigger bodies kept whole) using sqlite3.complete_statement."""
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements


class Mergeable(Generic[ItemT, T]):
    """A kind of write whose queued jobs the writer may run together.

    `run(conn, items)` must return one result per item, in order, and either succeed for all of them or
    raise: the writer then rolls the call back and runs each item alone, `run(conn, [item])`.
    """

    def __init__(self, run: Callable[[sqlite3.Connection, list[ItemT]], list[T]]) -> None:
        self.run = run


class _Job:
    __slots__ = ("fence", "fn", "future", "item", "kind", "loop")

    def __init__(
        self,
        fn: Callable[[sqlite3.Connection], Any] | None,
        future: asyncio.Future[Any],
        loop: Any,
        kind: Mergeable[Any, Any] | None = None,
        item: Any = None,
    ) -> None:
        self.fn, self.future, self.loop, self.kind, self.item = fn, future, loop, kind, item
        self.fence = WRITE_FENCE.get()  # the submitting task's: checked first, inside the transaction

    def run_alone(self, conn: sqlite3.Connection) -> Any:
        if self.fence is not None:
            self.fence(conn)
        if self.kind is None:
            assert self.fn is not None
            return self.fn(conn)
        (result,) = self.kind.run(conn, [self.item])
        return result


@dataclass
class WriterStats:
    """What the writer thread has done since the node started (written by that thread only; read as a snapshot
    by /metrics). `transactions` / `jobs` is the group commit at work; `busy_seconds` over wall time is how
    close the single writer is to being the bottleneck."""

    transactions: int = 0  # batches attempted (committed or rolled back as a whole)
    rolled_back: int = 0  # batches that failed as a whole (e.g. disk full): none of their jobs was acknowledged
    jobs: int = 0  # write jobs run, each an awaited `write` or `write_merged`
    busy_seconds: float = 0.0  # time from BEGIN to the outcome of the batch, COMMIT (fsync) included
    # Where busy_seconds goes (docs/performance.md, "The writer's time"): `cpu_seconds` is the writer thread's
    # own CPU in those batches; `statement_seconds` the wall time inside `execute` calls (SQLite, and waiting
    # for the GIL after each statement) and `statement_cpu_seconds` the CPU among it; `commit_seconds` the
    # COMMIT (fsync, and the GIL after it). busy - statement time is Python in the transaction; wall - CPU is
    # waiting (for the GIL, and for the disk in COMMIT).
    cpu_seconds: float = 0.0
    statements: int = 0
    statement_seconds: float = 0.0
    statement_cpu_seconds: float = 0.0
    commit_seconds: float = 0.0
    commit_cpu_seconds: float = 0.0

    def count(self, wall: float, cpu: float) -> None:
        """Count one statement that started at `wall` (`time.perf_counter`) and `cpu` (`time.thread_time`)."""
        self.statements += 1
        self.statement_cpu_seconds += time.thread_time() - cpu
        self.statement_seconds += time.perf_counter() - wall


class TimedConnection(Connection):
    """The writer's connection: `execute` and `executemany` add their wall and CPU time to `stats` (two clock
    reads per statement, against tens of microseconds a statement). Only the writer thread uses it."""

    stats = WriterStats()  # Database.open sets its own; what `connect` runs before that is counted here

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        stats, wall, cpu = self.stats, time.perf_counter(), time.thread_time()
        try:
            return super().execute(sql, parameters)
        finally:
            stats.count(wall, cpu)

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        stats, wall, cpu = self.stats, time.perf_counter(), time.thread_time()
        try:
            return super().executemany(sql, parameters)
        finally:
            stats.count(wall, cpu)


@dataclass
class ReadStats:
    """Quick reads (`Database.read(..., quick=True)`) answered on the event loop, and those moved to a reader
    thread because their SQL ran over the inline budget or found the database busy. Counted by the thread that
    ran the read: a node has one event loop; with several, a count may miss an increment (they are metrics)."""

    inline: int = 0
    moved: int = 0


class _InlineBudget:
    """The event loop thread's reader connection and the deadline its progress handler enforces."""

    __slots__ = ("conn", "deadline", "interrupted")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.deadline = float("inf")
        self.interrupted = False

    def start(self, seconds: float) -> None:
        self.deadline = time.perf_counter() + seconds
        self.interrupted = False

    def check(self) -> int:
        """SQLite's progress handler: non-zero stops the running statement (SQLITE_INTERRUPT).

        A signal handler that raises runs here if its signal arrives during the statement, and sqlite3 prints and
        drops what it raised: the read then fails with OperationalError('interrupted'). `bbs serve` takes its
        signals through the event loop (`add_signal_handler`), so none is raised here.
        """
        if time.perf_counter() > self.deadline:
            self.interrupted = True
            return 1
        return 0

    def stop(self) -> bool:
        """End the budget (a second call changes nothing); whether it ran out."""
        self.deadline = float("inf")
        return self.interrupted


class Database:
    """The node's database: `await write(fn)` and `await read(fn)` run `fn(conn)` on the right thread."""

    def __init__(
        self, path: Path | str, *, readers: int = 4, inline_budget_s: float = INLINE_BUDGET_S, log: Log | None = None
    ) -> None:
        self.path = Path(path)  # a SQLite file; see pg_url
        self.pg_url = str(path) if is_postgresql_url(path) else None  # or a PostgreSQL database (record 80)
        self.log = log  # what the connections it opens project through (`Connection.log`)
        self.inline_budget_s = inline_budget_s  # 0: every read runs on a reader thread
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()  # C-implemented: no lock dance per job
        self._writer: threading.Thread | None = None
        self._local = threading.local()
        self._reader_conns: list[Any] = []  # sqlite3 connections, or PostgreSQL ones
        self._reader_lock = threading.Lock()
        self._readers = readers
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=readers, thread_name_prefix="bbs-read")
        self._closed = False
        self.schema_version = 0
        self.stats = WriterStats()
        self._last_commit_s = 0.0  # the writer's last COMMIT took this long (what `_gather` may wait)
        self.read_stats = ReadStats()
        # Called on the writer thread after each commit (push, the indexer...; on PostgreSQL by `wakeups`, a LISTEN
        # thread, for other processes' too): each quick and thread-safe. Listeners add and remove themselves.
        self.after_commit: list[Callable[[], None]] = []
        self.wakeups = commit_listener.Wakeups(self.wake_waiters)
        self.clock = WriteClock()  # PostgreSQL: another process's commits revalidate caches (record 90)

    def open(self) -> None:
        """Migrate and start the writer thread (synchronous; call before serving)."""
        if self._closed:  # opened again after close(): a new reader pool
            self._pool = concurrent.futures.ThreadPoolExecutor(self._readers, thread_name_prefix="bbs-read")
            self._closed = False
        conn: Any
        if self.pg_url is not None:
            conn = _pg_writer(self.pg_url, self.log, self.stats)
            self.wakeups.own_pid = conn.raw.info.backend_pid
            self.schema_version = migrate_store(conn)
        else:
            conn = connect(self.path, factory=TimedConnection, log=self.log)
            assert isinstance(conn, TimedConnection)
            conn.stats = self.stats
            self.schema_version = migrate(conn)
            vacuum_once(conn)
        self._writer = threading.Thread(target=self._write_loop, args=(conn,), name="bbs-writer", daemon=True)
        self._writer.start()

    @property
    def is_open(self) -> bool:
        """Whether the database is open: its writer thread runs (between `open` and `close`)."""
        return self._writer is not None

    def wake_waiters(self) -> None:
        """Call every `after_commit` listener: after this process's writer commits, and on PostgreSQL when another
        process commits (`wakeups`: the one fan-out for both). A listener's failure is logged, not raised."""
        for after in tuple(self.after_commit):
            try:
                after()
            except Exception:  # a listener's bug must not stop the writer (or the LISTEN thread)
                log.exception("the after-commit listener failed")

    def close(self) -> None:
        """Finish queued writes, stop the writer and close every connection."""
        self.wakeups.stop()
        if self._writer is not None:
            self._jobs.put(None)
            self._writer.join()
            self._writer = None
        self._pool.shutdown(wait=True)
        with self._reader_lock:
            for conn in self._reader_conns:
                conn.close()
            self._reader_conns.clear()
        self._local = threading.local()  # every thread's closed connection is forgotten: a reopen starts anew
        self._closed = True

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` in a write transaction; return its result once committed."""
        if self._writer is None:
            raise Unavailable("the database is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put(_Job(fn, future, loop))
        return await future

    async def write_merged(self, kind: Mergeable[ItemT, T], item: ItemT) -> T:
        """Like `write`, for one item of a mergeable kind: jobs of that kind queued together run in one call."""
        if self._writer is None:
            raise Unavailable("the database is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put(_Job(None, future, loop, kind, item))
        return await future

    async def read(self, fn: Callable[[sqlite3.Connection], T], *, quick: bool = False) -> T:
        """Run `fn` on a reader connection (a consistent snapshot for its duration).

        `quick` is for a read whose work besides SQL is bounded (a page of rows, a few look-ups): it runs on
        the event loop's own connection, skipping the hand-off to a reader thread and back (two thread
        wake-ups, which cost more than a selective query), unless its SQL takes longer than the inline budget.
        Then SQLite stops it, its outcome is discarded, and it runs again on a reader thread, so `fn` must be safe
        to run twice (a read is) and must return values, not a cursor or generator that reads later. The budget
        bounds what SQLite does step by step: work done inside one step (a bare `count(*)` of a table) or outside
        SQLite (a search index's query) is not interrupted, so a caller that can issue such work decides `quick`
        per call (see `Reads.search`).
        """
        if self._closed:
            raise Unavailable("the database is closed")
        if quick and self.inline_budget_s > 0:
            finished, value = self._read_inline(fn) if self.pg_url is None else self._read_inline_pg(fn)
            if finished:
                return value
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._run_read, fn)

    def _reader(self, slot: str = "conn") -> Any:
        """This thread's read-only connection kept in `slot` (a reader thread's, or the loop's inline PostgreSQL
        one), opened anew when missing or lost."""
        conn = getattr(self._local, slot, None)
        if conn is None or _lost(conn):
            conn = connect_store(self.pg_url or self.path, readonly=True, log=self.log)
            setattr(self._local, slot, conn)
            with self._reader_lock:
                self._reader_conns.append(conn)
        return conn

    def _run_read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with transaction(self._reader()) as conn:
            return fn(conn)

    def _read_inline(self, fn: Callable[[sqlite3.Connection], T]) -> tuple[bool, Any]:
        """(True, result) of `fn` run on this thread within the budget; (False, None) if it ran over."""
        budget: _InlineBudget | None = getattr(self._local, "budget", None)
        if budget is None:
            conn = connect(self.path, readonly=True, log=self.log)
            conn.execute("PRAGMA busy_timeout = 0")  # never sleep on the loop; a busy read moves to a thread
            with self._reader_lock:
                self._reader_conns.append(conn)
            budget = self._local.budget = _InlineBudget(conn)
            conn.set_progress_handler(budget.check, _BUDGET_CHECK_OPS)
        conn = budget.conn
        budget.start(self.inline_budget_s)
        try:
            # A read changed nothing: it ends with ROLLBACK, which also closes an interrupted statement.
            with transaction(conn, commit=False):
                try:
                    value = fn(conn)
                finally:
                    budget.stop()  # before the transaction ends: the progress handler can stop a ROLLBACK too
        except Exception as exc:
            code = getattr(exc, "sqlite_errorcode", 0)
            busy = isinstance(exc, sqlite3.OperationalError) and code & 0xFF == sqlite3.SQLITE_BUSY
            # An interruption fn turned into another error moves the read too.
            if not (budget.stop() or busy):
                raise
            self.read_stats.moved += 1
            return False, None
        if budget.interrupted:  # fn caught the interruption itself and answered anyway: that answer may be partial
            self.read_stats.moved += 1
            return False, None
        self.read_stats.inline += 1
        return True, value

    def _read_inline_pg(self, fn: Callable[[sqlite3.Connection], T]) -> tuple[bool, Any]:
        """`_read_inline` on PostgreSQL: `fn` on this thread's read-only connection, in a transaction whose every
        statement the server stops past the budget (`SET LOCAL statement_timeout`, whole ms; a lock it would wait for
        counts), on generic plans (`QUICK_PLANS`). (False, None) when one was stopped: it runs on a reader thread."""
        conn = self._reader("pg_inline")
        timeout_ms = max(1, round(self.inline_budget_s * 1000))
        try:
            conn.execute(f"BEGIN; SET LOCAL statement_timeout = {timeout_ms}; SET LOCAL {QUICK_PLANS}")
            try:
                value = fn(conn)
                caught = conn.aborted()  # fn caught its stop
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        except neutral.DatabaseError as exc:
            if exc.sqlstate not in _PG_STOPPED and exc.sqlstate != neutral.IN_FAILED_TRANSACTION:  # after a stop
                raise
            self.read_stats.moved += 1
            return False, None
        if caught:  # its answer may be partial
            self.read_stats.moved += 1
            return False, None
        self.read_stats.inline += 1
        return True, value

    def _write_loop(self, conn: sqlite3.Connection) -> None:
        stop = False
        while not stop:
            first = self._jobs.get()
            if first is None:
                break
            batch = [first]
            stop = self._take_queued(batch)
            if not stop and 1 < len(batch) < GATHER_UNDER:
                stop = self._gather(batch, min(GATHER_MAX_S, self._last_commit_s * GATHER_SHARE))
            if _lost(conn):
                conn = self._reopen_writer(conn)
            self._run_batch(conn, batch)
        conn.close()

    def _reopen_writer(self, lost: Any) -> Any:
        """A new writer connection for one PostgreSQL lost (the server restarted, the backend was ended): the batch
        that found it lost failed whole, nothing of it committed. If the server cannot be reached, `lost` again:
        this batch fails on it as well, and the next one tries anew."""
        try:
            conn = _pg_writer(self.pg_url or "", self.log, self.stats)
        except Exception as exc:
            log.error("the PostgreSQL writer connection cannot be reopened: %s", exc)
            return lost
        self.wakeups.own_pid = conn.raw.info.backend_pid
        log.warning("the PostgreSQL writer connection was lost; reopened")
        return conn

    def _gather(self, batch: list[_Job], budget_s: float) -> bool:
        """Wait up to `budget_s` for more jobs while they keep arriving (GATHER_*); whether to stop."""
        deadline = time.perf_counter() + budget_s
        while len(batch) < GATHER_UNDER:
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            try:
                job = self._jobs.get(timeout=min(GATHER_GAP_S, left))
            except queue.Empty:
                return False
            if job is None:
                return True
            batch.append(job)
            if self._take_queued(batch):
                return True
        return False

    def _take_queued(self, batch: list[_Job]) -> bool:
        """Add what is queued to `batch` (up to MAX_BATCH jobs); whether the writer was asked to stop."""
        while len(batch) < MAX_BATCH:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return False
            if job is None:
                return True
            batch.append(job)
        return False

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Job]) -> None:
        started, cpu_started = time.perf_counter(), time.thread_time()
        runs = _runs(batch)
        try:
            outcomes = None
            if len(runs) == 1:  # one job, or one run of a mergeable kind: no savepoint needed (see _run_bare)
                try:
                    outcomes = self._commit(conn, lambda: _run_bare(conn, batch))
                except _BareFailed as failed:  # rolled back
                    if len(batch) == 1:
                        outcomes = [(False, _storage_error(failed.error))]
                    elif not isinstance(failed.error, BBSError):  # a refusal needs no line; a bug might
                        log.info("a merged run of %d writes failed (%r); running each alone", len(batch), failed.error)
                    runs = [[job] for job in batch]
            if outcomes is None:
                outcomes = self._commit(conn, lambda: _run_guarded(conn, runs))
        except BaseException as exc:  # nothing of this batch is committed, so no job may report success
            if not isinstance(exc, Exception):  # e.g. SystemExit raised by a job: the writer must live on
                log.critical("a write job raised %r; its batch of %d jobs is rolled back", exc, len(batch))
            outcomes = [(False, _storage_error(exc))] * len(batch)
            self.stats.rolled_back += 1
        if self.after_commit and any(ok for ok, _ in outcomes):  # something was committed
            self.wake_waiters()
        stats = self.stats  # counted before the answers go out, so an awaiting caller sees its batch counted
        stats.transactions += 1
        stats.jobs += len(batch)
        stats.busy_seconds += time.perf_counter() - started
        stats.cpu_seconds += time.thread_time() - cpu_started
        # One wake-up per event loop for the whole batch rather than one per job.
        by_loop: dict[Any, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
        for job, (ok, value) in zip(batch, outcomes, strict=True):
            by_loop.setdefault(job.loop, []).append((job.future, ok, value))
        for loop, settled in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_all, settled)
            except RuntimeError:  # that loop has closed: nobody awaits these answers (the writes stand)
                log.debug("%d write answers dropped: their event loop is closed", len(settled))

    def _commit(self, conn: sqlite3.Connection, body: Callable[[], list[tuple[bool, Any]]]) -> list[tuple[bool, Any]]:
        """`body()` in one write transaction, committed; its COMMIT timed (WriterStats). On PostgreSQL the
        transaction first looks at the write clock (node/store/write_clock.py)."""
        clock = None
        tx = transaction(conn, immediate=True)
        with tx:
            if self.pg_url is not None:
                clock = self.clock.observe(conn, tx.begun)
            outcomes = body()
            body_done, body_cpu = time.perf_counter(), time.thread_time()
        if clock is not None:
            self.clock.committed(clock)
        self._last_commit_s = time.perf_counter() - body_done
        self.stats.commit_seconds += self._last_commit_s
        self.stats.commit_cpu_seconds += time.thread_time() - body_cpu
        return outcomes


def _pg_writer(url: str, log: Log | None, stats: WriterStats) -> Any:
    """A new PostgreSQL writer connection, its statements timed into `stats` (as `TimedConnection`'s)."""
    from node.store import pg_conn

    return pg_conn.TimedPgConn(pg_conn.connect(url).raw, log, stats)


class _BareFailed(Exception):
    """The job (or merged run) a transaction held alone failed: the transaction is rolled back."""

    def __init__(self, error: Exception) -> None:
        super().__init__(repr(error))
        self.error = error


def _run_bare(conn: sqlite3.Connection, batch: list[_Job]) -> list[tuple[bool, Any]]:
    """A batch of one job, or of one run of a mergeable kind, run without a SAVEPOINT (two statements fewer):
    when it fails, `_BareFailed` rolls the whole transaction back, and a merged run then runs each job alone."""
    try:
        if len(batch) == 1:
            return [(True, batch[0].run_alone(conn))]
        kind = batch[0].kind
        assert kind is not None
        results = kind.run(conn, [job.item for job in batch])
        if len(results) != len(batch):
            raise RuntimeError(f"a merged write returned {len(results)} results for {len(batch)} items")
    except Exception as exc:
        raise _BareFailed(exc) from exc
    return [(True, result) for result in results]


def _run_guarded(conn: sqlite3.Connection, runs: list[list[_Job]]) -> list[tuple[bool, Any]]:
    """Runs of jobs in one transaction, each job (or merged run) in its own SAVEPOINT."""
    outcomes: list[tuple[bool, Any]] = []
    for group in runs:
        if len(group) > 1:
            merged = _run_merged(conn, group)
            if merged is not None:
                outcomes.extend(merged)
                continue
        outcomes.extend(_run_alone(conn, job) for job in group)
    return outcomes


def _runs(batch: list[_Job]) -> list[list[_Job]]:
    """The batch in order, split into runs: neighbouring jobs of one mergeable kind together, others alone (a fenced
    job too: its fence is checked in `run_alone`)."""
    runs: list[list[_Job]] = []
    for job in batch:
        if (
            job.kind is not None
            and job.fence is None
            and runs
            and runs[-1][0].kind is job.kind
            and not runs[-1][0].fence
        ):
            runs[-1].append(job)
        else:
            runs.append([job])
    return runs


def _run_alone(conn: sqlite3.Connection, job: _Job) -> tuple[bool, Any]:
    """Run one job inside its own SAVEPOINT: its failure rolls back only its own changes."""
    try:
        with savepoint(conn, "job"):
            result = job.run_alone(conn)
    except TransactionLost as lost:
        raise lost.error from None  # SQLite ended the whole transaction (e.g. disk full): fail the batch
    except Exception as exc:
        return False, _storage_error(exc)
    return True, result


def _run_merged(conn: sqlite3.Connection, group: list[_Job]) -> list[tuple[bool, Any]] | None:
    """Run a run of mergeable jobs as one call; None (and nothing changed) if it failed."""
    kind = group[0].kind
    assert kind is not None
    try:
        with savepoint(conn, "merged"):
            results = kind.run(conn, [job.item for job in group])
            if len(results) != len(group):
                raise RuntimeError(f"a merged write returned {len(results)} results for {len(group)} items")
    except TransactionLost as lost:
        raise lost.error from None
    except Exception as exc:
        if not isinstance(exc, BBSError):  # a refusal needs no line; anything else might be a bug worth seeing
            log.info("a merged run of %d writes failed (%r); running each alone", len(group), exc)
        return None
    return [(True, result) for result in results]


def _storage_error(exc: BaseException) -> Exception:
    """A full database or disk as the client-facing StorageFull; any other Exception unchanged."""
    if not isinstance(exc, Exception):  # never hand a SystemExit or KeyboardInterrupt to the event loop
        return Unavailable(f"the write was aborted ({type(exc).__name__})")
    full = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "database or disk is full" in str(exc)
    full = full or getattr(exc, "sqlstate", None) == "53100"  # PostgreSQL's disk_full
    if isinstance(exc, sqlite3.Error) and full:
        return StorageFull("the database is full; nothing was written")
    return exc


def _settle_all(settled: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in settled:
        if future.cancelled():
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


# Rows per statement of insert_rows at most (a power of two): a prepared statement's program grows with its rows,
# and the statement cache keeps one of each size.
MAX_ROWS_PER_INSERT = 512
# Up to this many rows go in one statement of exactly that many (a merged run of single posts: one statement per
# table, not one per set bit of its length); more go in power-of-two statements first. The writer's statement
# cache holds every shape (WRITER_CACHED_STATEMENTS).
EXACT_ROWS_UP_TO = 64


class Inserted(NamedTuple):
    """What `insert_rows` did: rows changed, and SQLite's last_insert_rowid() after it (the rowid of the last row
    inserted; what it was before when the statements inserted none, 0 when there were no rows)."""

    changed: int
    last_rowid: int


def insert_rows(conn: Conn, head: str, rows: Sequence[Sequence[Any]], tail: str = "") -> Inserted:
    """`{head} VALUES (?, ...), ... {tail}` for every row, in as few statements as SQLite's bound-parameter limit
    allows.

    One multi-row statement steps once (an executemany steps, handing the GIL back and waiting for it, once per
    row), and values stay bound parameters (SQLite's JSON functions cut text at a NUL). Statements hold a
    power-of-two number of rows, or at most EXACT_ROWS_UP_TO rows exactly (what is left, or the whole of a merged run
    of single posts), so a table has at most about 70 statement shapes, each compiled once and cached.
    """
    if not rows:
        return Inserted(0, 0)
    width = len(rows[0])
    # SQLite's bound-parameter limit is the connection's; another engine's connection gets the portable floor
    bound = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) if isinstance(conn, sqlite3.Connection) else 32766
    most = 1 << (min(MAX_ROWS_PER_INSERT, bound // width).bit_length() - 1)
    placeholder = "(" + ",".join("?" * width) + ")"
    exact = min(EXACT_ROWS_UP_TO, most)
    changed, start, last_rowid = 0, 0, 0
    while start < len(rows):
        left = len(rows) - start
        n = left if left <= exact else min(most, 1 << (left.bit_length() - 1))
        params = [value for row in rows[start : start + n] for value in row]
        cursor = conn.execute(f"{head} VALUES {','.join([placeholder] * n)}{tail}", params)
        changed, last_rowid, start = changed + cursor.rowcount, cursor.lastrowid or 0, start + n
    return Inserted(changed, last_rowid)


# Bound parameters one PostgreSQL statement may carry (its protocol counts them in 16 bits).
PG_MAX_PARAMETERS = 65535


def insert_returning(conn: Conn, head: str, rows: Sequence[Sequence[Any]], tail: str) -> list[Any]:
    """`{head} VALUES (?, ...), ... {tail}`, `tail` ending in a RETURNING clause, for every row; the rows returned,
    statement after statement. As few statements as PostgreSQL's bound-parameter limit allows (the PostgreSQL
    store's `insert_rows`: a round trip per statement, so one for any run a writer batch holds)."""
    if not rows:
        return []
    width = len(rows[0])
    most = max(1, PG_MAX_PARAMETERS // width)
    placeholder = "(" + ",".join("?" * width) + ")"
    returned: list[Any] = []
    for start in range(0, len(rows), most):
        chunk = rows[start : start + most]
        params = [value for row in chunk for value in row]
        returned += conn.execute(f"{head} VALUES {','.join([placeholder] * len(chunk))}{tail}", params).fetchall()
    return returned


def write_sync(path: Path | str, fn: Callable[[sqlite3.Connection], T], *, log: Log | None = None) -> T:
    """Run one write transaction from a separate process (the CLI), safe while a node serves the file; the
    connection carries `log` (needed to append or rebuild: node.features.LOG)."""
    conn = connect_store(path, log=log)
    try:
        migrate_store(conn)
        with transaction(conn, immediate=True):
            return fn(conn)
    finally:
        conn.close()


def read_sync(path: Path | str, fn: Callable[[sqlite3.Connection], T], *, log: Log | None = None) -> T:
    """Run one read from a separate process (the CLI), on a connection carrying `log` (as `write_sync`)."""
    conn = connect_store(path, readonly=True, log=log)
    try:
        return fn(conn)
    finally:
        conn.close()
