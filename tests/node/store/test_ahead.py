"""node/store/ahead.py: what stored links and subscriptions say of entries about to arrive (`NAMED_SQL`)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from node.service import Node
from node.store.ahead import NAMED_SQL, NAMED_SQL_PG, Named
from node.store.conn import POSTGRESQL, Conn, engine_of
from tests.conftest import AgentCreds
from wire.api import PostEntry, SubscriptionIn

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def named(node: Node, hashes: list[str]) -> Named:
    """NAMED_SQL's answer for `hashes` (NAMED_SQL_PG's on PostgreSQL, whose :h is an array)."""

    def read(conn: Conn) -> Any:
        if engine_of(conn) == POSTGRESQL:
            return conn.execute(f"SELECT {NAMED_SQL_PG}", {"h": hashes}).fetchone()
        return conn.execute(f"SELECT {NAMED_SQL}", {"h": json.dumps(hashes)}).fetchone()

    row = await node.db.read(read)
    return Named(*(bool(flag) for flag in row))


async def post(node: Node, who: AgentCreds, content: str, links: list[dict[str, str]]) -> str:
    body = msgspec.convert(
        {"entry_type": "finding", "performative": "inform", "content": content, "links": links}, PostEntry
    )
    entry, _ = await node.entries.post(who.agent_id, body, None)
    return entry.record_hash


async def test_stored_links_name_entries_before_they_arrive(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    later, contradicted, unrelated = "a" * 64, "b" * 64, "d" * 64
    assert await named(node, [later, contradicted, unrelated]) == Named(False, False, False)
    await post(node, alice, "replaces one to come", [{"target": later, "link_type": "supersedes"}])
    await post(node, alice, "against one to come", [{"target": contradicted, "link_type": "contradicts"}])
    assert await named(node, [later]) == Named(True, False, False)
    assert await named(node, [contradicted]) == Named(False, True, False)
    assert await named(node, [unrelated, "e" * 64]) == Named(False, False, False)
    assert await named(node, [unrelated, later, contradicted]) == Named(True, True, False)
    assert await named(node, []) == Named(False, False, False)


async def test_a_contradicts_link_from_the_arriving_entry_counts_too(node: Node, make_agent: MakeAgent) -> None:
    """A link record stored before its source entry (links may arrive first through sync) names that source."""
    alice = await make_agent("alice")
    target = await post(node, alice, "a target", [])
    source = "f" * 64

    def link_first(conn: Conn) -> None:
        conn.execute(
            "INSERT INTO links (origin_hash, ordinal, source_hash, target_hash, link_type, author_id, created_at,"
            " annotation) VALUES (?, 0, ?, ?, 'contradicts', ?, '2026-01-01T00:00:00.000Z', '')",
            ("9" * 64, source, target, alice.agent_id),
        )

    await node.db.write(link_first)
    assert await named(node, [source]) == Named(False, True, False)


async def test_any_subscription_is_said(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await node.inbox.subscribe(alice.agent_id, msgspec.convert({"tags": ["x"]}, SubscriptionIn))
    assert await named(node, ["a" * 64]) == Named(False, False, True)
