"""The retention job on a real served node: with a policy on, delivered notifications and rejected candidates
older than its days go, while young ones, undelivered notifications and candidates not rejected stay; with the
policies off nothing goes; /metrics shows each policy and what it removed, and so does `bbs doctor` (SQLite's)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.app import create_app
from node.default_mode import store as dm_store
from node.default_mode.store import NewCandidate
from node.features import LOG
from node.ops import doctor
from node.retention import job
from node.service import Node
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import get_json, post

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
DAY_S = 86_400


async def _notifications(node: Node) -> list[tuple[int, str]]:
    """(entry_id, status) of every notification, by entry."""
    return await node.db.read(
        lambda c: [tuple(r) for r in c.execute("SELECT entry_id, status FROM notifications ORDER BY entry_id")]
    )


async def _candidates(node: Node) -> list[tuple[str, str]]:
    """(text, status) of every default-mode candidate, by id."""
    return await node.db.read(
        lambda c: [tuple(r) for r in c.execute("SELECT text, status FROM dm_candidates ORDER BY id")]
    )


async def _candidate(
    client: TestClient, node: Node, who: AgentCreds, text: str, admin: dict[str, str], end: str
) -> None:
    """A candidate stored as the runtime stores one, then rejected by the admin (`end` "reject") or left proposed."""
    new = NewCandidate(kind="reflection", text=text, salience=0.5, confidence=0.5, evidence_refs=[],
                       truth_state="hypothesis", synthetic=False, source="critic",
                       proposed_by=who.agent_id)  # fmt: skip
    (cid,) = await node.db.write(lambda c: dm_store.insert(c, [new], node.now_ms()))
    if end == "reject":
        resp = await client.post(
            f"/v1/default-mode/candidates/{cid}/review", json={"decision": "reject"}, headers=admin
        )
        assert resp.status == 200, await resp.text()


async def _poll_one(client: TestClient, who: AgentCreds) -> list[dict[str, Any]]:
    got = await get_json(client, "/v1/inbox", who, params={"limit": "1", "mark_delivered": "true"})
    notes: list[dict[str, Any]] = got["notifications"]
    return notes


async def _old_and_young(
    client: TestClient, node: Node, make_agent: MakeAgent, clock: FakeClock, admin: dict[str, str]
) -> tuple[int, int, int]:
    """Ten days ago: a notification delivered, one left pending, a candidate rejected and one proposed. Today: a
    notification delivered, a candidate rejected. Returns the entry ids (old delivered, old pending, young)."""
    alice, bob = await make_agent("alice"), await make_agent("bob")
    resp = await client.post("/v1/subscriptions", json={"authors": [alice.agent_id]}, headers=bob.headers)
    assert resp.status == 201, await resp.text()
    old = await post(client, alice, content="old news, read")
    pending = await post(client, alice, content="old news, never polled")
    assert [n["entry_id"] for n in await _poll_one(client, bob)] == [old["id"]]  # delivered ten days ago
    await _candidate(client, node, alice, "old rejected", admin, "reject")
    await _candidate(client, node, alice, "old proposed", admin, "keep")
    clock.advance(10 * DAY_S)
    await _poll_one(client, alice)  # nothing: a poll of someone else leaves bob's pending one alone
    young = await post(client, alice, content="fresh news")
    await _candidate(client, node, alice, "young rejected", admin, "reject")
    # bob's next poll delivers the old pending one first (oldest first): leave it pending, ack the young one
    resp = await client.post("/v1/inbox/ack", json={"ids": [await _notification_id(node, young["id"])]},
                             headers=bob.headers)  # fmt: skip
    assert resp.status == 200, await resp.text()
    return old["id"], pending["id"], young["id"]


async def _notification_id(node: Node, entry_id: int) -> int:
    return int(await node.db.read(lambda c: c.execute("SELECT id FROM notifications WHERE entry_id = ?",
                                                       (entry_id,)).fetchone()[0]))  # fmt: skip


async def test_a_policy_removes_only_old_delivered_notifications_and_old_rejected_candidates(
    client: TestClient, node: Node, make_agent: MakeAgent, clock: FakeClock, admin_headers: dict[str, str]
) -> None:
    old, pending, young = await _old_and_young(client, node, make_agent, clock, admin_headers)
    assert await _notifications(node) == [(old, "delivered"), (pending, "pending"), (young, "delivered")]

    removed = await job.run_policies(node, {"delivered_notifications": 7, "rejected_candidates": 7}, batch=1)
    assert removed == {"delivered_notifications": 1, "rejected_candidates": 1}
    assert await _notifications(node) == [(pending, "pending"), (young, "delivered")]
    assert await _candidates(node) == [("old proposed", "proposed"), ("young rejected", "rejected")]
    # a second run finds nothing more; the totals stay
    assert await job.run_policies(node, {"delivered_notifications": 7, "rejected_candidates": 7}) == {
        "delivered_notifications": 0,
        "rejected_candidates": 0,
    }

    resp = await client.get("/metrics", headers=admin_headers)
    text = await resp.text()
    assert 'bbs_retention_removed{policy="delivered_notifications"} 1.0' in text
    assert 'bbs_retention_days{policy="rejected_candidates"} 7.0' in text


async def test_policies_off_remove_nothing_and_show_as_off(
    client: TestClient, node: Node, make_agent: MakeAgent, clock: FakeClock, admin_headers: dict[str, str]
) -> None:
    await _old_and_young(client, node, make_agent, clock, admin_headers)
    before_n, before_c = await _notifications(node), await _candidates(node)
    assert await job.run_policies(node, {}) == {"delivered_notifications": 0, "rejected_candidates": 0}
    assert await job.run_policies(node, {"delivered_notifications": 0, "rejected_candidates": 0}) == {
        "delivered_notifications": 0,
        "rejected_candidates": 0,
    }
    assert (await _notifications(node), await _candidates(node)) == (before_n, before_c)
    text = await (await client.get("/metrics", headers=admin_headers)).text()
    assert 'bbs_retention_days{policy="delivered_notifications"} 0.0' in text
    assert 'bbs_retention_removed{policy="rejected_candidates"} 0.0' in text


@pytest.mark.sqlite_only(reason="bbs doctor reads a SQLite file; it refuses a PostgreSQL node (decisions record 80)")
async def test_bbs_doctor_shows_each_policy_and_what_it_removed(
    client: TestClient, node: Node, make_agent: MakeAgent, clock: FakeClock, admin_headers: dict[str, str]
) -> None:
    await _old_and_young(client, node, make_agent, clock, admin_headers)
    assert await job.run_policies(node, {"delivered_notifications": 7}) == {
        "delivered_notifications": 1,
        "rejected_candidates": 0,
    }
    detail = {c.name: c for c in doctor.diagnose(node.data.root, LOG, peer_timeout=2)}["retention"].detail
    assert "delivered_notifications: older than 7 days removed, 1 removed in all" in detail
    assert "rejected_candidates: off, 0 removed in all" in detail


async def test_the_served_node_runs_its_policies_at_start(
    node: Node, make_agent: MakeAgent, clock: FakeClock, aiohttp_client: Callable[..., Awaitable[TestClient]],
    admin_headers: dict[str, str],
) -> None:  # fmt: skip
    first = await aiohttp_client(create_app(node))
    _, pending, young = await _old_and_young(first, node, make_agent, clock, admin_headers)
    await first.close()  # the node closes with its app; the next app opens it again, with a policy configured
    node.retention_days = {"delivered_notifications": 7}
    await aiohttp_client(create_app(node))
    for _ in range(200):
        if len(await _notifications(node)) == 2:
            break
        await asyncio.sleep(0.02)
    # the never-polled one was marked expired at start (past its expiry), never delivered: it stays
    assert await _notifications(node) == [(pending, "expired"), (young, "delivered")]
    assert len(await _candidates(node)) == 3  # that policy is off
