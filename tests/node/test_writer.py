"""Concurrent posts reach the writer together and run as one set-based append (the writer itself, its group
commit and mergeable jobs: tests/node/store/test_db.py).

The writer is held on a job that waits for an event (`Held`), so the posts under test queue up behind it and
reach the writer together, as they do under load.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import count, entry_record, post, problem, self_signer
from tests.node.store.test_db import Held

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def count_calls(node: Node) -> list[int]:
    """Record how many requests each call of `store_all_txn` gets (the merged call first, then each alone)."""
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
        await held.queued(len(tasks), node.entries.merged)
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
