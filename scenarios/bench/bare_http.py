"""Bare aiohttp servers: the floors a node's figures are read against, with no middleware and no node code.

- `GET /healthz` answers a small JSON body: what any aiohttp route costs on this machine before a node adds
  anything (the search benchmark's floor).
- `POST /v1/entries` (when started with a database file) is the least a one-process aiohttp node with one
  writer thread must do per posted entry: decode the JSON body, build the canonical record, sign it with
  Ed25519 and hash it, hand it to a writer thread that commits what has queued in one transaction (the raw
  baseline's rows: records, entries, entry_tags; the node's schema and pragmas), and
  answer 201 with the stored id, hash and record. No authentication, validation, record check, access log,
  idempotency, links or notifications (the ingest benchmark's floor).

Each runs in its own process as the node does (`python -m scenarios.bench.bare_http PORT [DATABASE [flock]]`), and
is timed with the same client and requests as the node. `BareServer(database, processes=N)` serves one port from N
such processes (SO_REUSEPORT), each with its own writer on the one database file: the floor of several processes of
one node on SQLite, their transactions ordered by SQLite's own write lock (BEGIN IMMEDIATE waiting in its busy
handler), or with `flock=True` by an exclusive `flock` on a file beside the database taken around each transaction,
which wakes the next writer as soon as the lock is let go instead of at the busy handler's next sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import msgspec
from aiohttp import web

from identity import canonical, keys, records
from node.cli import event_loop
from node.store import db
from scenarios.bench import corpus
from scenarios.bench.harness import free_port, stop_process, wait_healthy
from scenarios.bench.raw import sqlite_rows

BODY = b'{"status":"ok"}'
WRITER: web.AppKey[BareWriter] = web.AppKey("writer")
SIGNER: web.AppKey[keys.SigningKey] = web.AppKey("signer")
_decode_body = msgspec.json.Decoder(dict[str, Any]).decode


async def healthz(request: web.Request) -> web.Response:
    return web.Response(body=BODY, content_type="application/json")


class _Post(msgspec.Struct):
    record: dict[str, Any]
    record_hash: str
    future: asyncio.Future[int]
    loop: asyncio.AbstractEventLoop


class BareWriter:
    """One thread and one connection: each transaction commits every post queued when it began."""

    def __init__(self, path: Path, *, flock: bool = False) -> None:
        self._posts: queue.SimpleQueue[_Post] = queue.SimpleQueue()
        self._conn = db.connect(path)
        lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)  # kept open for the process's life
        with _exclusive(lock):  # several processes may start on one new file: one migrates it
            db.migrate(self._conn)
        self._lock = lock if flock else None
        threading.Thread(target=self._run, name="bare-writer", daemon=True).start()

    def submit(self, post: _Post) -> None:
        self._posts.put(post)

    def _run(self) -> None:
        while True:
            batch = [self._posts.get()]
            while not self._posts.empty():
                batch.append(self._posts.get_nowait())
            answers: list[tuple[asyncio.Future[int], int | Exception]]
            try:
                if self._lock is None:
                    first = self._commit(batch)
                else:
                    with _exclusive(self._lock):
                        first = self._commit(batch)
                answers = [(post.future, first + i) for i, post in enumerate(batch)]
            except Exception as exc:  # answered as a failure (500): the benchmark stops rather than hangs
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                answers = [(post.future, exc) for post in batch]
            batch[0].loop.call_soon_threadsafe(_settle, answers)

    def _commit(self, batch: list[_Post]) -> int:
        """Store the batch in one transaction (the raw baseline's rows, so both store the same); its first seq."""
        rows = sqlite_rows([(post.record, post.record_hash) for post in batch])
        self._conn.execute("BEGIN IMMEDIATE")
        last = db.insert_rows(
            self._conn,
            "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, scope, origin, received_ms,"
            " body)",
            [log_row for log_row, _, _ in rows],
        ).last_rowid
        first = last - len(batch) + 1
        db.insert_rows(
            self._conn,
            "INSERT INTO entries (id, record_hash, content_fingerprint, author_id, created_at, created_ms,"
            " entry_type, performative, content, confidence, tags, directed_to, metadata, truth_state, authority,"
            " scope, signature)",
            [(first + i, *entry_row) for i, (_, entry_row, _) in enumerate(rows)],
        )
        db.insert_rows(
            self._conn,
            "INSERT INTO entry_tags (entry_id, tag)",
            [(first + i, tag) for i, (_, _, tags) in enumerate(rows) for tag in tags],
        )
        self._conn.execute("COMMIT")
        return first


@contextlib.contextmanager
def _exclusive(fd: int) -> Iterator[None]:
    """An exclusive `flock` on `fd` for the `with` block."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _settle(answers: list[tuple[asyncio.Future[int], int | Exception]]) -> None:
    for future, outcome in answers:
        if future.cancelled():
            continue
        if isinstance(outcome, Exception):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


async def post_entry(request: web.Request) -> web.Response:
    body = _decode_body(await request.read())
    signer = request.app[SIGNER]
    unsigned = corpus.entry_body(
        signer.did, canonical.format_created_at(datetime.now(UTC)), body["content"], sorted(set(body["tags"])), []
    )
    unsigned.update(entry_type=body["entry_type"], performative=body["performative"], confidence=body["confidence"])
    record = records.sign(unsigned, signer)
    record_hash = records.compute_hash(record)
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    request.app[WRITER].submit(_Post(record, record_hash, future, loop))
    seq = await future
    answer = {"id": seq, "record_hash": record_hash, "record": record}
    return web.Response(body=msgspec.json.encode(answer), status=201, content_type="application/json")


def app(database: Path | None = None, *, flock: bool = False) -> web.Application:
    """The whole application: `GET /healthz`, and `POST /v1/entries` writing to `database` when one is given (each
    transaction inside an exclusive `flock` of the file beside it when `flock`)."""
    application = web.Application()
    application.router.add_get("/healthz", healthz)
    if database is not None:
        application[WRITER] = BareWriter(database, flock=flock)
        application[SIGNER] = keys.SigningKey.generate()
        application.router.add_post("/v1/entries", post_entry)
    return application


class BareServer:
    """This module's server on a free loopback port (with the ingest route if `database`): `processes` subprocesses
    sharing the port, each with its own writer on `database` (their transactions inside an exclusive `flock` of the
    file beside it when `flock`)."""

    def __init__(self, database: Path | None = None, *, processes: int = 1, flock: bool = False) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.database = database
        self.processes = processes
        self.flock = flock
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        """The first (or only) process."""
        return self.procs[0] if self.procs else None

    def __enter__(self) -> BareServer:
        args = [sys.executable, "-m", "scenarios.bench.bare_http", str(self.port)]
        if self.database is not None:
            args += [str(self.database)] + (["flock"] if self.flock else [])
        try:
            for _ in range(self.processes):
                self.procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL))
                wait_healthy(self.procs[-1], self.url, 30.0, "the bare aiohttp server")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        for proc in self.procs:
            stop_process(proc)

    def stored(self) -> int:
        """Entries the ingest route committed (read from the file; call after the load, while it runs)."""
        assert self.database is not None
        conn = db.connect(self.database, readonly=True)
        try:
            return int(conn.execute("SELECT count(*) FROM entries").fetchone()[0])
        finally:
            conn.close()


if __name__ == "__main__":
    database = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    # on the event loop `bbs serve` runs on, so the floor and the node differ by node code alone; reuse_port lets
    # several of these processes serve one port (one process is unchanged by it)
    web.run_app(
        app(database, flock=sys.argv[3:] == ["flock"]),
        loop=event_loop(),
        host="127.0.0.1",
        port=int(sys.argv[1]),
        access_log=None,
        print=None,
        reuse_port=True,
    )
