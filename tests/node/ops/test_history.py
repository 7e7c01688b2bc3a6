"""The store epoch follows the history of a PostgreSQL database (node/ops/history.py, docs/decisions.md record 94):
a database whose history moved (marked 'restored' here; a real promotion in tests/node/multiproc/test_lease_fence.py)
gets a new epoch once, at a start or while serving, whichever process asks first; a store that recorded none records
the one it is in; `bbs restore`'s renewal records it too; nothing on SQLite."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import psycopg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from node.app import create_app
from node.federation.routes import SyncSettings
from node.ops import store as ops_store
from node.ops.datadir import initialise
from node.service import Node
from node.store.conn import Conn
from node.store.db import connect_store, read_sync, transaction
from node.web.appkeys import SYNC
from scenarios import pg_cluster as cluster_mod
from sync.puller import Puller
from sync.store import PeerConfig
from tests.conftest import FakeClock
from wire.api import PostEntry


def _meta(url: str, key: str) -> str | None:
    return read_sync(url, lambda conn: ops_store.meta_value(conn, key))


def _mark(url: str, value: str) -> None:
    """The history `bbs restore --by-hand` marks (as `restored`), or a history of another cluster."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE node_meta SET value = %s WHERE key = %s", (value, ops_store.HISTORY_KEY))


def _opened(folder: Path, clock: FakeClock) -> Node:
    node = Node(folder, clock=clock)
    node.open(search_index=False)
    return node


def test_a_store_that_recorded_no_history_records_it_at_its_start_and_keeps_its_epoch(
    pg_folder: tuple[Path, str], clock: FakeClock
) -> None:
    folder, url = pg_folder
    epoch = _meta(url, "epoch")
    assert _meta(url, ops_store.HISTORY_KEY) is None  # a database made before the check
    node = _opened(folder, clock)
    node.close()
    now = read_sync(url, ops_store.cluster_history)
    assert _meta(url, ops_store.HISTORY_KEY) == now
    assert _meta(url, "epoch") == epoch and _meta(url, "previous_epoch") is None


async def test_a_history_that_moved_while_serving_gives_one_new_epoch(
    pg_folder: tuple[Path, str], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    folder, url = pg_folder
    node = _opened(folder, clock)
    try:
        epoch = _meta(url, "epoch")
        told: list[str] = []
        node.epoch_watch.listeners.append(told.append)
        assert await node.epoch_watch.look() is None  # nothing moved: a read, no write
        assert told == [epoch]
        _mark(url, "restored")
        with caplog.at_level(logging.WARNING, logger="bbs.node"):
            renewed = await node.epoch_watch.look()
        assert renewed is not None and renewed.previous_epoch == epoch and renewed.was == "restored"
        assert _meta(url, "epoch") == renewed.epoch != epoch
        assert _meta(url, "previous_epoch") == epoch
        assert _meta(url, "restored_ms") == str(node.now_ms())
        assert _meta(url, ops_store.HISTORY_KEY) == renewed.now == read_sync(url, ops_store.cluster_history)
        assert any("history moved" in r.getMessage() and renewed.epoch in r.getMessage() for r in caplog.records)
        assert told == [epoch, renewed.epoch]  # the listeners hear the new epoch in the same look
        assert await node.epoch_watch.look() is None  # once
        assert _meta(url, "epoch") == renewed.epoch and told == [epoch, renewed.epoch, renewed.epoch]
    finally:
        node.close()


async def test_a_look_that_meets_another_processs_renewal_tells_the_listeners_that_epoch(
    pg_folder: tuple[Path, str], clock: FakeClock
) -> None:
    """The look found the history moved, and another process renewed the epoch before the look's write could begin:
    the write renews nothing, and the listeners hear the other process's epoch, read in that write's transaction,
    not the one the look read before it."""
    folder, url = pg_folder
    node = _opened(folder, clock)
    other = connect_store(url)
    try:
        epoch = _meta(url, "epoch")
        told: list[str] = []
        node.epoch_watch.listeners.append(told.append)
        _mark(url, "restored")
        with transaction(other, immediate=True):  # the other process: its renewal holds the writer lock until it ends
            assert ops_store.follow_history_txn(other, "theirs", 1) is not None
            look = asyncio.ensure_future(node.epoch_watch.look())
            await _until_a_lock_is_waited_for(url)  # the look read (moved, its epoch) and its write now waits
        assert await asyncio.wait_for(look, 30) is None  # renewed by the other, not again
        assert told == ["theirs"] != [epoch]
        assert _meta(url, "epoch") == "theirs" and _meta(url, "previous_epoch") == epoch
    finally:
        other.close()
        node.close()


async def _until_a_lock_is_waited_for(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(600):
            row = conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
                " WHERE NOT l.granted AND d.datname = current_database()"
            ).fetchone()
            if row is not None and row[0] > 0:
                return
            await asyncio.sleep(0.05)
    raise AssertionError("no statement waited for a lock within 30 s")


def test_a_start_on_a_database_of_another_history_renews_the_epoch_before_anything_reads_it(
    pg_folder: tuple[Path, str], clock: FakeClock
) -> None:
    folder, url = pg_folder
    _opened(folder, clock).close()
    epoch = _meta(url, "epoch")
    _mark(url, "7000000000000000001:1")  # another cluster's
    node = _opened(folder, clock)
    try:
        assert _meta(url, "epoch") != epoch and _meta(url, "previous_epoch") == epoch
    finally:
        node.close()
    renewed = _meta(url, "epoch")
    _opened(folder, clock).close()  # the next start finds nothing moved
    assert _meta(url, "epoch") == renewed


def test_two_processes_that_find_the_history_moved_at_once_renew_it_once(pg_folder: tuple[Path, str]) -> None:
    """The second waits for the first's row lock, then finds the history recorded: one new epoch, not two."""
    _, url = pg_folder
    with contextlib.closing(connect_store(url)) as conn, transaction(conn, immediate=True):
        ops_store.follow_history_txn(conn, "e0", 1)  # records the history
    epoch = _meta(url, "epoch")
    _mark(url, "restored")
    second: list[ops_store.Renewed | None] = []
    first_conn, second_conn = connect_store(url), connect_store(url)
    try:
        with transaction(first_conn, immediate=True):
            first = ops_store.follow_history_txn(first_conn, "e1", 1)
            assert first is not None and first.epoch == "e1"

            def other() -> None:
                with transaction(second_conn, immediate=True):
                    second.append(ops_store.follow_history_txn(second_conn, "e2", 2))

            racing = threading.Thread(target=other)
            racing.start()
            racing.join(0.5)
            assert racing.is_alive()  # it waits for the first's row lock
        racing.join(30)
        assert not racing.is_alive() and second == [None]
    finally:
        first_conn.close()
        second_conn.close()
    assert _meta(url, "epoch") == "e1" and _meta(url, "previous_epoch") == epoch


def test_bbs_restores_renewal_records_the_history_so_a_start_renews_nothing_more(pg_folder: tuple[Path, str]) -> None:
    _, url = pg_folder
    _mark(url, "restored")  # e.g. the history the dump's cluster was in

    def renew(conn: Conn) -> ops_store.Renewed | None:
        ops_store.renew_epoch_txn(conn, "r1", "r0", 5)
        return ops_store.follow_history_txn(conn, "r2", 6)

    with contextlib.closing(connect_store(url)) as conn, transaction(conn, immediate=True):
        assert renew(conn) is None
    assert _meta(url, "epoch") == "r1" and _meta(url, "previous_epoch") == "r0"


async def test_the_watch_writes_nothing_on_sqlite(tmp_path: Path, clock: FakeClock) -> None:
    initialise(tmp_path / "node")
    node = _opened(tmp_path / "node", clock)
    try:
        assert await node.epoch_watch.look() is None  # the epoch read, nothing written
        store = node.data.store
        assert read_sync(store, lambda conn: ops_store.follow_history_txn(conn, "x", 1)) is None
        assert read_sync(store, lambda conn: ops_store.meta_value(conn, ops_store.HISTORY_KEY)) is None
    finally:
        node.close()


async def test_a_listener_that_fails_keeps_the_epoch_from_no_other(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    initialise(tmp_path / "node")
    node = _opened(tmp_path / "node", clock)
    try:

        def broken(epoch: str) -> None:
            raise RuntimeError("a listener's bug")

        told: list[str] = []
        node.epoch_watch.listeners[:0] = [broken]  # before every listener the node registered
        node.epoch_watch.listeners.append(told.append)
        with caplog.at_level(logging.ERROR, logger="bbs.node"):
            assert await node.epoch_watch.look() is None
        assert told == [read_sync(node.data.store, lambda conn: ops_store.meta_value(conn, "epoch"))]
        failed = [r for r in caplog.records if "a listener of the store epoch failed" in r.getMessage()]
        assert len(failed) == 1 and failed[0].exc_info is not None
    finally:
        node.close()


# ---- a real failover under a peer: an asynchronous replica promoted without the primary's last records -----------


@dataclass
class _Served:
    """A node served on loopback with its sync endpoints (it pulls only when the test asks)."""

    node: Node
    server: TestServer
    app: web.Application

    @property
    def config(self) -> PeerConfig:
        return PeerConfig(self.node.node_id, str(self.server.make_url("")).rstrip("/"))

    def puller(self, session: aiohttp.ClientSession) -> Puller:
        return Puller(self.app[SYNC].store, self.node.node_keys.signer, session)

    async def post(self, agent_id: str, content: str) -> str:
        entry, _ = await self.node.entries.post(
            agent_id, PostEntry(entry_type="finding", performative="inform", content=content), None
        )
        return entry.record_hash

    async def hashes(self) -> set[str]:
        rows = await self.node.db.read(lambda c: c.execute("SELECT hash FROM records").fetchall())
        return {str(r[0]) for r in rows}


async def _serve(folder: Path) -> _Served:
    node = Node(folder)
    app = create_app(node, sync=SyncSettings(pull=False))
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return _Served(node, server, app)


async def _knows(session: aiohttp.ClientSession, at: _Served, token: str, peer: _Served) -> None:
    async with session.post(
        at.config.url + "/v1/peers",
        json={"url": peer.config.url, "node_id": peer.node.node_id},
        headers={"Authorization": f"Bearer {token}"},
    ) as resp:
        assert resp.status == 201, await resp.text()


async def _caught_up(puller: Puller, peer: PeerConfig) -> bool:
    """Pull from `peer` until it has nothing more; whether a pull was told to reset (an epoch change)."""
    reset = False
    for _ in range(10):
        report = await puller.catch_up(peer)
        reset = reset or report.reset
        if not report.more:
            return reset
    raise AssertionError(f"{peer.url} never caught up")


async def test_a_sqlite_peer_misses_nothing_the_node_writes_after_a_failover_lost_its_last_records(
    pg_cluster: cluster_mod.Cluster, pg_template: str, standby: list[cluster_mod.Cluster], tmp_path: Path
) -> None:
    """Node a on PostgreSQL fails over to a replica that never received its last two records, which peer p (SQLite)
    had pulled. a's next records take the sequence numbers of the lost ones; with the store epoch kept, p's cursor
    would pass over them for ever (its cursor equals a's head). The promotion renews the epoch (a's start finds a new
    timeline), p reconciles and takes them, and a takes its lost records back from p: one digest again."""
    dbname = pg_cluster.create_database(template=pg_template)
    token_a = initialise(tmp_path / "a", pg_cluster.store_url(dbname))
    token_p = initialise(tmp_path / "p")
    assert token_a is not None and token_p is not None
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(pg_cluster.drop_database, dbname)
        session = await stack.enter_async_context(aiohttp.ClientSession())

        async def served(folder: Path) -> _Served:
            node = await _serve(folder)
            stack.push_async_callback(node.server.close)
            return node

        a, p = await served(tmp_path / "a"), await served(tmp_path / "p")
        await _knows(session, a, token_a, p)
        await _knows(session, p, token_p, a)
        writer = (await a.node.agents.create("writer", "Writer")).agent_id
        kept = {await a.post(writer, f"kept {i}") for i in range(2)}
        await _caught_up(p.puller(session), a.config)
        replica = pg_cluster.standby_copy()  # replication stops here
        standby.append(replica)
        lost = {await a.post(writer, f"lost {i}") for i in range(2)}
        await _caught_up(p.puller(session), a.config)
        assert kept | lost <= await p.hashes()
        cursor = await p.app[SYNC].store.cursor(a.node.node_id)
        assert cursor is not None
        await a.server.close()  # a's process stops (closing it again at the end does nothing)
        replica.promote()  # the failover; a's folder then names the replica
        (tmp_path / "a" / "store.url").write_text(replica.store_url(dbname) + "\n", encoding="utf-8")
        a = await served(tmp_path / "a")
        assert not lost & await a.hashes()
        written = {await a.post(writer, f"after {i}") for i in range(2)}
        epoch, head = await a.app[SYNC].store.position()
        assert epoch != cursor.epoch and head <= cursor.seq  # the new records' seqs were the lost ones'
        assert await _caught_up(p.puller(session), a.config)  # told to reset: reconciled
        assert written <= await p.hashes()
        await _caught_up(a.puller(session), p.config)
        assert not lost & await a.hashes()  # p's feed leaves out what a wrote: a reconciliation gives them back
        await a.puller(session).reconcile(p.config)  # what a's puller does at its start, after its first catch-up
        assert lost <= await a.hashes()
        mine, theirs = await a.app[SYNC].store.digest(), await p.app[SYNC].store.digest()
        assert (mine.count, mine.sha256) == (theirs.count, theirs.sha256)
