"""Mixed concurrent traffic on one real server: no 5xx, every acknowledged write is stored once,
and every notification is handed out to exactly one poll."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import count

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def test_mixed_concurrent_traffic(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    agents = [await make_agent(name) for name in ("ann", "ben", "cat", "dan")]
    reader = agents[3]
    sub = await client.post("/v1/subscriptions", json={"tags": ["load"]}, headers=reader.headers)
    assert sub.status == 201
    rng = random.Random(7)
    created: list[dict[str, Any]] = []
    statuses: list[int] = []
    handed: list[int] = []

    async def writer(who: AgentCreds, n: int) -> None:
        for i in range(n):
            body: dict[str, Any] = {
                "entry_type": "finding",
                "performative": "inform",
                "content": f"{who.name} load entry {i}",
                "tags": ["load"] if i % 2 else ["other"],
            }
            if created and rng.random() < 0.5:
                body["links"] = [{"target": rng.choice(created)["record_hash"], "link_type": "supports"}]
            headers = {**who.headers, "Idempotency-Key": f"{who.name}-{i}"}
            resp = await client.post("/v1/entries", json=body, headers=headers)
            statuses.append(resp.status)
            if resp.status == 201:
                created.append(await resp.json())
            if i % 5 == 0:  # a retry of the same request must not duplicate
                again = await client.post("/v1/entries", json=body, headers=headers)
                statuses.append(again.status)

    async def searcher() -> None:
        for _ in range(20):
            resp = await client.get("/v1/search", params={"q": "load entry", "hops": "1"}, headers=reader.headers)
            statuses.append(resp.status)
            await asyncio.sleep(0)

    async def poller() -> None:
        for _ in range(20):
            resp = await client.get("/v1/inbox", params={"limit": "5"}, headers=reader.headers)
            statuses.append(resp.status)
            got = (await resp.json())["notifications"]
            handed.extend(n["notification_id"] for n in got)
            if got:
                ack = await client.post(
                    "/v1/inbox/ack", json={"ids": [n["notification_id"] for n in got]}, headers=reader.headers
                )
                statuses.append(ack.status)
            await asyncio.sleep(0)

    await asyncio.gather(*(writer(a, 20) for a in agents[:3]), searcher(), searcher(), poller(), poller(), poller())
    assert all(s < 500 for s in statuses), sorted(set(statuses))
    assert set(statuses) <= {200, 201}
    assert len(created) == 60
    assert await count(node, "entries") == 60
    assert await count(node, "idempotency") == 60
    assert len(handed) == len(set(handed))  # no notification leased to two polls
    # whatever the pollers did not get is still there, exactly once
    rest = await client.get("/v1/inbox", params={"limit": "200"}, headers=reader.headers)
    remaining = [n["notification_id"] for n in (await rest.json())["notifications"]]
    assert not set(remaining) & set(handed)
    assert len(handed) + len(remaining) == 30  # the entries tagged 'load'
