"""node.workflows.bus: message records, and reading the bus by agent, project, type and order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient

from node.errors import Conflict, InvalidInput
from node.service import Node
from node.spaces.sight import OPERATOR
from node.workflows import bus
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import post as post_entry
from tests.node.workflows.helpers import WF
from wire.workflows import MessagePage, MessageQuery, PostMessage

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def send(client: TestClient, who: AgentCreds, status: int = 201, **body: Any) -> dict[str, Any]:
    headers = {**who.headers, **body.pop("headers", {})}
    resp = await client.post(f"{WF}/messages", json={"message_type": "status", **body}, headers=headers)
    data: dict[str, Any] = await resp.json()
    assert resp.status == status, data
    return data


def page(node: Node, **query: Any) -> Awaitable[MessagePage]:
    q = msgspec.convert(query, MessageQuery, strict=False)
    return node.db.read(lambda c: bus.list_messages(c, q, sight=OPERATOR))


def test_a_bad_value_in_a_message_is_a_422_naming_it() -> None:
    body = msgspec.convert({"message_type": "s", "payload": {"x": float("nan")}}, PostMessage)
    with pytest.raises(InvalidInput) as info:
        bus.unsigned_message("did:key:zsender", body, "2026-01-02T03:04:05Z")
    assert info.value.field is not None and info.value.field.startswith("$.payload")


async def test_a_stored_message_reads_back(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    sent = await send(client, alice, to_agent=bob.agent_id, body="hi", payload={"n": 1}, project="shed",
                      dependency_ids=["d1"])  # fmt: skip
    stored = await node.db.read(lambda c: bus.message_by_id(c, sent["id"]))
    assert msgspec.to_builtins(stored) == sent
    assert (stored.from_agent, stored.to_agent, stored.tags) == (
        alice.agent_id,
        bob.agent_id,
        sorted([alice.agent_id, bob.agent_id]),
    )
    assert (stored.authority, stored.truth_state, stored.confidence) == ("raw", "fact", 1.0)


async def test_reading_the_bus_by_filter(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    alice, bob, carol = await make_agent("alice"), await make_agent("bob"), await make_agent("carol")
    a = await send(client, alice, to_agent=bob.agent_id, project="shed")
    b = await send(client, bob, message_type="question", project="shed")
    c = await send(client, carol, to_agent=alice.agent_id, project="garden")

    def ids(p: MessagePage) -> list[int]:
        return [m.id for m in p.messages]

    assert ids(await page(node)) == [c["id"], b["id"], a["id"]]
    assert ids(await page(node, order="oldest")) == [a["id"], b["id"], c["id"]]
    assert ids(await page(node, agent=alice.agent_id)) == [c["id"], a["id"]]  # sent or received
    assert ids(await page(node, agent=bob.agent_id, order="oldest")) == [a["id"], b["id"]]
    assert ids(await page(node, project="shed")) == [b["id"], a["id"]]
    assert ids(await page(node, message_type="question")) == [b["id"]]
    assert ids(await page(node, agent=alice.agent_id, project="garden")) == [c["id"]]
    assert ids(await page(node, project="none")) == []


async def test_pages_follow_their_cursor(
    client: TestClient, node: Node, make_agent: MakeAgent, clock: FakeClock
) -> None:
    alice = await make_agent("alice")
    sent = []
    for i in range(5):
        sent.append((await send(client, alice, body=str(i)))["id"])
        clock.advance(1)
    for order, expected in [("newest", sent[::-1]), ("oldest", sent), ("arrival", sent)]:
        seen: list[int] = []
        cursor = None
        while True:
            query: dict[str, Any] = {"order": order, "limit": 2}
            if cursor:
                query["cursor"] = cursor
            result = await page(node, **query)
            seen += [m.id for m in result.messages]
            cursor = result.next_cursor
            if cursor is None:
                break
            assert len(result.messages) == 2
        assert seen == expected, order
    assert (await page(node, limit=5)).next_cursor is None


async def test_arrival_order_keeps_a_late_message_with_an_old_time(
    client: TestClient, node: Node, make_agent: MakeAgent, clock: FakeClock
) -> None:
    alice = await make_agent("alice")
    first = await send(client, alice)
    clock.advance(-3600)  # a message whose created_at is older than one already stored
    late = await send(client, alice)
    assert [m.id for m in (await page(node, order="oldest")).messages] == [late["id"], first["id"]]
    assert [m.id for m in (await page(node, order="arrival")).messages] == [first["id"], late["id"]]


async def test_replayed_message(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    sent = await send(client, alice, headers={"Idempotency-Key": "m1"})
    assert await node.db.read(lambda c: bus.replayed_message(c, alice.agent_id, "m1")) == sent["id"]
    assert await node.db.read(lambda c: bus.replayed_message(c, alice.agent_id, "unused")) is None
    await post_entry(client, alice, content="an entry", headers={"Idempotency-Key": "e1"})
    with pytest.raises(Conflict) as info:
        await node.db.read(lambda c: bus.replayed_message(c, alice.agent_id, "e1"))
    assert (info.value.code, info.value.field) == ("idempotency_key_reused", "Idempotency-Key")
    assert (await send(client, alice, 200, headers={"Idempotency-Key": "m1"}))["id"] == sent["id"]
