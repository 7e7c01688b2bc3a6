"""node/reads.py: reading entries with their neighbourhood and searching, called directly (REST: test_post_read.py,
test_search.py, test_traversal.py, test_quick_reads.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from node.errors import InvalidInput, SearchIndexBuilding
from node.queries import parse_since
from node.reads import INLINE_HITS
from node.search_index.indexer import Indexer
from node.service import Node
from node.wire.api import LinkSpec, PostEntry, ReadQuery, SearchQuery
from tests.conftest import AgentCreds

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def catch_up(node: Node) -> None:
    """Index what the node holds (no app runs the indexing task here)."""
    assert node.search_index is not None
    await Indexer(node.db, node.search_index).catch_up()


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
    await catch_up(node)
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


async def test_a_search_with_words_needs_the_index_and_one_by_filters_does_not(
    node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    posted, _ = await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "zeppelins float"), None)
    index, node.reads.index = node.reads.index, None  # as when the index could not be opened
    with pytest.raises(SearchIndexBuilding) as refused:
        await node.reads.search(SearchQuery(q="zeppelins"))
    assert refused.value.status == 503 and "Retry-After" in refused.value.headers
    assert [e.id for e in (await node.reads.search(SearchQuery(q="  "))).entries] == [posted.id]  # no words
    node.reads.index = index
    await catch_up(node)
    assert [e.id for e in (await node.reads.search(SearchQuery(q="Zeppelins"))).entries] == [posted.id]
    assert node.reads.answered == {"index": 1, "sql": 1}


async def test_a_deep_page_is_searched_on_a_reader_thread(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "zeppelins float"), None)
    await catch_up(node)
    inline, moved = node.db.read_stats.inline, node.db.read_stats.moved
    assert len((await node.reads.search(SearchQuery(q="zeppelins"))).entries) == 1
    assert (node.db.read_stats.inline, node.db.read_stats.moved) == (inline + 1, moved)  # on the loop
    deep = SearchQuery(q="zeppelins", limit=100, offset=INLINE_HITS)
    assert (await node.reads.search(deep)).entries == []
    assert (node.db.read_stats.inline, node.db.read_stats.moved) == (inline + 1, moved)  # not tried inline
