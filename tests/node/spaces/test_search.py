"""Search inside spaces (docs/spaces.md, "Read paths"): the index filters by its `space` field, so a page is full and
`next_offset` exact however many matches lie in spaces the reader cannot see, whichever filter the reader's search
takes (node/search_index/indexer.py `space_filter`: no filter, the spaces it sees, or those it does not)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from node.search_index.index import PUBLIC_SPACE
from node.search_index.indexer import space_filter
from node.service import Node
from node.spaces.sight import OPERATOR, PUBLIC, Sight
from tests.conftest import AgentCreds
from tests.node.spaces.test_posts import get, post, space_with

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def pages(client: TestClient, who: AgentCreds, limit: int) -> list[list[int]]:
    """Every page of a search for the shared word, following `next_offset` to the end."""
    out, offset = [], 0
    while True:
        found = await get(client, f"/v1/search?q=shared&fresh=true&limit={limit}&offset={offset}", who)
        out.append([e["id"] for e in found["entries"]])
        if found["next_offset"] is None:
            return out
        offset = found["next_offset"]


async def test_pages_stay_full_when_most_matches_are_hidden(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, reader, eve = await make_agent("owner"), await make_agent("reader"), await make_agent("eve")
    seen_space = await space_with(client, owner, reader=reader)
    others = [await space_with(client, owner) for _ in range(3)]
    public = [await post(client, owner, f"shared public {i}") for i in range(5)]
    mine = [await post(client, owner, f"shared mine {i}", space=seen_space) for i in range(3)]
    for n, space in enumerate(others):  # most matches: in spaces the reader and eve cannot see
        for i in range(8):
            await post(client, owner, f"shared hidden {n} {i}", space=space)
    due = {e["id"] for e in public + mine}
    for who, expected in ((reader, due), (eve, {e["id"] for e in public})):
        walked = await pages(client, who, 2)
        assert all(len(page) == 2 for page in walked[:-1])  # full pages (the last may be empty: a full one before it)
        flat = [i for page in walked for i in page]
        assert len(flat) == len(set(flat)) and set(flat) == expected  # no skip, no repeat, nothing hidden
        whole = await get(client, "/v1/search?q=shared&fresh=true&limit=50", who)
        assert {e["id"] for e in whole["entries"]} == expected and whole["next_offset"] is None


async def test_the_filter_a_reader_takes(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    owner = await make_agent("owner")
    spaces = [await space_with(client, owner) for _ in range(4)]
    for space in spaces:
        await post(client, owner, "filler", space=space)

    async def filter_of(sight: Sight, wanted: list[str] | None = None) -> tuple[list[str] | None, list[str]]:
        return await node.db.read(lambda c: space_filter(c, sight, wanted or []))

    assert await filter_of(OPERATOR) == (None, [])
    assert await filter_of(PUBLIC) == ([PUBLIC_SPACE], [])
    assert await filter_of(Sight(frozenset(spaces))) == (None, [])  # sees every space holding entries: no filter
    assert await filter_of(Sight(frozenset(spaces[:3]))) == (None, [spaces[3]])  # fewer hidden than seen: excluded
    seen_one = await filter_of(Sight(frozenset(spaces[:1])))
    assert seen_one == ([PUBLIC_SPACE, spaces[0]], [])  # more hidden than seen: what it sees
    assert await filter_of(Sight(frozenset(spaces[:1])), [spaces[0]]) == ([spaces[0]], [])  # what it asks for
