"""node/reads.py: reading entries with their neighbourhood and searching, called directly (REST: test_post_read.py,
test_search.py, test_traversal.py, test_quick_reads.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from node.errors import InvalidInput
from node.queries import parse_since
from node.service import Node
from node.wire.api import LinkSpec, PostEntry, ReadQuery, SearchQuery
from tests.conftest import AgentCreds

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def test_read_by_id_and_hash_with_neighbours_and_missing_refs(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    base, _ = await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "the base"), None)
    reply, _ = await node.entries.post(
        alice.agent_id,
        PostEntry("finding", "confirm", "agreed", links=[LinkSpec(target=base.record_hash, link_type="supports")]),
        None,
    )
    unknown = "c" * 64
    result = await node.reads.read([str(base.id), base.record_hash, "nope", unknown, "nope"], ReadQuery(hops=1))
    assert [e.id for e in result.entries] == [base.id, reply.id]  # the base once, and its neighbour
    assert result.missing == ["nope", unknown]  # a ref given twice is missing once
    assert [(link.source, link.target) for link in result.links] == [(reply.record_hash, base.record_hash)]
    assert not result.truncated
    alone = await node.reads.read([str(base.id)], ReadQuery(include_links=False))
    assert [e.id for e in alone.entries] == [base.id] and alone.links == []


async def test_search_pages_and_walks_from_its_page(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    posted = [
        (await node.entries.post(alice.agent_id, PostEntry("finding", "inform", f"zeppelin note {i}"), None))[0]
        for i in range(3)
    ]
    other, _ = await node.entries.post(
        alice.agent_id,
        PostEntry(
            "finding", "inform", "unrelated", links=[LinkSpec(target=posted[0].record_hash, link_type="responds_to")]
        ),
        None,
    )
    page = await node.reads.search(SearchQuery(q="zeppelin", limit=2))
    assert len(page.entries) == 2 and page.next_offset == 2 and page.links == []
    rest = await node.reads.search(SearchQuery(q="zeppelin", limit=2, offset=2))
    assert len(rest.entries) == 1 and rest.next_offset is None
    walked = await node.reads.search(SearchQuery(q="zeppelin", limit=10, hops=1))
    assert {e.id for e in walked.entries} == {e.id for e in posted} | {other.id}
    assert [link.source for link in walked.links] == [other.record_hash]


async def test_search_refuses_bad_text_and_times(node: Node) -> None:
    with pytest.raises(InvalidInput) as no_words:
        await node.reads.search(SearchQuery(q="!!! ???"))
    assert (no_words.value.code, no_words.value.field) == ("invalid_query", "$.q")
    with pytest.raises(InvalidInput) as bad_since:
        await node.reads.search(SearchQuery(since="yesterday"))
    assert bad_since.value.field == "$.since"


def test_parse_since_takes_iso_times_with_a_timezone() -> None:
    assert parse_since(None, "$.since") is None
    assert parse_since("2026-01-31T12:00:00Z", "$.since") == 1_769_860_800_000
    assert parse_since("2026-01-31T13:00:00+01:00", "$.since") == 1_769_860_800_000
    with pytest.raises(InvalidInput, match="timezone") as naive:
        parse_since("2026-01-31T12:00:00", "$.after")
    assert naive.value.field == "$.after"
    with pytest.raises(InvalidInput, match="ISO 8601"):
        parse_since("last week", "$.since")


async def test_words_whose_searches_overran_twice_go_to_a_reader_thread(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "zeppelins float"), None)
    node.db.inline_budget_s = 1e-9  # every search on the event loop now runs over its budget
    for _ in range(2):
        assert len((await node.reads.search(SearchQuery(q="Zeppelins"))).entries) == 1
    assert node.reads.heavy_words.any_of(["zeppelins"])
    moved = node.db.read_stats.moved
    assert len((await node.reads.search(SearchQuery(q="zeppelins"))).entries) == 1
    assert node.db.read_stats.moved == moved  # straight to a reader thread: nothing tried inline, nothing moved
