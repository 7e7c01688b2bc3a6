"""Subscriptions and the inbox state machine through a real server, with a controlled clock."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.errors import Conflict, InvalidInput, NotFound
from node.inbox import notify
from node.inbox.service import MAX_SUBSCRIPTIONS
from node.service import Node
from node.web.background import expiry_sweep
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import count, get_json, link, post, problem
from wire.api import InboxQuery, PostEntry, SubscriptionIn

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
LEASE_S = notify.LEASE_MS / 1000


async def subscribe(client: TestClient, who: AgentCreds, status: int = 201, **body: Any) -> dict[str, Any]:
    resp = await client.post("/v1/subscriptions", json=body, headers=who.headers)
    data: dict[str, Any] = await resp.json()
    assert resp.status == status, data
    return data


async def inbox(client: TestClient, who: AgentCreds, **params: str) -> list[dict[str, Any]]:
    body = await get_json(client, "/v1/inbox", who, params=params)
    return list(body["notifications"])


async def ack(client: TestClient, who: AgentCreds, ids: list[int]) -> int:
    resp = await client.post("/v1/inbox/ack", json={"ids": ids}, headers=who.headers)
    assert resp.status == 200
    return int((await resp.json())["acknowledged"])


async def statuses(node: Node, agent_id: str) -> dict[int, tuple[str, int]]:
    def run(conn: sqlite3.Connection) -> dict[int, tuple[str, int]]:
        rows = conn.execute(
            "SELECT entry_id, status, attempt_count FROM notifications WHERE agent_id = ?", (agent_id,)
        ).fetchall()
        return {r[0]: (r[1], r[2]) for r in rows}

    return await node.db.read(run)


def assert_no_content(value: Any) -> None:
    """Envelopes are metadata only: no `content` key at any depth."""
    if isinstance(value, dict):
        assert "content" not in value, value
        for v in value.values():
            assert_no_content(v)
    elif isinstance(value, list):
        for v in value:
            assert_no_content(v)


async def test_subscription_matching_or_within_and_across(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await subscribe(client, bob, tags=["db", "net"], entry_types=["question"])
    hit1 = await post(client, alice, entry_type="question", performative="query", content="q1", tags=["db"])
    hit2 = await post(client, alice, entry_type="question", performative="query", content="q2", tags=["net", "x"])
    await post(client, alice, entry_type="finding", content="wrong type", tags=["db"])
    await post(client, alice, entry_type="question", performative="query", content="wrong tag", tags=["other"])
    await post(client, alice, entry_type="question", performative="query", content="no tags")
    await post(client, bob, entry_type="question", performative="query", content="own entry", tags=["db"])
    got = await inbox(client, bob)
    assert [n["entry_id"] for n in got] == [hit1["id"], hit2["id"]]
    assert all(n["reason"] == "subscription" and n["tier"] == 2 for n in got)


async def test_subscription_dimensions_performative_author_directed(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob, carol = await make_agent("alice"), await make_agent("bob"), await make_agent("carol")
    await subscribe(client, carol, performatives=["propose"], authors=[alice.agent_id])
    await subscribe(client, carol, tags=["ops"], directed=True)
    hit = await post(client, alice, performative="propose", content="alice proposes")
    await post(client, bob, performative="propose", content="bob proposes")
    await post(client, alice, performative="inform", content="alice informs")
    await post(client, bob, content="ops but not directed", tags=["ops"])
    directed = await post(client, bob, content="ops directed", tags=["ops"], directed_to=[carol.agent_id])
    got = await inbox(client, carol)
    assert sorted(n["entry_id"] for n in got) == [hit["id"], directed["id"]]
    assert {n["entry_id"]: n["directed_to_me"] for n in got} == {hit["id"]: False, directed["id"]: True}


async def test_subscription_list_duplicate_delete(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    first = await subscribe(client, alice, tags=["b", "a", "a"], entry_types=["finding"])
    assert first["tags"] == ["a", "b"] and first["agent_id"] == alice.agent_id
    same = await subscribe(client, alice, 200, tags=["a", "b"], entry_types=["finding"])
    assert same == first
    other = await subscribe(client, alice, tags=["a"])
    listed = await get_json(client, "/v1/subscriptions", alice)
    assert [s["id"] for s in listed["subscriptions"]] == [first["id"], other["id"]]
    assert (await get_json(client, "/v1/subscriptions", bob))["subscriptions"] == []
    # bob cannot delete alice's subscription
    resp = await client.delete(f"/v1/subscriptions/{first['id']}", headers=bob.headers)
    problem(await resp.json(), 404, "subscription_not_found")
    resp = await client.delete(f"/v1/subscriptions/{first['id']}", headers=alice.headers)
    assert resp.status == 204
    resp = await client.delete(f"/v1/subscriptions/{first['id']}", headers=alice.headers)
    assert resp.status == 404
    for bad in ["abc", "²", "9" * 19]:
        resp = await client.delete(f"/v1/subscriptions/{bad}", headers=alice.headers)
        problem(await resp.json(), 422, "validation_error", "sub_id")
    listed = await get_json(client, "/v1/subscriptions", alice)
    assert [s["id"] for s in listed["subscriptions"]] == [other["id"]]
    # after deleting, matching stops
    await post(client, bob, content="tagged b", tags=["b"])
    assert await inbox(client, alice) == []


async def test_max_subscriptions(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    for i in range(MAX_SUBSCRIPTIONS - 1):
        await node.inbox.subscribe(alice.agent_id, SubscriptionIn(tags=[f"t{i}"]))
    await subscribe(client, alice, tags=["last"])
    problem(await subscribe(client, alice, 409, tags=["one-too-many"]), 409, "too_many_subscriptions")
    await subscribe(client, alice, 200, tags=["last"])  # an existing filter is still answered
    assert await count(node, "subscriptions") == MAX_SUBSCRIPTIONS


async def test_bad_subscriptions(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"tags": ["x"] * 33}, "$.tags"),
        ({"entry_types": ["essay"]}, "$.entry_types[0]"),
        ({"authors": ["Bob"]}, "$.authors[0]"),
        ({"directed": "yes"}, "$.directed"),
        ({"tags": [""]}, "$.tags[0]"),
        ({"topic": "x"}, "$.topic"),
    ]
    for body, field in cases:
        problem(await subscribe(client, alice, 422, **body), 422, "validation_error", field)
    # A NUL could never fire (see SubscriptionTag); every body refuses it first (node/store/submission.py).
    problem(await subscribe(client, alice, 422, tags=["ok", "a\x00b"]), 422, "nul_character", "$.tags[1]")
    assert await count(node, "subscriptions") == 0


async def test_inbox_is_metadata_only_and_tiered(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await subscribe(client, bob)  # everything
    mine = await post(client, bob, content="bob's own claim")
    plain = await post(client, alice, content="secret words", tags=["t"], confidence=0.7)
    request = await post(client, alice, performative="request", content="please check", directed_to=[bob.agent_id])
    informed = await post(client, alice, content="fyi bob", directed_to=[bob.agent_id])
    contra_entry = await post(
        client,
        alice,
        entry_type="contradiction",
        performative="disconfirm",
        content="bob is wrong",
        links=[{"target": mine["record_hash"], "link_type": "contradicts"}],
    )
    unrelated = await post(client, alice, content="another note")
    contra_link = await link(
        client, alice, 201, source=str(unrelated["id"]), target=str(mine["id"]), link_type="contradicts"
    )
    assert contra_link["resolved"]
    body = await get_json(client, "/v1/inbox", bob)
    assert_no_content(body)
    got = {n["entry_id"]: n for n in body["notifications"]}
    assert set(got) == {plain["id"], request["id"], informed["id"], contra_entry["id"], unrelated["id"]}
    tiers = {eid: (n["tier"], n["reason"]) for eid, n in got.items()}
    assert tiers == {
        plain["id"]: (2, "subscription"),
        request["id"]: (1, "directed_request"),
        informed["id"]: (2, "directed"),
        contra_entry["id"]: (1, "contradiction"),
        unrelated["id"]: (1, "contradiction"),
    }
    # tier 1 first
    assert [n["tier"] for n in body["notifications"]] == sorted(n["tier"] for n in body["notifications"])
    env = got[plain["id"]]
    assert env["record_hash"] == plain["record_hash"] and env["author"] == alice.agent_id
    assert env["created_at"] == plain["created_at"] and env["tags"] == ["t"] and env["confidence"] == 0.7
    assert env["entry_type"] == "finding" and env["performative"] == "inform" and env["directed_to_me"] is False
    assert got[contra_entry["id"]]["link_targets"] == [mine["record_hash"]]
    # made by a link record: the envelope still names which of bob's entries is contradicted
    assert got[unrelated["id"]]["link_targets"] == [mine["record_hash"]]
    assert got[plain["id"]]["link_targets"] == []
    assert got[request["id"]]["directed_to_me"] is True
    assert set(env) == {
        "notification_id", "entry_id", "record_hash", "author", "created_at", "entry_type", "performative",
        "tags", "confidence", "directed_to_me", "link_targets", "tier", "reason", "attempt", "space", "redaction",
    }  # fmt: skip


async def test_lease_retry_and_failure(client: TestClient, make_agent: MakeAgent, node: Node, clock: FakeClock) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    entry = await post(client, alice, performative="request", content="do it", directed_to=[bob.agent_id])
    for attempt in range(1, notify.MAX_ATTEMPTS + 1):
        got = await inbox(client, bob)
        assert [(n["entry_id"], n["attempt"]) for n in got] == [(entry["id"], attempt)]
        assert await inbox(client, bob) == []  # leased: not handed out again
        clock.advance(LEASE_S - 1)
        assert await inbox(client, bob) == []  # the lease has not lapsed yet
        assert (await statuses(node, bob.agent_id))[entry["id"]] == ("leased", attempt)
        clock.advance(1)
    # the last lease lapsed after MAX_ATTEMPTS attempts: failed, never handed out again
    assert await inbox(client, bob) == []
    assert (await statuses(node, bob.agent_id))[entry["id"]] == ("failed", notify.MAX_ATTEMPTS)
    notification_id = await node.db.read(lambda c: c.execute("SELECT id FROM notifications").fetchone()[0])
    assert await ack(client, bob, [notification_id]) == 0


async def test_ack_and_mark_delivered(client: TestClient, make_agent: MakeAgent, node: Node, clock: FakeClock) -> None:
    alice, bob, carol = await make_agent("alice"), await make_agent("bob"), await make_agent("carol")
    first = await post(client, alice, content="one", directed_to=[bob.agent_id, carol.agent_id])
    second = await post(client, alice, content="two", directed_to=[bob.agent_id])
    got = await inbox(client, bob, limit="1")
    assert [n["entry_id"] for n in got] == [first["id"]]
    carol_ids = [n["notification_id"] for n in await inbox(client, carol)]
    assert await ack(client, bob, carol_ids) == 0  # not bob's
    assert await ack(client, bob, [got[0]["notification_id"]]) == 1
    assert await ack(client, bob, [got[0]["notification_id"]]) == 0  # already delivered
    clock.advance(LEASE_S + 1)
    # the acknowledged one never comes back; the other was pending all along
    delivered = await inbox(client, bob, mark_delivered="true")
    assert [n["entry_id"] for n in delivered] == [second["id"]]
    clock.advance(LEASE_S + 1)
    assert await inbox(client, bob) == []
    assert await statuses(node, bob.agent_id) == {first["id"]: ("delivered", 1), second["id"]: ("delivered", 1)}
    # carol's lease lapses and she gets it again
    clock.advance(LEASE_S + 1)
    assert [n["attempt"] for n in await inbox(client, carol)] == [2]


async def test_expiry(client: TestClient, make_agent: MakeAgent, node: Node, clock: FakeClock) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    leased = await post(client, alice, content="leased then expired", directed_to=[bob.agent_id])
    assert len(await inbox(client, bob)) == 1
    pending = await post(client, alice, content="never polled", directed_to=[bob.agent_id])
    clock.advance(notify.NOTIFICATION_TTL_MS / 1000 + 1)
    assert await inbox(client, bob) == []
    assert await statuses(node, bob.agent_id) == {leased["id"]: ("expired", 1), pending["id"]: ("expired", 0)}


async def test_inbox_since_and_bad_params(client: TestClient, make_agent: MakeAgent, clock: FakeClock) -> None:
    from datetime import UTC, datetime

    alice, bob = await make_agent("alice"), await make_agent("bob")
    await post(client, alice, content="early", directed_to=[bob.agent_id])
    clock.advance(10)
    cut = datetime.fromtimestamp(clock.now, UTC).isoformat()
    late = await post(client, alice, content="late", directed_to=[bob.agent_id])
    assert [n["entry_id"] for n in await inbox(client, bob, since=cut)] == [late["id"]]
    for params, field in [
        ({"limit": "0"}, "$.limit"),
        ({"limit": "201"}, "$.limit"),
        ({"since": "noon"}, "$.since"),
        ({"mark_delivered": "maybe"}, "$.mark_delivered"),
    ]:
        problem(await get_json(client, "/v1/inbox", bob, 422, params=params), 422, "validation_error", field)
    for body, field in [({"ids": []}, "$.ids"), ({"ids": ["x"]}, "$.ids[0]"), ({}, "$.ids")]:
        resp = await client.post("/v1/inbox/ack", json=body, headers=bob.headers)
        problem(await resp.json(), 422, "validation_error", field)


async def test_contradiction_upgrades_a_delivered_notification(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    """One notification per (agent, entry): a later tier-1 reason re-opens it at tier 1 with a fresh count."""
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await subscribe(client, bob)
    mine = await post(client, bob, content="bob's claim")
    theirs = await post(client, alice, content="alice's unrelated note")
    first = await inbox(client, bob)
    assert [(n["entry_id"], n["tier"], n["reason"]) for n in first] == [(theirs["id"], 2, "subscription")]
    assert await ack(client, bob, [first[0]["notification_id"]]) == 1
    await link(client, alice, source=str(theirs["id"]), target=str(mine["id"]), link_type="contradicts")
    again = await inbox(client, bob)
    assert [(n["entry_id"], n["tier"], n["reason"], n["attempt"]) for n in again] == [
        (theirs["id"], 1, "contradiction", 1)
    ]
    assert again[0]["notification_id"] == first[0]["notification_id"]


async def test_contradiction_upgrades_a_leased_notification_at_once(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    """A tier-1 reason for a notification the agent holds a lease on makes it pending again now, at tier 1 with
    a fresh count (it used to wait for the tier-2 lease to lapse, a minute later, and count as a retry)."""
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await subscribe(client, bob)
    mine = await post(client, bob, content="bob's claim")
    theirs = await post(client, alice, content="alice's unrelated note")
    first = await inbox(client, bob)  # leased, not acknowledged
    assert [(n["entry_id"], n["tier"], n["attempt"]) for n in first] == [(theirs["id"], 2, 1)]
    await link(client, alice, source=str(theirs["id"]), target=str(mine["id"]), link_type="contradicts")
    again = await inbox(client, bob)
    assert [(n["entry_id"], n["tier"], n["reason"], n["attempt"]) for n in again] == [
        (theirs["id"], 1, "contradiction", 1)
    ]


async def test_contradiction_of_an_entry_that_arrives_later(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    """A contradicts link may point at an entry not yet here; its author is told when the entry arrives."""
    from tests.node.api_helpers import entry_record, hash_of, self_signer

    alice = await make_agent("alice")
    bob = await self_signer(node, "bob")
    future = entry_record(bob.key, "bob's claim, signed offline", created_ms=node.now_ms())
    early = await post(
        client,
        alice,
        entry_type="contradiction",
        performative="disconfirm",
        content="bob's claim is wrong",
        links=[{"target": hash_of(future), "link_type": "contradicts"}],
    )
    other = await post(client, alice, content="another note")
    await link(client, alice, source=str(other["id"]), target=hash_of(future), link_type="contradicts")
    assert await inbox(client, bob.creds) == []
    resp = await client.post("/v1/entries", json={"record": future}, headers=bob.headers)
    assert resp.status == 201
    got = await inbox(client, bob.creds)
    assert sorted((n["entry_id"], n["tier"], n["reason"]) for n in got) == [
        (early["id"], 1, "contradiction"),
        (other["id"], 1, "contradiction"),
    ]


async def test_concurrent_polls_never_hand_out_one_notification_twice(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    import asyncio

    alice, bob = await make_agent("alice"), await make_agent("bob")
    posted = [await post(client, alice, content=f"note {i}", directed_to=[bob.agent_id]) for i in range(30)]
    polls = await asyncio.gather(*(inbox(client, bob, limit="7") for _ in range(8)))
    handed = [n["entry_id"] for poll in polls for n in poll]
    assert len(handed) == len(set(handed)) == 30
    assert set(handed) == {e["id"] for e in posted}


async def test_link_targets_keep_the_entrys_link_order(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    made = [(await post(client, bob, content=f"evidence {i}"))["record_hash"] for i in range(6)]
    order = sorted(made, reverse=True)[:3]  # descending hashes: sorted order differs from link order
    links = [{"target": h, "link_type": "supports"} for h in order] + [{"target": order[0], "link_type": "responds_to"}]
    await post(client, bob, content="directed with links", directed_to=[alice.agent_id], links=links)
    (env,) = (await get_json(client, "/v1/inbox", alice))["notifications"]
    assert env["link_targets"] == [link["target"] for link in links]


async def test_a_contradiction_names_only_the_links_that_notified(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob, carol = await make_agent("alice"), await make_agent("bob"), await make_agent("carol")
    a1 = (await post(client, alice, content="alice one"))["record_hash"]
    a2 = (await post(client, alice, content="alice two"))["record_hash"]
    claim = (await post(client, bob, content="bob's claim"))["record_hash"]
    await link(client, alice, 201, source=claim, target=a1, link_type="contradicts")  # her own: no notification
    assert (await get_json(client, "/v1/inbox", alice))["notifications"] == []
    await link(client, carol, 201, source=claim, target=a2, link_type="contradicts")  # this one notifies alice
    (env,) = (await get_json(client, "/v1/inbox", alice))["notifications"]
    assert (env["reason"], env["link_targets"]) == ("contradiction", [a2])


async def test_an_empty_inbox_is_answered_without_the_writer(
    client: TestClient, make_agent: MakeAgent, node: Node, clock: FakeClock
) -> None:
    """Only a poll with something to lease or fail takes a write transaction; the state machine is unchanged."""
    alice, bob = await make_agent("alice"), await make_agent("bob")

    async def poll_counting_writes() -> tuple[list[dict[str, Any]], int]:
        before = node.db.stats.transactions
        got = await inbox(client, bob)
        return got, node.db.stats.transactions - before

    assert await poll_counting_writes() == ([], 0)
    entry = await post(client, alice, content="for bob", directed_to=[bob.agent_id])
    got, writes = await poll_counting_writes()
    assert [n["entry_id"] for n in got] == [entry["id"]] and writes == 1  # leased
    assert await poll_counting_writes() == ([], 0)  # leased, lease running: nothing to do
    clock.advance(LEASE_S + 1)
    got, writes = await poll_counting_writes()
    assert [n["attempt"] for n in got] == [2] and writes == 1  # the lapsed lease comes back
    for _ in range(notify.MAX_ATTEMPTS):
        clock.advance(LEASE_S + 1)
        await inbox(client, bob)
    assert (await statuses(node, bob.agent_id))[entry["id"]][0] == "failed"
    assert await poll_counting_writes() == ([], 0)


async def test_notifications_of_agents_that_never_poll_are_expired_by_the_sweep(
    client: TestClient, make_agent: MakeAgent, node: Node, clock: FakeClock
) -> None:
    """Polls with nothing to lease are answered without the writer, so expiry does not wait for one: the node
    sweeps (`Inbox.expire_notifications`, run by the app every EXPIRY_SWEEP_SECONDS), with a writer job only when
    something has expired."""
    alice, bob, carol = await make_agent("alice"), await make_agent("bob"), await make_agent("carol")
    entry = await post(client, alice, content="for bob, who never polls", directed_to=[bob.agent_id])
    assert await node.inbox.expire_notifications() == 0
    clock.advance(notify.NOTIFICATION_TTL_MS / 1000 + 1)
    assert await inbox(client, carol) == []  # carol's empty poll does not expire bob's notification
    assert (await statuses(node, bob.agent_id))[entry["id"]][0] == "pending"
    sweep = expiry_sweep(client.app)
    await sweep.__anext__()  # the app's sweep, started as at start-up: its first round runs at once
    try:
        for _ in range(200):
            if (await statuses(node, bob.agent_id))[entry["id"]][0] == "expired":
                break
            await asyncio.sleep(0.01)
        assert (await statuses(node, bob.agent_id))[entry["id"]][0] == "expired"
    finally:
        with contextlib.suppress(StopAsyncIteration):
            await sweep.__anext__()
    before = node.db.stats.transactions
    assert await node.inbox.expire_notifications() == 0
    assert node.db.stats.transactions == before  # nothing expired: no writer job


# ---- the service (node/inbox/service.py), called directly ----------------------------------------------------------


async def test_inbox_service_subscribes_once_per_filter_and_lists_and_removes(
    node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    first, created = await node.inbox.subscribe(alice.agent_id, SubscriptionIn(tags=["b", "a", "b"], directed=True))
    assert created and (first.tags, first.directed) == (["a", "b"], True)
    same, created_again = await node.inbox.subscribe(alice.agent_id, SubscriptionIn(tags=["a", "b"], directed=True))
    assert (same.id, created_again) == (first.id, False)
    other, _ = await node.inbox.subscribe(alice.agent_id, SubscriptionIn(tags=["a", "b"]))  # not directed: another
    assert [s.id for s in await node.inbox.subscriptions(alice.agent_id)] == [first.id, other.id]
    await node.inbox.unsubscribe(alice.agent_id, first.id)
    with pytest.raises(NotFound) as gone:
        await node.inbox.unsubscribe(alice.agent_id, first.id)
    assert gone.value.code == "subscription_not_found"
    bob = await make_agent("bob")
    with pytest.raises(NotFound):  # only one's own
        await node.inbox.unsubscribe(bob.agent_id, other.id)
    assert [s.id for s in await node.inbox.subscriptions(alice.agent_id)] == [other.id]


async def test_inbox_service_bounds_the_subscriptions_of_an_agent(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    for i in range(MAX_SUBSCRIPTIONS):
        await node.inbox.subscribe(alice.agent_id, SubscriptionIn(tags=[f"t{i}"]))
    with pytest.raises(Conflict) as full:
        await node.inbox.subscribe(alice.agent_id, SubscriptionIn(tags=["one more"]))
    assert full.value.code == "too_many_subscriptions"


async def test_inbox_service_polls_acks_and_expires(node: Node, make_agent: MakeAgent, clock: FakeClock) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await node.inbox.subscribe(bob.agent_id, SubscriptionIn(tags=["news"]))
    empty = await node.inbox.poll(bob.agent_id, InboxQuery())
    assert empty.notifications == [] and empty.lease_seconds == notify.LEASE_MS // 1000
    entry, _ = await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "fresh", tags=["news"]), None)
    (envelope,) = (await node.inbox.poll(bob.agent_id, InboxQuery())).notifications
    assert (envelope.entry_id, envelope.author, envelope.tags, envelope.attempt) == (
        entry.id,
        alice.agent_id,
        ["news"],
        1,
    )
    assert (await node.inbox.poll(bob.agent_id, InboxQuery())).notifications == []  # leased
    assert (await node.inbox.ack(bob.agent_id, [envelope.notification_id])).acknowledged == 1
    assert (await node.inbox.ack(bob.agent_id, [envelope.notification_id])).acknowledged == 0
    with pytest.raises(InvalidInput):
        await node.inbox.poll(bob.agent_id, InboxQuery(since="not a time"))

    await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "never polled", tags=["news"]), None)
    assert await node.inbox.expire_notifications() == 0
    clock.advance(notify.NOTIFICATION_TTL_MS / 1000 + 1)
    assert await node.inbox.expire_notifications() == 1
    assert await node.inbox.expire_notifications() == 0
