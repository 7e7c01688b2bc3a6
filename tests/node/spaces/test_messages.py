"""Bus messages inside a space over REST (issue 37; docs/spaces.md): writers send, readers read, the addressee must
be a reader, non-members see nothing, and every refusal stores nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from identity import records
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import self_signer
from tests.node.spaces.test_posts import get, space_with
from tests.node.spaces.test_routes import call, record_count
from wire import unsigned
from wire.time import format_ms
from wire.workflows import PostMessage

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
BUS = "/v1/agent-workflows/messages"


async def send(client: TestClient, who: AgentCreds, status: int = 201, **fields: Any) -> dict[str, Any]:
    return await call(client, "POST", BUS, who, status, {"message_type": "note", **fields})


async def test_a_spaces_messages_reach_its_readers_only(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    owner, bob, carol, eve = [await make_agent(n) for n in ("owner", "bob", "carol", "eve")]
    space = await space_with(client, owner, writer=bob, reader=carol)
    sent = await send(client, bob, body="the plan", project="garden", to_agent=carol.agent_id, space=space)
    public = await send(client, bob, body="hello all", project="garden")
    assert sent["space"] == space and public["space"] is None
    scope = await node.db.read(
        lambda c: tuple(c.execute("SELECT scope, space FROM records WHERE hash = ?", (sent["record_hash"],)).fetchone())
    )
    assert scope == ("federation", space)  # served only to the space's hosts
    for who in (owner, bob, carol):
        assert {m["id"] for m in (await get(client, BUS, who))["messages"]} == {sent["id"], public["id"]}
    assert [m["id"] for m in (await get(client, BUS, eve))["messages"]] == [public["id"]]
    assert [m["id"] for m in (await get(client, f"{BUS}?agent={carol.agent_id}", eve))["messages"]] == []
    assert [m["id"] for m in (await get(client, f"{BUS}?space={space}", carol))["messages"]] == [sent["id"]]
    problem = await get(client, f"{BUS}?space={space}", eve, 404)
    assert (problem["code"], problem["field"]) == ("unknown_space", "$.space")
    projects = await get(client, "/dashboard/api/bus/projects", eve)
    assert [(p["project"], p["messages"]) for p in projects["projects"]] == [("garden", 1)]  # counts what eve sees


async def test_who_may_not_send_into_a_space_stores_nothing(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, carol, eve = await make_agent("owner"), await make_agent("carol"), await make_agent("eve")
    space = await space_with(client, owner, reader=carol)
    before = await record_count(node)
    problem = await send(client, carol, 403, body="a reader writes", space=space)
    assert (problem["code"], problem["field"]) == ("not_a_writer", "$.space")
    problem = await send(client, eve, 404, body="a stranger writes", space=space)
    assert (problem["code"], problem["field"]) == ("unknown_space", "$.space")
    problem = await send(client, owner, 409, body="to a stranger", space=space, to_agent=eve.agent_id)
    assert (problem["code"], problem["field"]) == ("addressee_not_a_reader", "$.to_agent")
    problem = await send(client, owner, 422, body="bad id", space="nope")
    assert (problem["code"], problem["field"]) == ("validation_error", "$.space")
    assert await record_count(node) == before


async def test_a_self_signed_message_in_a_space(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    owner = await make_agent("owner")
    rover = await self_signer(node, "rover")
    space = await space_with(client, owner)
    body = PostMessage(message_type="note", body="signed by rover", space=space)
    record = records.sign(unsigned.unsigned_message(rover.agent_id, body, format_ms(node.now_ms())), rover.key)
    problem = await call(client, "POST", BUS, rover.creds, 404, {"record": record})
    assert (problem["code"], problem["field"]) == ("unknown_space", "$.record.space")
    await call(
        client, "POST", f"/v1/spaces/{space}/members", owner, 201, {"agent_id": rover.agent_id, "role": "writer"}
    )
    stored = await call(client, "POST", BUS, rover.creds, 201, {"record": record})
    assert stored["space"] == space and stored["record_hash"] == records.compute_hash(record)


async def test_a_message_names_no_entry_its_readers_may_not_read(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, eve = await make_agent("owner"), await make_agent("eve")
    space = await space_with(client, owner)
    body = {"entry_type": "finding", "performative": "inform", "content": "private", "space": space}
    entry = await call(client, "POST", "/v1/entries", owner, 201, body)
    before = await record_count(node)
    problem = await send(client, owner, 409, body="public, naming it", dependency_ids=[entry["record_hash"]])
    assert (problem["code"], problem["field"]) == ("link_across_spaces", "$.dependency_ids[0]")
    problem = await send(client, eve, 404, body="a stranger naming it", dependency_ids=[entry["record_hash"]])
    assert (problem["code"], problem["field"]) == ("dependency_not_found", "$.dependency_ids[0]")
    assert await record_count(node) == before
    inside = await send(client, owner, body="in the space", dependency_ids=[entry["record_hash"]], space=space)
    assert inside["dependency_ids"] == [entry["record_hash"]]


async def test_a_public_message_may_not_depend_on_a_spaces_message(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    """A dependency names a message as well as an entry: a public message naming a space's message would carry its
    address to every node (409 for a reader of the space, 404 as for one not held otherwise; nothing stored)."""
    owner, eve = await make_agent("owner"), await make_agent("eve")
    space = await space_with(client, owner)
    private = await send(client, owner, body="private", space=space)
    before = await record_count(node)
    problem = await send(client, owner, 409, body="public, on it", dependency_ids=[private["record_hash"]])
    assert (problem["code"], problem["field"]) == ("link_across_spaces", "$.dependency_ids[0]")
    problem = await send(client, eve, 404, body="a stranger on it", dependency_ids=[private["record_hash"]])
    assert (problem["code"], problem["field"]) == ("dependency_not_found", "$.dependency_ids[0]")
    assert await record_count(node) == before
    inside = await send(client, owner, body="in the space", dependency_ids=[private["record_hash"]], space=space)
    assert inside["dependency_ids"] == [private["record_hash"]]
