"""Default mode inside a space (issue 37; docs/spaces.md, docs/default-mode.md): a reflection asked in a space reads
that space and the public federation, its candidates land in the space and only its readers see them, and their
promotion posts the entry (and its derived links) into the space. Without a space, default mode reads public only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds
from tests.node.spaces.test_posts import get, post, space_with
from tests.node.spaces.test_routes import call

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
DM = "/v1/default-mode"


async def test_a_reflection_in_a_space_stays_in_it(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    owner, carol, eve = await make_agent("owner"), await make_agent("carol"), await make_agent("eve")
    space = await space_with(client, owner, writer=carol)
    private = await post(client, owner, "We decided to move the zeppelin hangar", space=space, tags=["session:s1"])
    public = await post(client, owner, "We decided to paint the shed", tags=["session:s1"])
    outside = await call(client, "POST", f"{DM}/reflect-session", owner, 201, {"session_id": "s1"})
    assert [c["evidence_refs"] for c in outside["candidates"]] == [[public["record_hash"]]]  # public only
    assert all(c["space"] is None for c in outside["candidates"])
    made = await call(client, "POST", f"{DM}/reflect-session", owner, 201, {"session_id": "s1", "space": space})
    inside = {c["evidence_refs"][0]: c for c in made["candidates"]}
    assert set(inside) == {private["record_hash"], public["record_hash"]}  # the space's and the public ones
    cand = inside[private["record_hash"]]
    assert cand["space"] == space
    # only the space's readers see it
    assert cand["id"] in [c["id"] for c in (await get(client, f"{DM}/candidates", carol))["candidates"]]
    assert cand["id"] not in [c["id"] for c in (await get(client, f"{DM}/candidates", eve))["candidates"]]
    assert (await get(client, f"{DM}/candidates/{cand['id']}", eve, 404))["code"] == "candidate_not_found"
    await call(client, "POST", f"{DM}/candidates/{cand['id']}/review", eve, 404, {"decision": "approve"})
    await call(client, "POST", f"{DM}/promote/{cand['id']}", eve, 404)
    # promoted by a writer of the space: the entry lands in it
    promoted = await call(client, "POST", f"{DM}/promote/{cand['id']}", carol, 201)
    entry = promoted["entry"]
    assert entry["space"] == space and entry["author_id"] == carol.agent_id
    assert (await get(client, f"/v1/entries/{entry['id']}", eve, 404))["code"] == "entry_not_found"
    links = (await get(client, f"/v1/entries/{entry['id']}?hops=1", carol))["links"]
    assert {link["link_type"] for link in links} == {"derived_from"}


async def test_who_may_reflect_in_a_space(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    owner, carol, eve = await make_agent("owner"), await make_agent("carol"), await make_agent("eve")
    space = await space_with(client, owner, reader=carol)
    await post(client, owner, "We decided to fix the roof", space=space)
    body = {"space": space, "limit": 10}
    problem = await call(client, "POST", f"{DM}/consolidate", carol, 403, body)
    assert (problem["code"], problem["field"]) == ("not_a_writer", "$.space")
    problem = await call(client, "POST", f"{DM}/consolidate", eve, 404, body)
    assert (problem["code"], problem["field"]) == ("unknown_space", "$.space")
    summary = await call(client, "POST", f"{DM}/consolidate", owner, 201, body)
    assert summary["space"] == space and len(summary["evidence_refs"]) == 1
