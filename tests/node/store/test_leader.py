"""node/store/leader.py on a real PostgreSQL database: the lease taken once, renewed, given up and taken over with a
new epoch; the fence a write job checks inside its transaction (node/store/db.py `leader_fence`), refusing only the
fenced job of a batch; and on SQLite a process that always leads, without a fence and without touching the row."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from node.errors import NotLeader
from node.store import leader as leader_mod
from node.store.conn import Conn
from node.store.db import Database, leader_fence
from node.store.leader import Fence, Leadership
from scenarios import pg_cluster as cluster_mod
from tests.node.store.test_db import Held


@pytest.fixture
def store_url(pg_cluster: cluster_mod.Cluster, pg_template: str) -> Iterator[str]:
    """The `postgresql://` URL of a new migrated database (what `Database` takes), dropped after the test."""
    name = pg_cluster.create_database(template=pg_template)
    yield pg_cluster.store_url(name)
    pg_cluster.drop_database(name)


def lease(url: str) -> tuple[str | None, int, bool]:
    """(process_id, epoch, whether it is live on the server's clock)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            f"SELECT process_id, epoch, expires_ms > {leader_mod.NOW_MS} FROM node_leader WHERE id = 1"
        ).fetchone()
    assert row is not None
    return row[0], int(row[1]), bool(row[2])


def mark(conn: Conn, key: str) -> str:
    conn.execute("INSERT INTO node_meta (key, value) VALUES (?, 'x')", (key,))
    return key


async def test_the_lease_is_taken_once_renewed_given_up_and_taken_with_a_new_epoch(pg_migrated_url: str) -> None:
    first, second = Leadership(pg_migrated_url, "a" * 16), Leadership(pg_migrated_url, "b" * 16)
    await first.start()
    await second.start()
    try:
        assert first.leading and not second.leading
        assert first.term is not None and first.term.fence == Fence("a" * 16, 1)
        assert lease(pg_migrated_url) == ("a" * 16, 1, True)
        await asyncio.sleep(leader_mod.TTL_MS / 1000 + leader_mod.RENEW_S)  # renewed past a lease's life
        assert first.leading and not second.leading and lease(pg_migrated_url) == ("a" * 16, 1, True)
        term = first.term
        await first.stop()  # given up at once
        assert term.ended.is_set() and not first.leading
        assert lease(pg_migrated_url)[:2] in {(None, 1), ("b" * 16, 2)}  # free, or b took it already
        taken = await asyncio.wait_for(second.next_term(), timeout=5)
        assert taken.fence == Fence("b" * 16, 2) and second.takeovers == 1 and second.last_epoch == 2
    finally:
        await first.stop()
        await second.stop()


async def test_a_fenced_write_is_refused_once_the_epoch_moved_and_alone_in_its_batch(store_url: str) -> None:
    pg_migrated_url = store_url
    db = Database(store_url)
    db.open()
    try:
        leadership = Leadership(pg_migrated_url, "c" * 16)
        await leadership.start()
        term = leadership.term
        assert term is not None and term.fence is not None
        with leader_fence(term.fence.check):
            assert await db.write(lambda c: mark(c, "while-leading")) == "while-leading"
        leadership.pause()
        with psycopg.connect(pg_migrated_url) as conn:  # another process took over
            conn.execute("UPDATE node_leader SET process_id = 'elsewhere', epoch = epoch + 1")
        async with Held(db) as held:  # one batch: a fenced job between two others
            with leader_fence(term.fence.check):
                fenced = asyncio.ensure_future(db.write(lambda c: mark(c, "after-take-over")))
            others = [asyncio.ensure_future(db.write(functools.partial(mark, key=k))) for k in ("before", "after")]
            await held.queued(3)
        with pytest.raises(NotLeader, match="stored epoch is 2, held by process elsewhere"):
            await fenced
        assert [await o for o in others] == ["before", "after"]  # request-driven writes: no fence, kept
        keys = await db.read(lambda c: [r[0] for r in c.execute("SELECT key FROM node_meta").fetchall()])
        assert {"while-leading", "before", "after"} <= set(keys) and "after-take-over" not in keys
        await leadership.stop()  # gives up nothing of another's
        assert lease(pg_migrated_url)[:2] == ("elsewhere", 2)
    finally:
        db.close()


@pytest.mark.sqlite_only(reason="a SQLite file is served by one process, which always leads")
async def test_on_sqlite_the_one_process_leads_without_a_fence(tmp_path: Path) -> None:
    db = Database(tmp_path / "bbs.db")
    db.open()
    try:
        leadership = Leadership(None, "d" * 16)
        await leadership.start()
        assert leadership.leading and leadership.term is not None and leadership.term.fence is None
        assert leadership.last_epoch == 0 and leadership.takeovers == 1
        row = await db.read(lambda c: tuple(c.execute("SELECT process_id, epoch, expires_ms FROM node_leader")))
        assert [tuple(r) for r in row] == [(None, 0, 0)]  # the row as the migration left it
        await leadership.stop()
        assert not leadership.leading
    finally:
        db.close()
