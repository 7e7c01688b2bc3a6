"""A full disk is a clear 507 that stores nothing, and the node carries on once space is back.

SQLite's `max_page_count` on the writer connection makes the database "full" without filling a disk, and a
trigger raising PostgreSQL's `disk_full` does on PostgreSQL (tests/node/disk_full.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import count, post, problem
from tests.node.disk_full import fill, free

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def test_full_database_is_507_and_nothing_is_stored(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    alice = await make_agent("alice")
    kept = await post(client, alice, content="written before the disk filled")
    before = await count(node)
    await node.db.write(fill(2))
    try:
        for i in range(3):
            body = await post(client, alice, 507, content=f"{i} " + "x" * 60_000, tags=["big"])
            problem(body, 507, "storage_full")
        # concurrent writes in one group commit all get the same clear answer
        results = await asyncio.gather(
            *(post(client, alice, None, content=f"batch {i} " + "y" * 60_000) for i in range(6))
        )
        assert {r["code"] for r in results} == {"storage_full"}
    finally:
        await node.db.write(free)
    assert await count(node) == before
    assert (await post(client, alice, content="space is back"))["id"] > kept["id"]
