"""The side channel docs/spaces.md documents and keeps, measured: BM25's document frequencies count every entry the
index holds, so a space's entries move the order of public results for a reader who cannot see them (never what the
page holds: only readable entries are on it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds
from tests.node.spaces.test_posts import get, post, space_with

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def order(client: TestClient, who: AgentCreds) -> list[int]:
    found = await get(client, "/v1/search?q=alpha%20beta&fresh=true", who)
    return [e["id"] for e in found["entries"]]


async def test_a_spaces_entries_move_the_order_of_public_results(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, eve = await make_agent("owner"), await make_agent("eve")
    many_alpha = await post(client, owner, "alpha alpha alpha beta")
    many_beta = await post(client, owner, "beta beta beta alpha")
    await post(client, owner, "alpha beta gamma filler words here")  # both words somewhere else too
    before = await order(client, eve)
    space = await space_with(client, owner)
    for i in range(30):  # private entries holding only one of the two words: they make it common
        await post(client, owner, f"beta note {i}", space=space)
    after = await order(client, eve)
    assert set(before) == set(after)  # the page holds the same public entries, nothing of the space
    assert before.index(many_beta["id"]) < before.index(many_alpha["id"])  # equal weights: the newer first
    assert after.index(many_alpha["id"]) < after.index(many_beta["id"])  # beta is now common: alpha weighs more
