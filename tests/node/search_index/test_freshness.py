"""node.search_index.freshness and the wait of a search: read your own writes, `fresh`, bounded waits, metrics.

The REST tests run a real server whose indexer commits at most once a minute unless a search asks for a
flush, so an entry is searchable within the test only when a search waited for it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient

from node.search_index.freshness import CommitAges, Pace, Watermark, targets
from node.search_index.indexer import Indexer
from node.search_index.store import TARGETS_SQL
from node.service import Node
from node.store import db
from node.web.appkeys import SEARCH_INDEXER
from tests.agent.mcp_inprocess import mcp_for, ok
from tests.conftest import AgentCreds
from tests.node.api_helpers import get_json, post, problem
from tests.pg_fixtures import OpenStore
from wire.api import PostEntry, SearchQuery

SLOW = Pace(commit_s=60.0, flush_s=0.05)  # no commit within a test unless a search asks for one


async def test_a_watermark_wakes_the_waits_it_reaches() -> None:
    mark = Watermark(3)
    assert await mark.reach(3, 0)  # reached already: no wait, even with no time to wait
    assert not await mark.reach(4, 0)
    early, late = asyncio.create_task(mark.reach(5, 30)), asyncio.create_task(mark.reach(9, 30))
    await asyncio.sleep(0)
    assert mark.waiting == 2
    mark.advance(2)  # a position never goes back
    assert mark.position == 3
    mark.advance(6)
    assert await early and not late.done()
    mark.advance(9)
    assert await late and mark.waiting == 0
    assert not await mark.reach(10, 0.01)  # the time runs out
    assert mark.waiting == 0  # a wait that ran out is forgotten


def test_commit_ages_report_the_oldest_commit_of_a_round() -> None:
    ages = CommitAges()
    assert ages.age(100.0) == 0.0
    ages.committed(10.0)
    ages.committed(11.0)
    assert ages.age(12.0) == 2.0
    ages.start()
    ages.committed(12.0)  # during the round: left to the next one
    assert ages.finish(indexed=5, now=13.0) == 3.0
    assert ages.age(14.0) == 2.0
    ages.start()
    assert ages.finish(indexed=0, now=15.0) is None  # a commit that wrote no entry (a link): dropped
    assert ages.age(16.0) == 0.0
    ages.committed(20.0)
    ages.start()  # a round that fails never finishes: the next round keeps its commits
    ages.committed(21.0)
    ages.start()
    assert ages.finish(indexed=1, now=22.0) == 2.0


def test_the_pace_allows_a_commit_sooner_while_a_search_waits() -> None:
    pace = Pace(commit_s=0.2, flush_s=0.05)
    assert pace.next_commit(10.0, flushing=False) == pytest.approx(10.2)
    assert pace.next_commit(10.0, flushing=True) == pytest.approx(10.05)


@pytest.mark.sqlite_only(reason="SQLite's query plan (EXPLAIN QUERY PLAN); the next test reads targets on both engines")
def test_the_targets_are_two_seeks(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "plan.db")
    db.migrate(conn)
    plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + TARGETS_SQL, ("did:key:z",))]
    assert not any(step.startswith("SCAN entries") for step in plan), plan  # "SCAN CONSTANT ROW": the SELECT
    assert any("entries_author" in step for step in plan), plan
    assert targets(conn, "did:key:z") == (0, 0)
    assert targets(conn, None) == (0, 0)
    conn.close()


def slow_indexer(client: TestClient) -> Indexer:
    worker = client.app[SEARCH_INDEXER]
    worker.pace = SLOW
    return worker


async def search(client: TestClient, who: Any, **params: Any) -> dict[str, Any]:
    return await get_json(client, "/v1/search", who, params=params)


async def indexed(worker: Indexer, entry_id: int) -> None:
    """Wait until the index covers `entry_id` (the indexer's first commit is not paced: no flush needed)."""
    assert await worker.position.reach(entry_id, 30)


async def running(worker: Indexer) -> asyncio.Task[None]:
    """Run `worker` until it has caught up once (ready: searches may wait for it)."""
    task = asyncio.create_task(worker.run())
    deadline = time.monotonic() + 30
    while not worker.ready:
        assert not task.done(), task
        assert time.monotonic() < deadline, "the indexer did not catch up within 30 s"
        await asyncio.sleep(0.01)
    return task


async def test_an_agent_finds_its_own_post_at_once(client: TestClient, node: Node, make_agent: Any) -> None:
    alice: AgentCreds = await make_agent("alice")
    worker = slow_indexer(client)
    await indexed(worker, (await post(client, alice, content="warm-up entry"))["id"])
    mine = (await post(client, alice, content="the kettle descaler is under the sink"))["id"]
    assert worker.position.position < mine  # the next paced commit is a minute away
    found = await search(client, alice, q="descaler")
    assert [e["id"] for e in found["entries"]] == [mine]
    assert found["stale"] is False and found["indexed_through"] >= mine
    assert node.reads.fresh_waits["reached"] == 1
    again = await search(client, alice, q="descaler")  # nothing newer of hers: no wait
    assert again["stale"] is False and node.reads.fresh_waits["reached"] == 1
    inline, moved = node.db.read_stats.inline, node.db.read_stats.moved
    direct = await node.reads.search(SearchQuery(q="descaler"), alice.agent_id)
    assert [e.id for e in direct.entries] == [mine] and direct.indexed_through is not None
    # her newest comes in the same read: one read in all (inline, or moved if a loaded machine ran it past the budget)
    assert (node.db.read_stats.inline - inline) + (node.db.read_stats.moved - moved) == 1


async def test_fresh_waits_for_other_agents_posts(client: TestClient, node: Node, make_agent: Any) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    worker = slow_indexer(client)
    await indexed(worker, (await post(client, alice, content="warm-up entry"))["id"])
    theirs = (await post(client, bob, content="the boiler pressure is 1.5 bar"))["id"]
    as_is = await search(client, alice, q="boiler")  # not alice's own entry: the index as it stands
    assert as_is["stale"] is False and as_is["indexed_through"] < theirs
    fresh = await search(client, alice, q="boiler", fresh="true")
    assert [e["id"] for e in fresh["entries"]] == [theirs]
    assert fresh["stale"] is False and fresh["indexed_through"] >= theirs
    assert (await search(client, alice, tags="x", fresh="true"))["indexed_through"] is None  # no words: SQL


async def test_a_wait_that_runs_out_answers_stale(
    client: TestClient, node: Node, make_agent: Any, admin_headers: dict[str, str]
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    worker = client.app[SEARCH_INDEXER]
    before = (await post(client, alice, content="warm-up entry"))["id"]
    await indexed(worker, before)
    worker.stop()  # the node's indexing task ends: the index cannot progress
    node.reads.fresh_timeout_s = 0.05
    theirs = (await post(client, bob, content="the fuse box is in the garage"))["id"]
    stale = await search(client, alice, q="fuse", fresh="true")
    assert stale["stale"] is True and stale["indexed_through"] == before < theirs
    admin = SimpleNamespace(headers=admin_headers)  # no agent: fresh is allowed and bounded all the same
    assert (await search(client, admin, q="fuse", fresh="true"))["stale"] is True
    assert (await search(client, admin, q="fuse"))["stale"] is False  # no own entries, no wait asked for
    mine = (await post(client, alice, content="the fuse box key hangs by the door"))["id"]
    own = await search(client, alice, q="fuse")
    assert own["stale"] is True and own["indexed_through"] < mine
    assert node.reads.fresh_waits["timed_out"] == 3


async def test_no_wait_before_the_index_is_ready(node: Node, make_agent: Any) -> None:
    """A first build can take minutes at a million entries: a search does not wait for it."""
    alice = await make_agent("alice")
    assert node.search_index is not None
    body = msgspec.convert({"entry_type": "finding", "performative": "inform", "content": "early"}, PostEntry)
    entry, _ = await node.entries.post(alice.agent_id, body, None)
    worker = Indexer(node.db, node.search_index)  # not running: never ready
    assert not await asyncio.wait_for(worker.reach(entry.id, 600), 30)
    assert worker.flushes == 0


async def test_bad_fresh_values_are_refused(client: TestClient, make_agent: Any) -> None:
    alice = await make_agent("alice")
    resp = await client.get("/v1/search", params={"q": "x", "fresh": "maybe"}, headers=alice.headers)
    data = await resp.json()
    assert resp.status == 422, data
    problem(data, 422, "validation_error", "$.fresh")


async def test_flushes_keep_to_their_pace(node: Node, make_agent: Any) -> None:
    """Many fresh searches while entries keep coming: index commits stay at most one per flush interval."""
    alice = await make_agent("alice")
    assert node.search_index is not None
    pace = Pace(commit_s=60.0, flush_s=0.2)
    worker = Indexer(node.db, node.search_index, pace)
    task = await running(worker)
    body = msgspec.convert({"entry_type": "finding", "performative": "inform", "content": "a stream"}, PostEntry)
    begun = time.monotonic()
    reached = []
    for i in range(6):
        entry, _ = await node.entries.post(alice.agent_id, msgspec.structs.replace(body, content=f"a stream {i}"), None)
        waits = [worker.reach(entry.id, 30) for _ in range(8)]
        reached += await asyncio.gather(*waits)
    elapsed = time.monotonic() - begun
    worker.stop()
    await task
    assert all(reached)
    assert worker.flushes >= 6
    assert 1 <= worker.batches <= 1 + elapsed / pace.flush_s + 1  # the first commit is not paced


async def test_sustained_writes_keep_to_the_commit_pace(node: Node, make_agent: Any) -> None:
    alice = await make_agent("alice")
    assert node.search_index is not None
    pace = Pace(commit_s=0.25, flush_s=0.25)
    delays: list[float] = []
    worker = Indexer(node.db, node.search_index, pace, on_delay=delays.append)
    loop = asyncio.get_running_loop()

    def committed() -> None:
        loop.call_soon_threadsafe(worker.committed, time.monotonic())

    node.db.after_commit.append(committed)
    task = await running(worker)
    begun = time.monotonic()
    last = 0
    for i in range(40):
        body = {"entry_type": "finding", "performative": "inform", "content": f"reading {i}"}
        last = (await node.entries.post(alice.agent_id, msgspec.convert(body, PostEntry), None))[0].id
        await asyncio.sleep(0.01)
    assert await worker.reach(last, 30)
    elapsed = time.monotonic() - begun
    node.db.after_commit.remove(committed)
    worker.stop()
    await task
    assert 1 <= worker.batches <= 1 + elapsed / pace.commit_s + 1
    assert delays and all(d >= 0 for d in delays)  # each round's commit-to-searchable delay was reported


async def test_metrics_show_the_lag_in_seconds(
    client: TestClient, node: Node, make_agent: Any, admin_headers: dict[str, str]
) -> None:
    alice = await make_agent("alice")
    worker = client.app[SEARCH_INDEXER]
    await indexed(worker, (await post(client, alice, content="first"))["id"])
    await search(client, alice, q="first", fresh="true")
    text = await (await client.get("/metrics", headers=admin_headers)).text()
    assert "bbs_search_index_lag_seconds 0.0" in text
    assert "bbs_search_index_delay_seconds_count 1.0" in text
    assert 'bbs_search_fresh_waits{outcome="none"} 1.0' in text
    assert "bbs_search_index_commits 1.0" in text
    worker.stop()
    await post(client, alice, content="second")
    text = await (await client.get("/metrics", headers=admin_headers)).text()
    lag = [line for line in text.splitlines() if line.startswith("bbs_search_index_lag_seconds ")]
    assert lag and float(lag[0].split()[1]) > 0
    assert "bbs_search_index_lag_entries 1.0" in text


def test_targets_see_the_callers_newest(open_store: OpenStore) -> None:
    conn = open_store(None)
    conn.execute("BEGIN")
    for i, author in enumerate(["a", "b", "a", "b", "b"], start=1):
        conn.execute(
            "INSERT INTO entries (id, record_hash, content_fingerprint, author_id, created_at, created_ms,"
            " entry_type, performative, content, confidence, signature)"
            " VALUES (?, ?, 'f', ?, '2026-01-01T00:00:00Z', 0, 'finding', 'inform', 'x', 0.5, 's')",
            (i, f"h{i}", author),
        )
    conn.execute("COMMIT")
    assert targets(conn, "a") == (5, 3)
    assert targets(conn, "c") == (5, 0)


async def test_the_mcp_search_tool_takes_fresh(client: TestClient, make_agent: Any) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    worker = slow_indexer(client)
    await indexed(worker, (await post(client, alice, content="warm-up entry"))["id"])
    theirs = (await post(client, bob, content="the water meter is behind the stairs"))["id"]
    async with mcp_for(client, alice.api_key) as session:
        found = ok(await session.call_tool("search", {"q": "meter", "fresh": True}))
    assert [e["id"] for e in found["entries"]] == [theirs]
    assert found["stale"] is False and found["indexed_through"] >= theirs
