"""The store epoch follows the history of a PostgreSQL database (node/ops/history.py, docs/decisions.md record 94):
a database whose history moved (marked 'restored' here; a real promotion in tests/node/multiproc/test_lease_fence.py)
gets a new epoch once, at a start or while serving, whichever process asks first; a store that recorded none records
the one it is in; `bbs restore`'s renewal records it too; nothing on SQLite."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from node.ops import history
from node.ops import store as ops_store
from node.ops.datadir import initialise
from node.service import Node
from node.store.conn import Conn
from node.store.db import connect_store, read_sync, transaction
from scenarios import pg_cluster as cluster_mod
from tests.conftest import FakeClock


@pytest.fixture
def pg_folder(pg_cluster: cluster_mod.Cluster, pg_template: str, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A node's folder initialised on a new PostgreSQL database (a copy of the migrated template), and its URL."""
    name = pg_cluster.create_database(template=pg_template)
    url = pg_cluster.store_url(name)
    initialise(tmp_path / "node", url)
    yield tmp_path / "node", url
    pg_cluster.drop_database(name)


def _meta(url: str, key: str) -> str | None:
    return read_sync(url, lambda conn: ops_store.meta_value(conn, key))


def _mark(url: str, value: str) -> None:
    """What the operator's UPDATE does after a restore by hand (docs/operations.md), or a history of another cluster."""
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
        assert await history.follow(node.db, node.now_ms) is None  # nothing moved: a read, no write
        _mark(url, "restored")
        with caplog.at_level(logging.WARNING, logger="bbs.node"):
            renewed = await history.follow(node.db, node.now_ms)
        assert renewed is not None and renewed.previous_epoch == epoch and renewed.was == "restored"
        assert _meta(url, "epoch") == renewed.epoch != epoch
        assert _meta(url, "previous_epoch") == epoch
        assert _meta(url, "restored_ms") == str(node.now_ms())
        assert _meta(url, ops_store.HISTORY_KEY) == renewed.now == read_sync(url, ops_store.cluster_history)
        assert any("history moved" in r.getMessage() and renewed.epoch in r.getMessage() for r in caplog.records)
        assert await history.follow(node.db, node.now_ms) is None  # once
        assert _meta(url, "epoch") == renewed.epoch
    finally:
        node.close()


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


async def test_nothing_is_read_or_written_on_sqlite(tmp_path: Path, clock: FakeClock) -> None:
    initialise(tmp_path / "node")
    node = _opened(tmp_path / "node", clock)
    try:
        assert await history.follow(node.db, node.now_ms) is None
        store = node.data.store
        assert read_sync(store, lambda conn: ops_store.follow_history_txn(conn, "x", 1)) is None
        assert read_sync(store, lambda conn: ops_store.meta_value(conn, ops_store.HISTORY_KEY)) is None
    finally:
        node.close()
