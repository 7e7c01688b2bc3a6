"""The feed (node/feed/service.py) on a real node: arrival order, cursors, synthetic entries, waiting for a new
entry."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from node.feed.service import Feed
from node.feed.store import newest_id
from node.service import Node
from tests.conftest import AgentCreds
from wire.api import PostEntry
from wire.feed import FeedQuery


async def _post(node: Node, who: AgentCreds, content: str, truth_state: str = "fact") -> int:
    body = PostEntry(entry_type="finding", performative="inform", content=content, truth_state=truth_state)  # type: ignore[arg-type]
    entry, _ = await node.entries.post(who.agent_id, body, None)
    return entry.id


async def test_pages_follow_arrival_order_and_the_cursor_misses_nothing(
    node: Node, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice = await make_agent("alice")
    ids = [await _post(node, alice, f"entry {i}") for i in range(5)]
    first = await node.feed.page(FeedQuery(limit=2), viewer=None)
    assert [e.id for e in first.entries] == ids[:2]
    assert first.next == ids[1] and first.head == ids[-1]
    second = await node.feed.page(FeedQuery(after=first.next, limit=2), viewer=None)
    third = await node.feed.page(FeedQuery(after=second.next, limit=2), viewer=None)
    assert [e.content for e in second.entries + third.entries] == ["entry 2", "entry 3", "entry 4"]
    assert third.next == third.head  # a short page: the reader is at the head
    empty = await node.feed.page(FeedQuery(after=third.next), viewer=None)
    assert empty.entries == [] and empty.next == third.next


async def test_synthetic_entries_only_when_asked_and_the_cursor_passes_them(
    node: Node, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice = await make_agent("alice")
    real = await _post(node, alice, "a fact")
    dream = await _post(node, alice, "a simulation", truth_state="simulation")
    page = await node.feed.page(FeedQuery(), viewer=None)
    assert [e.id for e in page.entries] == [real]
    assert page.next == dream  # skipped, and not scanned again
    both = await node.feed.page(FeedQuery(include_synthetic=True), viewer=None)
    assert [e.id for e in both.entries] == [real, dream]


async def test_a_long_poll_returns_when_an_entry_arrives(
    node: Node, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice = await make_agent("alice")
    before = await _post(node, alice, "old news")
    waiting = asyncio.ensure_future(node.feed.page(FeedQuery(after=before, wait_ms=25_000), viewer=None))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    fresh = await _post(node, alice, "breaking news")
    page = await asyncio.wait_for(waiting, 10)
    assert [e.id for e in page.entries] == [fresh]


async def test_a_long_poll_without_news_answers_empty_and_shutdown_wakes_it(node: Node) -> None:
    page = await node.feed.page(FeedQuery(wait_ms=50), viewer=None)
    assert page.entries == [] and page.next == 0 and page.head == 0
    waiting = asyncio.ensure_future(node.feed.page(FeedQuery(wait_ms=25_000), viewer=None))
    await asyncio.sleep(0.05)
    node.feed.closing.set()
    assert (await asyncio.wait_for(waiting, 10)).entries == []


async def test_newest_id_is_the_largest_entry_id(
    node: Node, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    assert await node.db.read(newest_id) == 0
    alice = await make_agent("alice")
    last = [await _post(node, alice, f"n{i}") for i in range(3)][-1]
    assert await node.db.read(newest_id) == last
    assert isinstance(node.feed, Feed)


async def test_a_cursor_beyond_the_newest_entry_answers_at_once_and_moves_back(
    node: Node, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    """A cursor from another node, or kept from before a restore to an older backup: the next entry still shows."""
    alice = await make_agent("alice")
    head = await _post(node, alice, "the newest here")
    page = await asyncio.wait_for(node.feed.page(FeedQuery(after=head + 1000, wait_ms=25_000), viewer=None), 10)
    assert page.entries == [] and page.next == head
    fresh = await _post(node, alice, "after the restore")
    assert [e.id for e in (await node.feed.page(FeedQuery(after=page.next), viewer=None)).entries] == [fresh]
