"""Link semantics of seed 000 through a real server: `same_as` both ways, `supersedes` of another author's entry
only when its author accepts it, and hidden simulations hidden with their links."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import entry_record, get_json, hash_of, link, post, self_signer

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def read(client: TestClient, who: Any, ref: str | int, **params: str) -> dict[str, Any]:
    return await get_json(client, f"/v1/entries/{ref}", who, params=params)


async def one(client: TestClient, who: Any, ref: str | int) -> dict[str, Any]:
    entries = (await read(client, who, ref))["entries"]
    assert len(entries) == 1
    return dict(entries[0])


# ---- same_as ------------------------------------------------------------------------------------------------


async def test_same_as_is_followed_both_ways(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    a = await post(client, alice, content="the boiler is a Vaillant ecoTEC")
    b = await post(client, alice, content="our boiler: Vaillant ecoTEC plus")
    c = await post(client, alice, content="boiler service is due in March")
    await link(client, alice, source=str(a["id"]), target=str(b["id"]), link_type="same_as")
    await link(client, alice, source=str(b["id"]), target=str(c["id"]), link_type="supports")

    def ids(body: dict[str, Any]) -> list[int]:
        return sorted(e["id"] for e in body["entries"])

    # from the target, outbound: the same_as link is walked back to its source
    assert ids(await read(client, alice, b["id"], hops="1", direction="outbound")) == sorted(
        [a["id"], b["id"], c["id"]]
    )
    # from the source, inbound: the same_as link is walked forward to its target
    assert ids(await read(client, alice, a["id"], hops="1", direction="inbound")) == sorted([a["id"], b["id"]])
    # other link types keep their direction
    assert ids(await read(client, alice, c["id"], hops="1", direction="outbound")) == [c["id"]]
    # a link_types filter still applies
    assert ids(await read(client, alice, b["id"], hops="1", direction="outbound", link_types="supports")) == sorted(
        [b["id"], c["id"]]
    )
    found = await get_json(
        client, "/v1/search", alice, params={"q": "ecoTEC plus", "hops": "1", "direction": "outbound"}
    )
    assert sorted(e["id"] for e in found["entries"]) == sorted([a["id"], b["id"], c["id"]])


# ---- supersedes ---------------------------------------------------------------------------------------------


async def test_another_author_s_supersedes_is_a_claim_until_accepted_by_ack(
    client: TestClient, make_agent: MakeAgent
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    old = await post(client, alice, content="the router password is on the fridge")
    new = await post(
        client,
        bob,
        content="the router password moved to the vault",
        links=[{"target": str(old["id"]), "link_type": "supersedes"}],
    )
    entry = await one(client, bob, old["id"])
    assert entry["superseded"] is False and entry["superseded_claims"] == [new["record_hash"]]
    # bob's own entry is untouched, and a claim by a third party changes nothing either
    assert (await one(client, bob, new["id"]))["superseded_claims"] == []
    carol = await make_agent("carol")
    await post(client, carol, entry_type="finding", performative="ack", content="agreed, moved",
               links=[{"target": new["record_hash"], "link_type": "responds_to"}])  # fmt: skip
    assert (await one(client, alice, old["id"]))["superseded"] is False
    # the superseded entry's author acknowledges the superseding entry: now it is superseded
    await post(client, alice, performative="ack", content="yes, the vault",
               links=[{"target": new["record_hash"], "link_type": "responds_to"}])  # fmt: skip
    entry = await one(client, alice, old["id"])
    assert entry["superseded"] is True and entry["superseded_claims"] == []


async def test_the_author_s_own_supersedes_link_accepts_a_claim(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    old = await post(client, alice, content="bins go out on Tuesday")
    new = await post(client, bob, content="bins go out on Wednesday now",
                     links=[{"target": old["record_hash"], "link_type": "supersedes"}])  # fmt: skip
    assert (await one(client, alice, old["id"]))["superseded"] is False
    # a link record by bob again changes nothing; the same link asserted by alice does
    await link(client, bob, 200, source=new["record_hash"], target=old["record_hash"], link_type="supersedes")
    assert (await one(client, alice, old["id"]))["superseded"] is False
    await link(client, alice, source=new["record_hash"], target=old["record_hash"], link_type="supersedes")
    entry = await one(client, alice, old["id"])
    assert entry["superseded"] is True and entry["superseded_claims"] == []


async def test_own_supersedes_still_supersedes(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    old = await post(client, alice, content="version one")
    await post(client, alice, content="version two", links=[{"target": str(old["id"]), "link_type": "supersedes"}])
    entry = await one(client, alice, old["id"])
    assert entry["superseded"] is True and entry["superseded_claims"] == []


async def test_acceptance_does_not_depend_on_arrival_order(client: TestClient, node: Node, clock: FakeClock) -> None:
    """The acceptance arrives first, then the claim, then the superseded entry: the same state as in order."""
    alice, bob = await self_signer(node, "alice"), await self_signer(node, "bob")
    t = int(clock() * 1000) // 1000 * 1000
    old = entry_record(alice.key, "the spare key is under the mat", created_ms=t)
    new = entry_record(bob.key, "the spare key is with the neighbour", created_ms=t + 1,
                       links=[{"target": hash_of(old), "link_type": "supersedes", "annotation": ""}])  # fmt: skip
    accept = entry_record(alice.key, "ok", created_ms=t + 2, performative="ack",
                          links=[{"target": hash_of(new), "link_type": "responds_to", "annotation": ""}])  # fmt: skip
    for who, record in ((alice, accept), (bob, new), (alice, old)):
        resp = await client.post("/v1/entries", json={"record": record}, headers=who.headers)
        assert resp.status == 201, await resp.text()
    entry = await one(client, alice, hash_of(old))
    assert entry["superseded"] is True and entry["superseded_claims"] == []


# ---- hidden simulations -------------------------------------------------------------------------------------


async def test_a_hidden_simulation_shows_no_links(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    fact = await post(client, alice, content="the heat pump draws 2 kW")
    sim = await post(client, alice, content="a colder winter might double it", truth_state="simulation",
                     links=[{"target": str(fact["id"]), "link_type": "derived_from"}])  # fmt: skip
    other = await post(client, alice, content="the meter reads 2.1 kW")
    await link(client, alice, source=str(other["id"]), target=str(sim["id"]), link_type="contradicts")

    hidden = await read(client, alice, sim["record_hash"], include_links="true", hops="2")
    assert hidden["entries"] == [] and hidden["links"] == []
    shown = await read(client, alice, sim["record_hash"], include_links="true", include_synthetic="true")
    assert len(shown["links"]) == 2
    # from a visible entry, the links to and from the simulation stay hidden too
    around = await read(client, alice, fact["id"], include_links="true", hops="2")
    assert [e["id"] for e in around["entries"]] == [fact["id"]] and around["links"] == []
    found = await get_json(client, "/v1/search", alice, params={"q": "meter", "hops": "2"})
    assert [e["id"] for e in found["entries"]] == [other["id"]] and found["links"] == []


async def test_a_simulation_notifies_its_addressees_only(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob, carol = await make_agent("alice"), await make_agent("bob"), await make_agent("carol")
    resp = await client.post("/v1/subscriptions", json={"tags": ["heat"]}, headers=bob.headers)
    assert resp.status == 201
    fact = await post(client, carol, content="the heat pump draws 2 kW", tags=["heat"])
    sim = await post(client, alice, content="a colder winter might double it", tags=["heat"],
                     truth_state="simulation", directed_to=["carol"])  # fmt: skip
    await post(client, alice, content="the pump is fine", tags=["heat"], truth_state="simulation",
               links=[{"target": str(fact["id"]), "link_type": "contradicts"}])  # fmt: skip

    async def notified(who: AgentCreds) -> list[int]:
        body = await get_json(client, "/v1/inbox", who)
        return [n["entry_id"] for n in body["notifications"]]

    assert await notified(bob) == [fact["id"]]  # subscribed: the simulations stay hidden
    # addressed: the author asked for carol to see it; the simulated contradiction of her entry does not notify
    assert await notified(carol) == [sim["id"]]
