"""Merged posts (Database.write_merged, posting.store_all_txn over several requests) answer as one by one would.

Each test holds the writer (`Held`) so the requests under test queue up and reach `store_all_txn` as one call,
then checks that the answers are those of the requests run one by one.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from identity import records
from node.entries import posting as entries
from node.errors import StorageFull, Unavailable
from node.service import Node
from node.store.db import Database, Mergeable
from tests.conftest import AgentCreds
from tests.node.api_helpers import count, entry_record, get_json, post, problem, self_signer
from tests.node.test_writer import Held, count_calls

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def send(
    client: TestClient, who: Any, body: Any, path: str = "/v1/entries", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    resp = await client.post(path, json=body, headers={**who.headers, **(headers or {})})
    return resp.status, await resp.json(content_type=None)


def signed(record: dict[str, Any]) -> dict[str, Any]:
    return {"record": record}


def item(content: str, **over: Any) -> dict[str, Any]:
    return {"entry_type": "finding", "performative": "inform", "content": content, **over}


async def queued_together(node: Node, requests: list[Coroutine[Any, Any, Any]]) -> list[Any]:
    """Start the requests while the writer is held, in order; release it once all of them wait on it."""
    async with Held(node.db) as held:
        tasks = []
        for request in requests:  # one at a time, so they queue in the order given
            tasks.append(asyncio.ensure_future(request))
            await held.queued(len(tasks), node.entries.merged)
    return await asyncio.gather(*tasks)


def retraction_of_nothing(signer: Any, now: int) -> dict[str, Any]:
    """A signed retraction of an entry no node holds: only the writer can refuse it (404), so it sends its run
    to the slow path (a retraction of someone else's stored entry is refused before the write)."""
    return signed(
        entry_record(
            signer.key,
            f"withdrawing nothing {now}",
            created_ms=now,
            performative="retract",
            links=[{"target": "f" * 64, "link_type": "supersedes", "annotation": ""}],
        )
    )


# ---- two requests of one run that interact ------------------------------------------------------------


async def test_one_idempotency_key_in_two_merged_requests_stores_one_record(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    calls = count_calls(node)
    key = {"Idempotency-Key": "same"}
    answers = await queued_together(
        node,
        [
            send(client, alice, item("first wording"), headers=key),
            send(client, bob, item("bob, unrelated")),
            send(client, alice, item("second wording"), headers=key),
        ],
    )
    statuses = [s for s, _ in answers]
    assert statuses == [201, 201, 200], answers
    assert answers[2][1]["id"] == answers[0][1]["id"]
    assert answers[2][1]["content"] == "first wording"
    assert await count(node, "entries") == 2
    assert calls == [3, 1, 1, 1]  # the merged call hit the idempotency primary key, then each ran alone


async def test_one_signed_record_in_two_merged_requests(client: TestClient, node: Node) -> None:
    signer = await self_signer(node, "sig")
    record = entry_record(signer.key, "said twice", created_ms=node.now_ms())
    other = entry_record(signer.key, "said once", created_ms=node.now_ms())
    calls = count_calls(node)
    answers = await queued_together(
        node,
        [
            send(client, signer, signed(record)),
            send(client, signer, signed(other)),
            send(client, signer, signed(record)),
        ],
    )
    assert [s for s, _ in answers] == [201, 201, 200], answers
    assert answers[0][1]["id"] == answers[2][1]["id"]
    assert answers[0][1]["record_hash"] == records.compute_hash(record)
    assert await count(node, "entries") == 2
    assert calls == [3]  # no fallback needed


async def test_a_taken_hash_in_a_merged_run_is_resealed_and_stored(
    client: TestClient, make_agent: MakeAgent, node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node-signed post whose hash belongs to a different stored record: its request alone is re-sealed
    1 ms later; the requests merged with it are stored once."""
    alice, bob = await make_agent("alice"), await make_agent("bob")
    first = await post(client, alice, content="same words, same millisecond")
    real = entries.held_versions
    # Pretend the stored record under that hash has a different body (a collision, which signing cannot
    # produce on demand).
    monkeypatch.setattr(
        entries,
        "held_versions",
        lambda held: {
            **real(held),
            **({first["record_hash"]: {"another"}} if first["record_hash"] in held else {}),
        },
    )
    calls = count_calls(node)
    answers = await queued_together(
        node,
        [
            send(client, bob, item("bob before")),
            send(client, alice, item("same words, same millisecond")),
            send(client, bob, item("bob after")),
        ],
    )
    assert [s for s, _ in answers] == [201, 201, 201], answers
    resealed = answers[1][1]
    assert resealed["record_hash"] != first["record_hash"]
    assert resealed["created_at"] != first["created_at"]
    assert [a["content"] for _, a in answers] == ["bob before", "same words, same millisecond", "bob after"]
    assert await count(node, "entries") == 4
    assert calls[:4] == [3, 1, 1, 1] and calls[4:] == [1]  # merged, each alone, then the retry


async def test_a_batch_with_a_bad_item_fails_whole_and_the_singles_merged_with_it_are_stored(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    carol = await make_agent("carol")
    signer = await self_signer(node, "sig")
    before = await count(node, "entries")
    fine = signed(entry_record(signer.key, "signer fine", created_ms=node.now_ms()))
    answers = await queued_together(
        node,
        [
            send(client, carol, item("carol one")),
            send(
                client,
                signer,
                {"entries": [fine, retraction_of_nothing(signer, node.now_ms() + 1)]},
                "/v1/entries/batch",
            ),
            send(client, carol, item("carol two")),
        ],
    )
    assert (answers[0][0], answers[2][0]) == (201, 201)
    problem(answers[1][1], 404, "target_not_found", "$.entries[1].record.links[0].target")
    assert await count(node, "entries") == before + 2
    found = await get_json(client, "/v1/search", carol, params={"q": "fine"})
    assert found["entries"] == []


async def test_a_retraction_queued_after_its_target_in_one_run(client: TestClient, node: Node) -> None:
    """As before the change: the target first, then its retraction, both stored, the target retracted."""
    signer = await self_signer(node, "sig")
    now = node.now_ms()
    target = entry_record(signer.key, "hasty", created_ms=now)
    retract = entry_record(
        signer.key,
        "withdrawn",
        created_ms=now + 1,
        performative="retract",
        links=[{"target": records.compute_hash(target), "link_type": "supersedes", "annotation": ""}],
    )
    answers = await queued_together(node, [send(client, signer, signed(target)), send(client, signer, signed(retract))])
    assert [s for s, _ in answers] == [201, 201], answers
    read = await get_json(client, f"/v1/entries/{answers[0][1]['id']}", signer)
    assert read["entries"][0]["retracted"] is True


def retraction_before_target(signer: Any, now: int) -> tuple[dict[str, Any], dict[str, Any]]:
    target = entry_record(signer.key, "not yet here", created_ms=now)
    retract = entry_record(
        signer.key,
        "withdrawn early",
        created_ms=now + 1,
        performative="retract",
        links=[{"target": records.compute_hash(target), "link_type": "supersedes", "annotation": ""}],
    )
    return retract, target


async def test_a_retraction_queued_before_its_target_is_decided_as_one_by_one(client: TestClient, node: Node) -> None:
    """One by one (separate jobs, in queue order) the retraction is 404 target_not_found: its target is not on
    the node yet. Merged, the append of the whole run comes first, so the retraction would see the target a
    LATER request brings; the writer sends such a run to the one-by-one path instead (`_CrossRequest`)."""
    signer = await self_signer(node, "sig")
    retract, target = retraction_before_target(signer, node.now_ms())
    answers = await queued_together(node, [send(client, signer, signed(retract)), send(client, signer, signed(target))])
    assert answers[1][0] == 201
    problem(answers[0][1], 404, "target_not_found")


async def test_the_same_retraction_with_a_failing_neighbour_is_404(client: TestClient, node: Node) -> None:
    """The other side of the test above: with a failing request in the run, the fallback runs each alone and
    the retraction is 404 as well (before the fix it was 201 merged and 404 only with a failing neighbour)."""
    signer = await self_signer(node, "sig")
    other = await self_signer(node, "other")
    retract, target = retraction_before_target(signer, node.now_ms())
    answers = await queued_together(
        node,
        [
            send(client, signer, signed(retract)),
            send(client, signer, signed(target)),
            send(client, other, retraction_of_nothing(other, node.now_ms() + 5)),
        ],
    )
    problem(answers[0][1], 404, "target_not_found")
    assert answers[1][0] == 201
    problem(answers[2][1], 404, "target_not_found", "$.record.links[0].target")


@pytest.mark.parametrize("by_author", [True, False])
async def test_an_earlier_request_never_reads_back_a_later_supersedes_link(
    client: TestClient, node: Node, by_author: bool
) -> None:
    """A posts T; B, queued behind it in the same run, retracts T (same author) or claims to supersede it
    (another author: a claim, listed in `superseded_claims`). One by one, A answers `retracted` false and no
    claim: B is not stored yet. Merged, the read-back comes after the whole run's append, so A would have read
    B's link; such a run goes to the one-by-one path."""
    alice = await self_signer(node, "alice")
    other = alice if by_author else await self_signer(node, "carol")
    now = node.now_ms()
    target = entry_record(alice.key, "a hasty claim", created_ms=now)
    later = entry_record(
        other.key,
        "withdrawn" if by_author else "a better claim",
        created_ms=now + 1,
        performative="retract" if by_author else "inform",
        links=[{"target": records.compute_hash(target), "link_type": "supersedes", "annotation": ""}],
    )
    answers = await queued_together(node, [send(client, alice, signed(target)), send(client, other, signed(later))])
    assert [status for status, _ in answers] == [201, 201]
    assert (answers[0][1]["retracted"], answers[0][1]["superseded_claims"]) == (False, [])
    read = (await get_json(client, f"/v1/entries/{answers[0][1]['id']}", alice))["entries"][0]
    if by_author:
        assert read["retracted"] is True
    else:
        assert read["superseded"] is False and read["superseded_claims"] == [answers[1][1]["record_hash"]]


# ---- notifications --------------------------------------------------------------------------------------


async def contradiction_notifications(node: Node, agent_id: str) -> list[tuple[int, int, str]]:
    def run(conn: sqlite3.Connection) -> list[tuple[int, int, str]]:
        return [
            (r[0], r[1], r[2])
            for r in conn.execute(
                "SELECT entry_id, tier, reason FROM notifications WHERE agent_id = ? ORDER BY id", (agent_id,)
            )
        ]

    return await node.db.read(run)


@pytest.mark.parametrize("contradiction_first", [True, False])
async def test_a_contradiction_between_two_requests_of_one_run_notifies_once(
    client: TestClient, node: Node, contradiction_first: bool
) -> None:
    bob, carol = await self_signer(node, "bob"), await self_signer(node, "carol")
    now = node.now_ms()
    claim = entry_record(carol.key, "the cache is warm", created_ms=now)
    answer = entry_record(
        bob.key,
        "the cache is cold",
        created_ms=now,
        links=[{"target": records.compute_hash(claim), "link_type": "contradicts", "annotation": ""}],
    )
    requests = [send(client, carol, signed(claim)), send(client, bob, signed(answer))]
    if contradiction_first:
        requests.reverse()
    calls = count_calls(node)
    answers = await queued_together(node, requests)
    assert [s for s, _ in answers] == [201, 201], answers
    assert calls == [2]
    answer_id = answers[0 if contradiction_first else 1][1]["id"]
    assert await contradiction_notifications(node, carol.agent_id) == [(answer_id, 1, "contradiction")]
    assert await contradiction_notifications(node, bob.agent_id) == []


async def test_subscribers_are_notified_once_per_entry_across_a_merged_run_and_its_fallback(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    alice, _, dave = [await make_agent(n) for n in ("alice", "bob", "dave")]
    signer = await self_signer(node, "sig")
    resp = await client.post("/v1/subscriptions", json={}, headers=dave.headers)  # everything
    assert resp.status == 201
    await post(client, alice, content="alice's")
    record = entry_record(signer.key, "twice", created_ms=node.now_ms())
    bad = retraction_of_nothing(signer, node.now_ms() + 7)
    for requests in (
        # merged call succeeds
        [send(client, alice, item("one")), send(client, signer, signed(record)), send(client, signer, signed(record))],
        # merged call fails on the signer's request: rolled back, each alone
        [
            send(client, alice, item("two", directed_to=[dave.agent_id])),
            send(client, signer, bad),
            send(client, alice, item("three")),
        ],
    ):
        await queued_together(node, requests)

    def per_entry(conn: sqlite3.Connection) -> list[tuple[int, int]]:
        return [
            (r[0], r[1])
            for r in conn.execute(
                "SELECT e.id, (SELECT count(*) FROM notifications n WHERE n.entry_id = e.id AND n.agent_id = ?)"
                " FROM entries e ORDER BY e.id",
                (dave.agent_id,),
            )
        ]

    notified = await node.db.read(per_entry)
    assert len(notified) == 5  # alice's, one, twice, two, three (nothing of the refused retraction)
    assert [n for _, n in notified] == [1] * 5


# ---- order ----------------------------------------------------------------------------------------------


async def test_each_request_gets_its_own_entries_in_order(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    """Singles and batches of several lengths, one with a replayed key, merged: every request gets back
    exactly its own items in its own order."""
    alice, bob = await make_agent("alice"), await make_agent("bob")
    replayed = await post(client, bob, content="bob keyed", idempotency_key="k0")
    calls = count_calls(node)
    requests = [
        send(client, alice, item("a0")),
        send(
            client,
            bob,
            {"entries": [item("b0"), item("bob keyed", idempotency_key="k0"), item("b2")]},
            "/v1/entries/batch",
        ),
        send(client, alice, {"entries": [item("a1"), item("a2")]}, "/v1/entries/batch"),
        send(client, bob, item("b3")),
        send(client, alice, {"entries": [item(f"a{i}") for i in range(3, 8)]}, "/v1/entries/batch"),
    ]
    answers = await queued_together(node, requests)
    assert calls == [5]
    assert [s for s, _ in answers] == [201] * 5, answers
    assert answers[0][1]["content"] == "a0" and answers[3][1]["content"] == "b3"
    bobs = answers[1][1]["results"]
    assert [(r["entry"]["content"], r["created"]) for r in bobs] == [("b0", True), ("bob keyed", False), ("b2", True)]
    assert bobs[1]["entry"]["id"] == replayed["id"]
    assert [r["entry"]["content"] for r in answers[2][1]["results"]] == ["a1", "a2"]
    assert [r["entry"]["content"] for r in answers[4][1]["results"]] == [f"a{i}" for i in range(3, 8)]
    assert {r["entry"]["author_id"] for r in answers[4][1]["results"]} == {alice.agent_id}


# ---- the writer: failures that end the transaction, COMMIT, cancellation ------------------------------


@pytest.fixture
async def db(tmp_path: Path, node_store: Callable[[], str | None]) -> AsyncIterator[Database]:
    """A node database of this pass's engine (`node_store`: PostgreSQL in the `--store postgresql` pass)."""
    database = Database(node_store() or tmp_path / "review.db")
    database.open()
    await database.write(lambda c: c.execute("CREATE TABLE scratch (item TEXT PRIMARY KEY)"))
    yield database
    database.close()


def inserting(calls: list[list[str]], fail: Callable[[sqlite3.Connection, list[str]], None] | None = None) -> Any:
    def run(conn: sqlite3.Connection, items: list[str]) -> list[str]:
        calls.append(list(items))
        for it in items:
            conn.execute("INSERT INTO scratch (item) VALUES (?)", (it,))
        if fail is not None:
            fail(conn, items)
        return list(items)

    return Mergeable(run)


async def scratch(db: Database) -> list[str]:
    return await db.read(lambda c: [r[0] for r in c.execute("SELECT item FROM scratch ORDER BY item")])


@pytest.mark.sqlite_only(reason="a full SQLite file (PRAGMA max_page_count); SQLite ends the transaction itself")
async def test_a_full_database_in_a_merged_run_fails_the_whole_batch(db: Database) -> None:
    """A real SQLITE_FULL (max_page_count) in the merged call: SQLite rolls the whole transaction back, so
    `ROLLBACK TO merged` fails and, as for a job alone, every job of the batch (the plain one before the
    merged run included) is told StorageFull, nothing is stored, no fallback runs on the dead transaction,
    and the writer goes on."""
    pages = await db.write(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
    await db.write(lambda c: c.execute(f"PRAGMA max_page_count = {pages + 3}").fetchone())
    rolled_back = db.stats.rolled_back
    calls: list[list[str]] = []
    kind = inserting(calls)
    items = [ch * 3000 for ch in "abcdef"]
    async with Held(db) as held:
        plain = asyncio.ensure_future(db.write(lambda c: c.execute("INSERT INTO scratch VALUES ('plain')").rowcount))
        await held.queued(1)
        futures = [asyncio.ensure_future(db.write_merged(kind, it)) for it in items]
        await held.queued(1 + len(items))
    results = await asyncio.gather(plain, *futures, return_exceptions=True)
    assert all(isinstance(r, StorageFull) for r in results), results
    assert calls == [items]
    assert await scratch(db) == []
    assert db.stats.rolled_back == rolled_back + 1  # the batch, counted once
    assert await db.write_merged(kind, "after") == "after"


async def test_a_failing_commit_acknowledges_nothing_of_a_merged_run(db: Database) -> None:
    """A deferred foreign key fails only at COMMIT: the merged run succeeded, yet none of it may report
    success (an acknowledgement only after COMMIT)."""
    await db.write(
        lambda c: (
            c.execute(
                "CREATE TABLE child (parent TEXT REFERENCES scratch (item) DEFERRABLE INITIALLY DEFERRED)"
            ).rowcount
        )
    )
    calls: list[list[str]] = []
    kind = inserting(calls)
    async with Held(db) as held:
        merged = [asyncio.ensure_future(db.write_merged(kind, it)) for it in ("a", "b")]
        await held.queued(2)
        orphan = asyncio.ensure_future(db.write(lambda c: c.execute("INSERT INTO child VALUES ('none')").rowcount))
        await held.queued(3)
    results = await asyncio.gather(*merged, orphan, return_exceptions=True)
    assert all(isinstance(r, sqlite3.IntegrityError) for r in results), results
    assert await scratch(db) == []


async def test_a_cancelled_request_in_a_merged_run(db: Database) -> None:
    """A request given up while queued (client gone): its item is still written (as before the change),
    the others get their own results, and the writer goes on."""
    calls: list[list[str]] = []
    kind = inserting(calls)
    async with Held(db) as held:
        futures = [asyncio.ensure_future(db.write_merged(kind, it)) for it in ("a", "b", "c")]
        await held.queued(3)
        futures[1].cancel()
    assert await futures[0] == "a" and await futures[2] == "c"
    assert futures[1].cancelled()
    assert calls == [["a", "b", "c"]]
    assert await scratch(db) == ["a", "b", "c"]
    assert await db.write_merged(kind, "d") == "d"


class Fatal(BaseException):
    """Not an Exception (like SystemExit): a job raising it must not kill the writer thread."""


async def test_a_base_exception_in_a_merged_run_settles_its_futures(db: Database) -> None:
    def fatal(conn: sqlite3.Connection, items: list[str]) -> None:
        raise Fatal()

    kind = inserting([], fatal)
    async with Held(db) as held:
        futures = [asyncio.ensure_future(db.write_merged(kind, it)) for it in ("a", "b")]
        await held.queued(2)
    done, _ = await asyncio.wait(futures, timeout=5)
    assert len(done) == 2
    assert all(isinstance(f.exception(), Unavailable) for f in futures)  # never the BaseException itself
    assert await db.write(lambda c: 7) == 7  # the writer lives on
