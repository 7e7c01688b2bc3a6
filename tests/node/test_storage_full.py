"""A full disk is a clear 507 that stores nothing, and the node carries on once space is back.

SQLite's `max_page_count` on the writer connection makes the database "full" without filling a disk.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import count, post, problem

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def cap(extra_pages: int) -> Callable[[sqlite3.Connection], int]:
    def run(conn: sqlite3.Connection) -> int:
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
        return int(conn.execute(f"PRAGMA max_page_count = {pages + extra_pages}").fetchone()[0])

    return run


def uncap(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA max_page_count = 1073741823").fetchone()


async def test_full_database_is_507_and_nothing_is_stored(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    alice = await make_agent("alice")
    kept = await post(client, alice, content="written before the disk filled")
    before = await count(node)
    await node.db.write(cap(2))
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
        await node.db.write(uncap)
    assert await count(node) == before
    assert (await post(client, alice, content="space is back"))["id"] > kept["id"]
