"""Agents notified of a redacted entry are told (issue 39): over REST, an agent whose notification of the entry had
reached it (polled) finds a notice of reason `redacted` in its inbox naming the target's hash and the redaction,
with no body; an agent whose notification never reached it, or who was never notified, gets nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from tests.conftest import AgentCreds
from tests.node.api_helpers import get_json, post

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def _subscribe(client: TestClient, who: AgentCreds, **body: Any) -> None:
    resp = await client.post("/v1/subscriptions", json=body, headers=who.headers)
    assert resp.status == 201, await resp.text()


async def _inbox(client: TestClient, who: AgentCreds, **params: str) -> list[dict[str, Any]]:
    notes: list[dict[str, Any]] = (await get_json(client, "/v1/inbox", who, params=params))["notifications"]
    return notes


async def test_an_agent_that_saw_the_notification_gets_a_notice_and_others_nothing(
    client: TestClient, make_agent: MakeAgent
) -> None:
    alice, bob, carol, dave = [await make_agent(n) for n in ("alice", "bob", "carol", "dave")]
    await _subscribe(client, bob, authors=[alice.agent_id])
    await _subscribe(client, carol, authors=[alice.agent_id])  # notified, never polls before the redaction
    await _subscribe(client, dave, tags=["unrelated"])  # never notified of it
    kept = await post(client, alice, content="the wifi name is Attic")
    secret = await post(client, alice, content="the wifi password is hunter2", tags=["creds"])
    seen = await _inbox(client, bob, mark_delivered="true")
    assert [n["entry_id"] for n in seen] == [kept["id"], secret["id"]]
    assert all(n["redaction"] is None for n in seen)  # an ordinary notification names no redaction

    resp = await client.post("/v1/redactions", json={"target": secret["record_hash"]}, headers=alice.headers)
    assert resp.status == 201, await resp.text()
    redaction = (await resp.json())["redaction"]

    (notice,) = await _inbox(client, bob)
    assert (notice["reason"], notice["tier"], notice["redaction"]) == ("redacted", 1, redaction)
    # a new id, above every earlier one: never the id of the notification it replaces, which bob has seen
    assert notice["notification_id"] > max(n["notification_id"] for n in seen)
    assert (notice["record_hash"], notice["entry_id"]) == (secret["record_hash"], secret["id"])
    assert (notice["author"], notice["created_at"]) == (alice.agent_id, secret["created_at"])
    # no body: nothing of the content, tags or type travels; the envelope never carried content
    assert (notice["entry_type"], notice["performative"], notice["tags"], notice["link_targets"]) == ("", "", [], [])
    assert "hunter2" not in str(notice)
    resp = await client.post("/v1/inbox/ack", json={"ids": [notice["notification_id"]]}, headers=bob.headers)
    assert (await resp.json())["acknowledged"] == 1
    assert await _inbox(client, bob) == []  # acknowledged: not delivered again

    # carol's notification of it had never reached her: it is gone, and she is told nothing of it
    assert [n["entry_id"] for n in await _inbox(client, carol)] == [kept["id"]]
    assert await _inbox(client, dave) == []
    assert await _inbox(client, alice) == []  # the author was never notified of her own entry


async def test_a_notice_of_a_space_entry_reaches_a_poll_of_that_space(
    client: TestClient, make_agent: MakeAgent
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    resp = await client.post("/v1/spaces", json={"name": "household"}, headers=alice.headers)
    assert resp.status == 201, await resp.text()
    space = (await resp.json())["space_id"]
    member = {"agent_id": bob.agent_id, "role": "reader"}
    resp = await client.post(f"/v1/spaces/{space}/members", json=member, headers=alice.headers)
    assert resp.status == 201, await resp.text()
    await _subscribe(client, bob, authors=[alice.agent_id])
    secret = await post(client, alice, content="the alarm code is 4711", space=space)
    assert [n["entry_id"] for n in await _inbox(client, bob, space=space, mark_delivered="true")] == [secret["id"]]
    resp = await client.post("/v1/redactions", json={"target": secret["record_hash"]}, headers=alice.headers)
    assert resp.status == 201, await resp.text()
    (notice,) = await _inbox(client, bob, space=space)
    assert (notice["reason"], notice["record_hash"], notice["space"]) == ("redacted", secret["record_hash"], space)
