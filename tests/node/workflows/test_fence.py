"""The lease fence over real nodes: a restored database refuses grants until every grant it may have lost ended.

Restarts are real (a Node closed and opened again on the same folder); time moves on the fake clock.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from node.app import create_app
from node.ops import backup, pg_tools
from node.ops import store as ops_store
from node.ops.datadir import DataDir
from node.service import Node
from node.store.db import connect_store, read_sync, transaction
from node.workflows.fence import (
    FENCE_NAME,
    IDENTITY_KEY,
    LONGEST_GRANT_MS,
    FenceFile,
    LeaseFence,
    read_fence,
    write_fence,
)
from node.workflows.service import Workflows
from node.workflows.store import fence as fence_store
from tests.conftest import FakeClock
from tests.node.workflows.helpers import WF

Serve = Callable[[], Awaitable[tuple[Node, TestClient]]]


@pytest.fixture
async def serve(
    aiohttp_client: Callable[..., Awaitable[TestClient]], data_dir: tuple[Path, str], clock: FakeClock
) -> AsyncIterator[Serve]:
    """Start the node of `data_dir` (again): a new Node and server on the same folder, the last one closed first."""
    running: list[tuple[Node, TestClient]] = []

    async def start() -> tuple[Node, TestClient]:
        if running:
            old, old_client = running.pop()
            await old_client.close()
            if old.db.is_open:
                old.close()
        n = Node(data_dir[0], clock=clock)
        n.open()
        c = await aiohttp_client(create_app(n))
        running.append((n, c))
        return n, c

    yield start
    for n, c in running:  # as `stop`: the server first
        await c.close()
        if n.db.is_open:
            n.close()


async def stop(n: Node, c: TestClient) -> None:
    """Stop a node as `bbs serve` does: its server first (the app's background work ends), then the node. Closing
    the node under a running app left that work running on a closed node while the test replaced its database."""
    await c.close()
    n.close()


async def _agent(n: Node, name: str) -> dict[str, str]:
    created = await n.agents.create(name, name.title())
    return {"Authorization": f"Bearer {created.api_key}"}


async def _lease(c: TestClient, headers: dict[str, str], key: str, seconds: int = 60) -> tuple[int, dict, str | None]:
    resp = await c.post(f"{WF}/tasks/{key}/lease", json={"seconds": seconds}, headers=headers)
    return resp.status, await resp.json(), resp.headers.get("Retry-After")


def _copy_db(src: Path, dest: Path) -> None:
    """A copy of the node's database as it is now: SQLite's file, or a pg_dump of its PostgreSQL database."""
    url = DataDir(src).store_url
    if url is None:
        backup.snapshot_db(src / "bbs.db", dest)
    else:
        pg_tools.dump(url, dest)


def _put_back(old: Path, root: Path) -> None:
    """An old database put back by hand while the node is stopped: the file copied over bbs.db, or on PostgreSQL
    the old dump restored over the node's database (the lease fence stays in the data folder either way)."""
    url = DataDir(root).store_url
    if url is not None:
        pg_tools.restore(old, url, ops_store.CLEAR_SCHEMA_PG)
        return
    for suffix in ("-wal", "-shm"):
        (root / f"bbs.db{suffix}").unlink(missing_ok=True)
    shutil.copyfile(old, root / "bbs.db")


async def test_a_grant_is_in_the_fence_before_it_is_acknowledged(serve: Serve, data_dir: tuple[Path, str]) -> None:
    n, c = await serve()
    a = await _agent(n, "a")
    await declare_raw(c, a, "job")
    status, task, _ = await _lease(c, a, "job", seconds=120)
    assert status == 201
    fence = read_fence(data_dir[0] / FENCE_NAME)
    assert fence is not None and fence.node_id == n.node_id
    expires = await n.db.read(
        lambda conn: conn.execute("SELECT max(expires_ms) FROM task_events WHERE event = 'lease'").fetchone()[0]
    )
    assert fence.expires_ms == expires
    assert task["lease"]["expires_at"]


async def declare_raw(c: TestClient, headers: dict[str, str], key: str) -> None:
    resp = await c.post(f"{WF}/tasks", json={"key": key}, headers=headers)
    assert resp.status in (200, 201), await resp.text()


async def test_old_database_copied_back_refuses_grants_until_the_fence_passes(
    serve: Serve, data_dir: tuple[Path, str], tmp_path: Path, clock: FakeClock
) -> None:
    root = data_dir[0]
    n, c = await serve()
    a, b = await _agent(n, "a"), await _agent(n, "b")
    await declare_raw(c, a, "job")
    await declare_raw(c, a, "other")
    _copy_db(root, tmp_path / "old.db")  # the backup: before the grant
    assert (await _lease(c, a, "job", seconds=300))[0] == 201
    clock.advance(10)
    _, c = await serve()  # a restart alone changes nothing: the database holds the grant
    assert (await _lease(c, a, "other", seconds=30))[0] == 201

    n, c = await serve()
    await stop(n, c)
    _put_back(tmp_path / "old.db", root)
    n, c = await serve()
    status, problem, retry = await _lease(c, b, "job")
    assert status == 503 and problem["code"] == "lease_authority_restored", problem
    assert retry is not None and 280 <= int(retry) <= 291
    # every task waits, not only the one whose grant was lost: the node cannot know which it lost
    status, problem, _ = await _lease(c, b, "other")
    assert status == 503 and problem["code"] == "lease_authority_restored"
    clock.advance(291)
    status, task, _ = await _lease(c, b, "job")
    assert status == 201 and task["lease"]["holder"] != a


async def test_the_wait_survives_a_restart_and_ends_at_the_fence(
    serve: Serve, data_dir: tuple[Path, str], tmp_path: Path, clock: FakeClock
) -> None:
    root = data_dir[0]
    n, c = await serve()
    a = await _agent(n, "a")
    await declare_raw(c, a, "job")
    _copy_db(root, tmp_path / "old.db")
    assert (await _lease(c, a, "job", seconds=100))[0] == 201
    await stop(n, c)
    _put_back(tmp_path / "old.db", root)
    _, c = await serve()
    assert (await _lease(c, a, "job"))[0] == 503
    clock.advance(50)
    _, c = await serve()  # counted from the grant's expiry, not from this start
    status, _, retry = await _lease(c, a, "job")
    assert status == 503 and retry is not None and int(retry) <= 51
    clock.advance(51)
    assert (await _lease(c, a, "job"))[0] == 201


async def test_bbs_restore_keeps_the_fence_of_the_folder_it_replaces(
    serve: Serve, data_dir: tuple[Path, str], tmp_path: Path, clock: FakeClock
) -> None:
    root = data_dir[0]
    n, c = await serve()
    a = await _agent(n, "a")
    await declare_raw(c, a, "job")
    backup.backup(root, tmp_path / "before.tar")
    assert (await _lease(c, a, "job", seconds=120))[0] == 201
    await stop(n, c)
    result = backup.restore(tmp_path / "before.tar", root, force=True)
    assert result.replaced is not None
    _, c = await serve()
    status, problem, retry = await _lease(c, a, "job")
    assert status == 503 and problem["code"] == "lease_authority_restored"
    assert retry is not None and int(retry) <= 121
    fence = read_fence(root / FENCE_NAME)
    assert fence is not None and fence.epoch == result.epoch  # rewritten for the restored store


async def test_a_lost_fence_file_waits_the_longest_lease(
    serve: Serve, data_dir: tuple[Path, str], clock: FakeClock
) -> None:
    root = data_dir[0]
    n, c = await serve()
    a = await _agent(n, "a")
    await declare_raw(c, a, "job")
    assert (await _lease(c, a, "job", seconds=30))[0] == 201
    await stop(n, c)
    (root / FENCE_NAME).unlink()  # e.g. the database alone copied into a new folder
    _, c = await serve()
    status, problem, retry = await _lease(c, a, "job")
    assert status == 503 and problem["code"] == "lease_authority_restored"
    assert retry is not None and int(retry) == LONGEST_GRANT_MS // 1000
    clock.advance(LONGEST_GRANT_MS / 1000)
    assert (await _lease(c, a, "job"))[0] == 201


async def test_an_unreadable_fence_file_counts_as_lost(serve: Serve, data_dir: tuple[Path, str]) -> None:
    root = data_dir[0]
    n, c = await serve()
    a = await _agent(n, "a")
    await declare_raw(c, a, "job")
    assert (await _lease(c, a, "job", seconds=30))[0] == 201
    await stop(n, c)
    (root / FENCE_NAME).write_text("{not json")
    _, c = await serve()
    assert (await _lease(c, a, "job"))[0] == 503


async def test_a_new_node_and_an_upgraded_one_grant_at_once(serve: Serve, data_dir: tuple[Path, str]) -> None:
    """No fence file and no fence in the database: a node from before the fence; its database is all there is."""
    n, c = await serve()
    a = await _agent(n, "a")
    await declare_raw(c, a, "job")
    assert (await _lease(c, a, "job", seconds=30))[0] == 201
    await n.db.write(lambda conn: conn.execute("DELETE FROM node_meta WHERE key = 'lease_fence_id'"))
    (data_dir[0] / FENCE_NAME).unlink()
    _, c = await serve()
    status, _, _ = await _lease(c, a, "job", seconds=60)
    assert status == 200  # extended


async def test_refusals_on_a_restored_node_are_not_grants(
    serve: Serve, data_dir: tuple[Path, str], tmp_path: Path
) -> None:
    """A forwarded task (homed elsewhere) is not this node's to fence; an unknown task is still 404."""
    root = data_dir[0]
    n, c = await serve()
    a = await _agent(n, "a")
    await declare_raw(c, a, "job")
    _copy_db(root, tmp_path / "old.db")
    assert (await _lease(c, a, "job", seconds=60))[0] == 201
    await stop(n, c)
    _put_back(tmp_path / "old.db", root)
    _, c = await serve()
    status, problem, _ = await _lease(c, a, "nothing-here")
    assert status == 404 and problem["code"] == "task_not_found"


def test_fence_file_round_trip_and_advance_only_grows(tmp_path: Path, node: Node) -> None:
    path = tmp_path / FENCE_NAME
    write_fence(path, FenceFile("did:key:z6Mkx", "f" * 32, "e" * 32, 5))
    assert read_fence(path) == FenceFile("did:key:z6Mkx", "f" * 32, "e" * 32, 5)
    assert json.loads(path.read_text())["expires_ms"] == 5
    assert not path.with_name(path.name + ".tmp").exists()
    fence = LeaseFence(tmp_path / "other.json", node.node_id)
    assert not fence.loaded
    fence.fence = FenceFile(node.node_id, "f" * 32, "", 100)
    fence.advance(50)
    assert read_fence(tmp_path / "other.json") is None  # nothing to record: an earlier expiry
    fence.advance(200)
    got = read_fence(tmp_path / "other.json")
    assert got is not None and got.expires_ms == 200


def test_advance_counts_every_grant_after_the_baseline(tmp_path: Path, node: Node) -> None:
    fence = LeaseFence(tmp_path / FENCE_NAME, node.node_id)
    fence.fence = FenceFile(node.node_id, "f" * 32, "", 100, since_ms=40, grants=0)
    fence.advance(50)  # a shorter lease than the latest: not a new expiry, but one more grant
    got = read_fence(tmp_path / FENCE_NAME)
    assert got is not None and (got.expires_ms, got.since_ms, got.grants) == (100, 40, 1)
    fence.advance(30)  # ends before the baseline: not counted (only a file from before the count has one ahead)
    fence.advance(200)
    got = read_fence(tmp_path / FENCE_NAME)
    assert got is not None and (got.expires_ms, got.grants) == (200, 2)
    (tmp_path / FENCE_NAME).write_text(json.dumps(got.__dict__ | {"grants": "2"}))
    assert read_fence(tmp_path / FENCE_NAME) is None  # a malformed count is an unreadable fence: lost


async def test_a_lost_shorter_grant_is_found_by_the_count_though_the_latest_expiry_survived(
    serve: Serve, data_dir: tuple[Path, str], tmp_path: Path, clock: FakeClock
) -> None:
    root = data_dir[0]
    n, c = await serve()
    a, b = await _agent(n, "a"), await _agent(n, "b")
    for key in ("job", "other", "third"):
        await declare_raw(c, a, key)
    assert (await _lease(c, a, "job", seconds=600))[0] == 201
    _copy_db(root, tmp_path / "old.db")  # holds the grant with the latest expiry
    assert (await _lease(c, a, "other", seconds=60))[0] == 201  # shorter: the fence's expiry does not move
    await stop(n, c)
    _put_back(tmp_path / "old.db", root)
    _, c = await serve()
    status, problem, retry = await _lease(c, b, "other")
    assert status == 503 and problem["code"] == "lease_authority_restored", problem
    assert retry is not None and 590 <= int(retry) <= 601
    clock.advance(601)
    assert (await _lease(c, b, "other"))[0] == 201
    clock.advance(1)
    n, c = await serve()  # the wait ended by time and the count started afresh: no second wait
    assert (await _lease(c, b, "third"))[0] == 201
    fence = read_fence(root / FENCE_NAME)
    assert fence is not None and fence.grants == 2 and fence.since_ms is not None


async def test_a_grant_written_to_the_fence_but_never_committed_costs_one_wait(
    serve: Serve, data_dir: tuple[Path, str], clock: FakeClock
) -> None:
    root = data_dir[0]
    n, c = await serve()
    a = await _agent(n, "a")
    await declare_raw(c, a, "job")
    assert (await _lease(c, a, "job", seconds=60))[0] == 201
    await stop(n, c)
    fence = read_fence(root / FENCE_NAME)
    assert fence is not None and fence.grants == 1
    write_fence(root / FENCE_NAME, replace(fence, grants=2))  # a crash between the fence write and the commit
    _, c = await serve()
    assert (await _lease(c, a, "job"))[0] == 503
    clock.advance(61)
    assert (await _lease(c, a, "job"))[0] == 201
    _, c = await serve()
    assert (await _lease(c, a, "job"))[0] == 200  # the holder extends: no wait after the count started afresh


async def test_a_fence_file_from_before_the_count_takes_its_expiry_as_the_baseline(
    serve: Serve, data_dir: tuple[Path, str], clock: FakeClock
) -> None:
    root = data_dir[0]
    n, c = await serve()
    a = await _agent(n, "a")
    await declare_raw(c, a, "job")
    assert (await _lease(c, a, "job", seconds=60))[0] == 201
    await stop(n, c)
    old = read_fence(root / FENCE_NAME)
    assert old is not None
    write_fence(root / FENCE_NAME, replace(old, since_ms=None, grants=None))
    _, c = await serve()
    assert (await _lease(c, a, "job", seconds=120))[0] == 200
    fence = read_fence(root / FENCE_NAME)
    assert fence is not None and fence.since_ms == old.expires_ms and fence.grants == 1


def test_workflows_knows_its_fence(node: Node, data_dir: tuple[Path, str]) -> None:
    assert isinstance(node.workflows, Workflows)
    assert node.workflows.fence.path == data_dir[0] / FENCE_NAME


async def test_while_restored_no_completion_or_status_change_can_contradict_a_lost_grant(
    serve: Serve, data_dir: tuple[Path, str], tmp_path: Path, clock: FakeClock
) -> None:
    root = data_dir[0]
    n, c = await serve()
    a, b = await _agent(n, "a"), await _agent(n, "b")
    await declare_raw(c, a, "job")
    _copy_db(root, tmp_path / "old.db")
    assert (await _lease(c, a, "job", seconds=60))[0] == 201  # lost with the restore: a still holds it
    await stop(n, c)
    _put_back(tmp_path / "old.db", root)
    _, c = await serve()
    for path, body in (
        ("/tasks/job/complete", {}),
        ("/tasks", {"key": "job", "status": "cancelled"}),
        ("/tasks", {"key": "job", "checkpoint": {"x": 1}}),
    ):
        resp = await c.post(f"{WF}{path}", json=body, headers=b)
        problem = await resp.json()
        assert resp.status == 503 and problem["code"] == "lease_authority_restored", problem
        assert "Retry-After" in resp.headers
    resp = await c.post(f"{WF}/tasks", json={"key": "job", "title": "Renamed"}, headers=b)
    assert resp.status == 200  # a title is anyone's to change
    clock.advance(61)
    resp = await c.post(f"{WF}/tasks/job/complete", json={}, headers=b)
    assert resp.status == 200 and (await resp.json())["status"] == "done"


def test_a_process_records_its_check_in_about_once_a_minute(pg_folder: tuple[Path, str]) -> None:
    """On PostgreSQL each check of the node-wide fence (every 5 s while serving) records the process's check-in when
    the one recorded is a minute old (or ahead of the process's clock), and writes nothing otherwise; a process waiting
    for a vouch checks in too, and a change of the database's history registers every process anew (`bbs processes`
    shows the check-ins)."""
    folder, url = pg_folder
    every = fence_store.CHECK_IN_EVERY_MS
    t0 = 1_800_000_000_000

    def at(fence: LeaseFence, now_ms: int) -> fence_store.ProcessRow:
        with contextlib.closing(connect_store(url)) as conn, transaction(conn, immediate=True):
            if fence.loaded:
                fence.settle_txn(conn, now_ms)
            else:
                fence.load_txn(conn, now_ms)
        assert fence.fence is not None and fence.fence.process is not None
        process = fence.fence.process
        row = read_sync(url, lambda conn: fence_store.process_row(conn, process))
        assert row is not None
        return row

    first = LeaseFence(folder / FENCE_NAME, "did:key:znode")
    registered = at(first, t0)  # registered by its first check
    assert registered.vouched and registered.identity is not None and registered.checked_in_ms == t0
    assert at(first, t0 + 5_000).checked_in_ms == t0  # nothing changed: nothing written
    assert at(first, t0 + every - 1).checked_in_ms == t0
    assert at(first, t0 + every).checked_in_ms == t0 + every
    assert at(first, t0 + every + 5_000).checked_in_ms == t0 + every
    assert at(first, t0 + 30_000).checked_in_ms == t0 + 30_000  # its clock stepped back: recorded at once

    # a process whose folder holds no fence of this database waits for a vouch, and checks in meanwhile
    joining = LeaseFence(folder.parent / "joining-fence.json", "did:key:znode")
    assert at(joining, t0 + 40_000) == (False, None, t0 + 40_000)
    assert joining.awaiting_vouch
    assert at(joining, t0 + 40_000 + every - 1).checked_in_ms == t0 + 40_000
    assert at(joining, t0 + 40_000 + every) == (False, None, t0 + 40_000 + every)

    # the database's history changed (here: marked as restored by hand): the next check registers the process anew
    with contextlib.closing(connect_store(url)) as conn, transaction(conn, immediate=True):
        ops_store.set_meta_txn(conn, IDENTITY_KEY, "restored")
    row = at(first, t0 + 31_000)
    assert row.vouched and row.identity is not None and row.identity != "restored" and row.checked_in_ms == t0 + 31_000
