"""The writer thread: group commit, and mergeable jobs (concurrent posts run as one set-based append).

The writer is held on a job that waits for an event, so the jobs under test queue up behind it and reach
the writer together, as they do under load.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.db import WRITER_CACHE_KIB, Database, Mergeable
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import count, entry_record, post, problem, self_signer

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


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
    """Holds the writer on one job until released; `queued(n)` waits until n more jobs wait behind it."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.release = threading.Event()
        self.running = threading.Event()
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Held:
        def hold(conn: sqlite3.Connection) -> None:
            self.running.set()
            self.release.wait(10)

        self.task = asyncio.create_task(self.db.write(hold))
        while not self.running.is_set():
            await asyncio.sleep(0.001)
        return self

    async def queued(self, n: int) -> None:
        for _ in range(5000):
            if self.db._jobs.qsize() >= n:
                return
            await asyncio.sleep(0.002)
        raise AssertionError(f"{n} jobs never queued up")

    async def __aexit__(self, *exc: object) -> None:
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


def count_calls(node: Node) -> list[int]:
    """Record how many requests each call of `store_all` gets (the merged call first, then each alone)."""
    calls: list[int] = []
    run = node.entries.merged.run

    def counted(conn: sqlite3.Connection, requests: list[Any]) -> Any:
        calls.append(len(requests))
        return run(conn, requests)

    node.entries.merged.run = counted
    return calls


async def send_signed(client: TestClient, who: Any, record: dict[str, Any]) -> dict[str, Any]:
    resp = await client.post("/v1/entries", json={"record": record}, headers=who.headers)
    body: dict[str, Any] = await resp.json()
    return body


async def test_concurrent_posts_merge_and_errors_stay_with_their_request(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    """Posts of several agents reach the writer together: one append for all of them. A post only the writer
    can refuse (a retraction whose target is not stored) fails alone and stores nothing; the others are
    stored. A retraction of someone else's entry is refused before it reaches the writer."""
    alice, bob, carol = [await make_agent(name) for name in ("alice", "bob", "carol")]
    dora = await self_signer(node, "dora")
    alices = await post(client, alice, content="alice's claim")
    keyed = await post(client, carol, content="carol, keyed", headers={"Idempotency-Key": "k-1"})
    calls = count_calls(node)
    before = await count(node)
    nothing = entry_record(
        dora.key,
        "dora retracts what is not here",
        created_ms=node.now_ms(),
        performative="retract",
        links=[{"target": "f" * 64, "link_type": "supersedes", "annotation": ""}],
    )
    async with Held(node.db) as held:
        tasks = [
            asyncio.ensure_future(post(client, alice, content="alice, concurrent")),
            asyncio.ensure_future(post(client, bob, content="bob, concurrent", tags=["t"])),
            asyncio.ensure_future(send_signed(client, dora, nothing)),
            asyncio.ensure_future(post(client, carol, content="carol, new key", headers={"Idempotency-Key": "k-2"})),
        ]
        await held.queued(len(tasks))
        # refused by the read before the write, while the writer is busy: bob may not retract alice's entry
        refused = await post(
            client,
            bob,
            403,
            performative="retract",
            content="bob retracts alice",
            links=[{"target": alices["record_hash"], "link_type": "supersedes"}],
        )
        # a replay of a committed key is answered from a reader while the writer is busy
        replay = await post(client, carol, 200, content="carol, keyed", headers={"Idempotency-Key": "k-1"})
    answers = await asyncio.gather(*tasks)
    problem(refused, 403, "retract_not_own", "$.links[0].target")
    problem(answers[2], 404, "target_not_found", "$.record.links[0].target")
    assert replay["id"] == keyed["id"]
    assert [a["content"] for i, a in enumerate(answers) if i != 2] == [
        "alice, concurrent",
        "bob, concurrent",
        "carol, new key",
    ]
    assert answers[1]["tags"] == ["t"] and answers[1]["author_id"] == bob.agent_id
    assert calls == [4, 1, 1, 1, 1]  # the four posts as one call; after the 404, each alone
    assert await count(node) == before + 3
    assert await count(node, "entries") == 5
