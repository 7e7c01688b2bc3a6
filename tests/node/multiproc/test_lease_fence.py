"""The lease fence of a node served by several processes on one PostgreSQL database (issue 41, docs/decisions.md
record 88): grants through either process, the database restored from a dump taken before some of them, or a
replica promoted that never received them; neither process grants until every lost grant has ended or the grants
are back. A new process with an empty folder grants at once when nothing was lost.

Time moves on the fake clock; the periodic fence check (every 5 s in a served node) is run by hand
(`check_fences`), so the order of the processes' checks is the test's.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo

from node.cli import main
from node.ops import pg_tools, processes
from node.ops import store as ops_store
from node.ops.datadir import DataDir
from node.store.db import read_sync
from node.workflows.fence import FENCE_NAME, IDENTITY_KEY, LONGEST_GRANT_MS, read_fence
from node.workflows.service import check_fence
from node.workflows.store import fence as fence_store
from scenarios import pg_cluster as cluster_mod
from tests.conftest import FakeClock
from tests.node.multiproc.conftest import (
    Process,
    Start,
    TwoProcesses,
    check_fences,
    second_folder,
    stop_process,
)
from tests.node.workflows.helpers import WF

pytestmark = pytest.mark.postgresql


async def _agent(p: Process, name: str) -> dict[str, str]:
    created = await p.node.agents.create(name, name.title())
    return {"Authorization": f"Bearer {created.api_key}"}


async def _declare(p: Process, headers: dict[str, str], *keys: str) -> None:
    for key in keys:
        resp = await p.client.post(f"{WF}/tasks", json={"key": key}, headers=headers)
        assert resp.status in (200, 201), await resp.text()


async def _lease(p: Process, headers: dict[str, str], key: str, seconds: int = 60) -> tuple[int, dict, str | None]:
    resp = await p.client.post(f"{WF}/tasks/{key}/lease", json={"seconds": seconds}, headers=headers)
    return resp.status, await resp.json(), resp.headers.get("Retry-After")


async def _refused(p: Process, headers: dict[str, str], key: str) -> int:
    """The lease request is refused 503 `lease_authority_restored`; the Retry-After it names."""
    status, problem, retry = await _lease(p, headers, key)
    assert status == 503 and problem["code"] == "lease_authority_restored", problem
    assert retry is not None
    return int(retry)


async def _started(two: TwoProcesses) -> tuple[dict[str, str], dict[str, str]]:
    """Two agents, four tasks, both processes' fences checked (the first to load made the node's fence; the
    other joined, vouched for by it)."""
    ada, bob = await _agent(two.a, "ada"), await _agent(two.a, "bob")
    await _declare(two.a, ada, "t1", "t2", "t3", "t4", "t5")
    await check_fences(two.a, two.b)
    return ada, bob


async def _restored(two: TwoProcesses, start: Start, dump: Path) -> tuple[Process, Process]:
    """Both processes stopped, the dump restored over the node's database by hand (pg_restore: the same history
    identity), both started again."""
    for p in (two.a, two.b):
        await stop_process(p)
    _restore(dump, two.url)
    return await start(two.a.folder), await start(two.b.folder)


def _restore(dump: Path, url: str) -> None:
    pg_tools.restore(dump, url, ops_store.CLEAR_SCHEMA_PG)


async def test_a_restore_from_before_grants_through_both_processes_fences_both(
    two_processes: TwoProcesses, start_process: Start, tmp_path: Path, clock: FakeClock
) -> None:
    two = two_processes
    ada, bob = await _started(two)
    assert (await _lease(two.a, ada, "t1", seconds=30))[0] == 201
    assert (await _lease(two.b, ada, "t2", seconds=30))[0] == 201
    pg_tools.dump(two.url, tmp_path / "before.dump")
    assert (await _lease(two.a, ada, "t3", seconds=300))[0] == 201  # lost with the restore
    assert (await _lease(two.b, ada, "t4", seconds=200))[0] == 201  # lost too
    pg_tools.dump(two.url, tmp_path / "after.dump")
    for folder in (two.a.folder, two.b.folder):  # each file counts the node's grants, not only its own
        fence = read_fence(folder / FENCE_NAME)
        assert fence is not None and fence.grants is not None and fence.grants >= 3
    a, b = await _restored(two, start_process, tmp_path / "before.dump")
    clock.advance(10)
    for p in (a, b):
        assert 280 <= await _refused(p, bob, "t3") <= 291
        assert 280 <= await _refused(p, bob, "t5") <= 291  # every task: the node cannot know which it lost
    holds = await a.node.db.read(fence_store.holds)
    assert {h.hold_id.split(":")[0] for h in holds} == {"count"}

    # the grants come back (here: the database restored again, from a dump that holds them): granting resumes
    a, b = await _restored(TwoProcesses(a, b, two.url, two.admin_token), start_process, tmp_path / "after.dump")
    await check_fences(a, b)
    status, problem, _ = await _lease(b, bob, "t5")
    assert status == 201, problem
    status, task, _ = await _lease(a, ada, "t3", seconds=60)
    assert status == 200, task  # ada's lease, back with its grant: extended


async def test_neither_process_grants_until_the_fence_passes(
    two_processes: TwoProcesses, start_process: Start, tmp_path: Path, clock: FakeClock
) -> None:
    two = two_processes
    ada, bob = await _started(two)
    assert (await _lease(two.b, ada, "t1", seconds=30))[0] == 201
    pg_tools.dump(two.url, tmp_path / "before.dump")
    assert (await _lease(two.a, ada, "t3", seconds=300))[0] == 201  # only a knows of it
    a, b = await _restored(two, start_process, tmp_path / "before.dump")
    await check_fences(a, b)  # a finds the loss and records a hold every process obeys
    assert 290 <= await _refused(b, bob, "t3") <= 300
    assert 290 <= await _refused(b, bob, "t5") <= 300
    clock.advance(150)
    await check_fence(b.node.workflows)
    assert 140 <= await _refused(b, bob, "t3") <= 150
    clock.advance(151)
    status, task, _ = await _lease(b, bob, "t3")
    assert status == 201 and task["lease"]["holder"] != ada
    assert (await _lease(a, ada, "t5"))[0] == 201
    assert await a.node.db.read(fence_store.holds) == []


async def test_a_hand_restore_marked_as_one_waits_for_every_process_to_check_in(
    two_processes: TwoProcesses, start_process: Start, tmp_path: Path, clock: FakeClock
) -> None:
    """docs/operations.md: after a pg_restore by hand, the operator marks the database's history as changed; then a
    process that knows nothing lost waits until the one that knows has checked its fence."""
    two = two_processes
    ada, bob = await _started(two)
    pg_tools.dump(two.url, tmp_path / "before.dump")
    assert (await _lease(two.a, ada, "t3", seconds=300))[0] == 201
    await stop_process(two.a)
    await stop_process(two.b)
    _restore(tmp_path / "before.dump", two.url)
    epoch = read_sync(two.url, lambda conn: ops_store.meta_value(conn, "epoch"))
    assert main(["restore", "--by-hand", "--data", str(two.b.folder)]) == 0  # the mark, as the operator makes it
    b = await start_process(two.b.folder)  # b alone: its file shows nothing lost, yet it waits for a
    await check_fences(b)
    assert await _refused(b, bob, "t5") == LONGEST_GRANT_MS // 1000
    assert read_sync(two.url, lambda conn: ops_store.meta_value(conn, "epoch")) != epoch  # renewed at b's start
    listed = {p.process: (p.checked, p.this_folder) for p in processes.registered(two.b.folder).processes}
    a_id, b_id = (_process_of(f) for f in (two.a.folder, two.b.folder))
    assert listed == {a_id: (False, False), b_id: (True, True)}  # what `bbs processes` shows: a not checked in
    a = await start_process(two.a.folder)
    await check_fences(a, b)  # a checks in: the history hold ends, its count hold stays
    assert all(p.checked for p in processes.registered(two.b.folder).processes)
    holds = await b.node.db.read(fence_store.holds)
    assert [h.hold_id.split(":")[0] for h in holds] == ["count"]
    assert 290 <= await _refused(b, bob, "t5") <= 300
    clock.advance(301)
    assert (await _lease(b, bob, "t3"))[0] == 201


async def test_a_history_hold_the_database_has_left_gives_way_to_the_newest(
    two_processes: TwoProcesses, clock: FakeClock
) -> None:
    """Two changes of history seen one after the other (a restore made in two steps while a process serves, or a
    failover seen before the store epoch it renewed) leave a hold under the first, which no process checks in under
    any more: the second hold takes its place, and the check-ins under the history the database is in end the wait,
    not the day."""
    two = two_processes
    _, bob = await _started(two)
    now = two.a.node.now_ms()
    passed = fence_store.Hold("history:S:1:e-passed", now + LONGEST_GRANT_MS, None, None, "S:1:e-passed")
    await two.a.node.db.write(lambda c: fence_store.hold_txn(c, passed, now))  # as the first change left it
    with psycopg.connect(DataDir(two.a.folder).store_url or "", autocommit=True) as conn:
        conn.execute("UPDATE node_meta SET value = 'restored' WHERE key = %s", (IDENTITY_KEY,))  # the second
    await check_fences(two.a)
    holds = await two.a.node.db.read(fence_store.holds)
    assert [h.hold_id.split(":")[0] for h in holds] == ["history"] and holds[0].hold_id != passed.hold_id
    await check_fences(two.b, two.a)  # both check in under the history the database is in
    assert await two.a.node.db.read(fence_store.holds) == []
    assert (await _lease(two.b, bob, "t5"))[0] == 201


async def test_a_new_process_with_an_empty_folder_grants_at_once_when_nothing_was_lost(
    two_processes: TwoProcesses, start_process: Start, tmp_path: Path
) -> None:
    two = two_processes
    ada, bob = await _started(two)
    assert (await _lease(two.a, ada, "t1", seconds=300))[0] == 201
    assert (await _lease(two.b, ada, "t2", seconds=300))[0] == 201
    second_folder(two.a.folder, tmp_path / "c")
    c = await start_process(tmp_path / "c")
    await check_fences(c, two.a, c)  # c registers; a's next check (within 5 s when served) vouches for it
    status, task, _ = await _lease(c, bob, "t5")
    assert status == 201, task
    status, problem, _ = await _lease(c, bob, "t1")  # and it knows what a granted: no second lease
    assert status == 409, problem
    fence = read_fence(tmp_path / "c" / FENCE_NAME)
    assert fence is not None and fence.vouched and fence.grants == 3


async def test_a_process_whose_folder_was_lost_does_not_make_the_node_forget(
    two_processes: TwoProcesses, start_process: Start, tmp_path: Path
) -> None:
    """With no other process to vouch for the database, a process without its fence waits the longest lease."""
    two = two_processes
    ada, bob = await _started(two)
    assert (await _lease(two.a, ada, "t1", seconds=300))[0] == 201
    await stop_process(two.a)
    await stop_process(two.b)
    (two.a.folder / FENCE_NAME).unlink()
    a = await start_process(two.a.folder)
    await check_fences(a)
    assert await _refused(a, bob, "t5") == LONGEST_GRANT_MS // 1000
    b = await start_process(two.b.folder)  # b comes back with its fence: it vouches for the database
    await check_fences(b, a)
    assert (await _lease(a, bob, "t5"))[0] == 201


# ---- a real replica, promoted after it missed grants (an asynchronous replica's failover) -------------------------


def _meta(url: str, key: str) -> str | None:
    return read_sync(url, lambda conn: ops_store.meta_value(conn, key))


def _point_at(folder: Path, url: str) -> None:
    """The folder's store.url names another server (what a failover's address change does)."""
    (folder / "store.url").write_text(url + "\n", encoding="utf-8")


async def test_a_promoted_replica_that_missed_grants_fences_both_processes(
    two_processes: TwoProcesses,
    pg_cluster: cluster_mod.Cluster,
    standby: list[cluster_mod.Cluster],
    start_process: Start,
    clock: FakeClock,
) -> None:
    two = two_processes
    ada, bob = await _started(two)
    assert (await _lease(two.a, ada, "t1", seconds=30))[0] == 201
    replica = pg_cluster.standby_copy()
    standby.append(replica)
    assert (await _lease(two.a, ada, "t3", seconds=300))[0] == 201  # the replica never receives these
    assert (await _lease(two.b, ada, "t4", seconds=200))[0] == 201
    await stop_process(two.a)
    await stop_process(two.b)
    epoch = _meta(two.url, "epoch")
    replica.promote()  # the failover
    dbname = str(conninfo.conninfo_to_dict(two.url)["dbname"])
    for folder in (two.a.folder, two.b.folder):
        _point_at(folder, replica.store_url(dbname))
    b = await start_process(two.b.folder)
    # the store epoch follows the new timeline (node/ops/history.py), so peers reconcile: once, by the first start
    renewed = _meta(replica.store_url(dbname), "epoch")
    assert renewed != epoch and _meta(replica.store_url(dbname), "previous_epoch") == epoch
    await check_fences(b)
    assert await _refused(b, bob, "t5") > 200  # the history changed: b waits for every process to check in
    holds = await b.node.db.read(fence_store.holds)
    assert any(h.hold_id.startswith("history:") for h in holds)
    assert any(h.hold_id.startswith("count:") for h in holds)  # b knows of a's grant t3 too (the node's count)
    a = await start_process(two.a.folder)
    assert _meta(replica.store_url(dbname), "epoch") == renewed
    await check_fences(a, b)
    for p in (a, b):
        assert 290 <= await _refused(p, bob, "t3") <= 300
    clock.advance(301)
    for p, key in ((a, "t3"), (b, "t4")):
        status, task, _ = await _lease(p, bob, key)
        assert status == 201 and task["lease"]["holder"] != ada


def _process_of(folder: Path) -> str:
    fence = read_fence(folder / FENCE_NAME)
    assert fence is not None and fence.process is not None
    return fence.process
