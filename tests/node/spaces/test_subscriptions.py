"""Subscriptions to spaces (issue 37; docs/spaces.md): `spaces` narrows a subscription to those spaces' entries, a
subscription without it matches public entries and those of every space its agent reads, and one cannot subscribe to
a space one may not read."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds
from tests.node.spaces.test_posts import get, post, space_with
from tests.node.spaces.test_routes import call

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def notified(client: TestClient, who: AgentCreds) -> set[str]:
    return {n["record_hash"] for n in (await get(client, "/v1/inbox?limit=100", who))["notifications"]}


async def test_a_subscription_to_one_space(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    owner, carol, dave, eve = [await make_agent(n) for n in ("owner", "carol", "dave", "eve")]
    garden = await space_with(client, owner, reader=carol)
    attic = await space_with(client, owner, reader=carol, reader2=dave)
    made = await call(client, "POST", "/v1/subscriptions", carol, 201, {"tags": ["plan"], "spaces": [garden]})
    assert made["spaces"] == [garden]
    again = await call(client, "POST", "/v1/subscriptions", carol, 200, {"tags": ["plan"], "spaces": [garden]})
    assert again["id"] == made["id"]  # the same filter is the same subscription
    await call(client, "POST", "/v1/subscriptions", dave, 201, {"tags": ["plan"]})  # no spaces: all it reads
    in_garden = await post(client, owner, "garden plan", space=garden, tags=["plan"])
    in_attic = await post(client, owner, "attic plan", space=attic, tags=["plan"])
    public = await post(client, owner, "public plan", tags=["plan"])
    assert await notified(client, carol) == {in_garden["record_hash"]}
    assert await notified(client, dave) == {in_attic["record_hash"], public["record_hash"]}
    problem = await call(client, "POST", "/v1/subscriptions", eve, 404, {"tags": ["plan"], "spaces": [garden]})
    assert (problem["code"], problem["field"]) == ("unknown_space", "$.spaces[0]")
    assert (await get(client, "/v1/subscriptions", eve))["subscriptions"] == []
    listed = (await get(client, "/v1/subscriptions", dave))["subscriptions"]
    assert [s["spaces"] for s in listed] == [[]]


async def test_a_poll_of_one_spaces_notifications(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    owner, carol, eve = await make_agent("owner"), await make_agent("carol"), await make_agent("eve")
    garden = await space_with(client, owner, reader=carol)
    await call(client, "POST", "/v1/subscriptions", carol, 201, {"tags": ["plan"]})
    in_garden = await post(client, owner, "garden plan", space=garden, tags=["plan"])
    public = await post(client, owner, "public plan", tags=["plan"])
    only = await get(client, f"/v1/inbox?space={garden}", carol)
    assert [n["record_hash"] for n in only["notifications"]] == [in_garden["record_hash"]]
    assert only["notifications"][0]["space"] == garden
    rest = await get(client, "/v1/inbox", carol)  # the space's one is leased: the public one is left
    assert [(n["record_hash"], n["space"]) for n in rest["notifications"]] == [(public["record_hash"], None)]
    problem = await get(client, f"/v1/inbox?space={garden}", eve, 404)
    assert (problem["code"], problem["field"]) == ("unknown_space", "$.space")
