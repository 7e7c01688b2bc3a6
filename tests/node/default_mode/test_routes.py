"""node.default_mode.routes: the REST edge of the default-mode runtime (parsing, who may call, status codes).

What the runtime does with a request is tested in test_api.py; this file holds the edge's own rules.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.default_mode import routes
from tests.conftest import AgentCreds
from tests.node.api_helpers import post, problem

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
DM = routes.PREFIX


async def call(client: TestClient, method: str, path: str, who: Any, status: int, **kw: Any) -> Any:
    headers = who if isinstance(who, dict) else who.headers
    resp = await client.request(method, DM + path, headers={**headers, **kw.pop("headers", {})}, **kw)
    data = await resp.json(content_type=None)
    assert resp.status == status, data
    return data


async def approved_candidate(client: TestClient, who: AgentCreds, text: str = "Group commit stays on") -> int:
    evidence = await post(client, who, content=f"evidence for: {text}")
    body = {"candidates": [{"kind": "decision", "text": text, "evidence_refs": [evidence["record_hash"]]}]}
    reviewed = await call(client, "POST", "/critic", who, 200, json=body)
    assert reviewed["candidates"][0]["status"] == "approved"
    return int(reviewed["candidates"][0]["id"])


@pytest.mark.parametrize("bad", ["abc", "-1", "1.5", "²", "9" * 19])
async def test_a_candidate_id_is_a_positive_integer(client: TestClient, make_agent: MakeAgent, bad: str) -> None:
    alice = await make_agent("alice")
    for method, path, body in [
        ("GET", f"/candidates/{bad}", None),
        ("GET", f"/candidates/{bad}/draft", None),
        ("POST", f"/promote/{bad}", {}),
        ("POST", f"/candidates/{bad}/review", {"decision": "approve"}),
    ]:
        problem(await call(client, method, path, alice, 422, json=body), 422, "validation_error", "candidate_id")


async def test_promote_takes_an_optional_body_and_answers_201_then_200_to_its_retry(
    client: TestClient, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    cid = await approved_candidate(client, alice)
    key = {"Idempotency-Key": "promote-once"}
    resp = await client.post(f"{DM}/promote/{cid}", headers={**alice.headers, **key})  # no body at all
    first = await resp.json()
    assert resp.status == 201 and first["created"] is True
    again = await call(client, "POST", f"/promote/{cid}", alice, 200, json={}, headers=key)
    assert again["entry"] == first["entry"] and again["created"] is False
    # without the key, or with another, the candidate is no longer promotable: the answer names its entry
    for headers in ({}, {"Idempotency-Key": "another"}):
        refused = await call(client, "POST", f"/promote/{cid}", alice, 400, json={}, headers=headers)
        problem(refused, 400, "candidate_not_promotable")
        assert first["entry"]["record_hash"] in refused["detail"] and refused["field"] == "candidate_id"
    # the key of this promotion is not a key for another operation
    other = await approved_candidate(client, alice, "Backups finish before six")
    reused = await call(client, "POST", f"/promote/{other}", alice, 409, json={}, headers=key)
    problem(reused, 409, "idempotency_key_reused")


async def test_the_admin_promotes_by_naming_an_author(
    client: TestClient, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    alice = await make_agent("alice")
    cid = await approved_candidate(client, alice)
    problem(await call(client, "POST", f"/promote/{cid}", admin_headers, 422, json={}), 422, "author_required")
    promoted = await call(client, "POST", f"/promote/{cid}", admin_headers, 201, json={"author": "alice"})
    assert promoted["entry"]["author_id"] == alice.agent_id
    assert promoted["candidate"]["promote_requested_by"] == "admin"


async def test_a_review_is_the_callers_decision(
    client: TestClient, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    first = await approved_candidate(client, alice, "first candidate")
    second = await approved_candidate(client, alice, "second candidate")
    by_admin = await call(client, "POST", f"/candidates/{first}/review", admin_headers, 200,
                          json={"decision": "reject", "note": "not now"})  # fmt: skip
    assert (by_admin["status"], by_admin["decided_by"], by_admin["decision_note"]) == ("rejected", "admin", "not now")
    by_bob = await call(client, "POST", f"/candidates/{second}/review", bob, 200, json={"decision": "approve"})
    assert (by_bob["status"], by_bob["decided_by"]) == ("approved", bob.agent_id)
    problem(await call(client, "POST", f"/candidates/{second}/review", bob, 422, json={}), 422, "validation_error",
            "$.decision")  # fmt: skip


async def test_the_runtimes_answer_201_then_200_with_their_key(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await post(client, alice, content="an entry to consolidate")
    for path, body in [
        ("/reflect-session", {"transcript": "We decided to keep the writer thread for every write"}),
        ("/consolidate", {}),
        ("/simulate-future", {"goal": "ship the node"}),
        ("/stakeholder-simulation", {"stakeholder": "Bob", "proposal": "a rota"}),
        ("/incubate", {"problem": "slow sync"}),
    ]:
        key = {"Idempotency-Key": f"key{path}"}
        first = await call(client, "POST", path, alice, 201, json=body, headers=key)
        assert await call(client, "POST", path, alice, 200, json=body, headers=key) == first, path
    resp = await client.post(f"{DM}/consolidate", headers=alice.headers)  # the body may be omitted
    assert resp.status == 201
    problem(await call(client, "POST", "/consolidate", alice, 422, json={"since": "last week"}), 422,
            "validation_error", "$.since")  # fmt: skip


async def test_reading_candidates_and_drafts(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    cid = await approved_candidate(client, alice)
    listed = await call(client, "GET", "/candidates", alice, 200, params={"status": "approved"})
    assert [c["id"] for c in listed["candidates"]] == [cid] and listed["next_offset"] is None
    assert (await call(client, "GET", f"/candidates/{cid}", alice, 200))["id"] == cid
    draft = await call(client, "GET", f"/candidates/{cid}/draft", alice, 200)
    assert draft["content"] == "Group commit stays on" and draft["authority"] == "derived"
    problem(await call(client, "GET", "/candidates/424242", alice, 404), 404, "candidate_not_found", "candidate_id")


def test_the_route_table() -> None:
    assert [route.handler.__name__ for route in routes.ROUTES] == [
        "reflect_session", "run_critic", "promote", "review", "consolidate", "simulate_future",
        "stakeholder_simulation", "incubate", "list_candidates", "get_candidate", "get_draft",
    ]  # fmt: skip
    assert all(route.path.startswith(DM) and route.tag == "default-mode" for route in routes.ROUTES)
    assert {r.handler.__name__ for r in routes.ROUTES if r.auth == "any"} == {
        "promote", "review", "list_candidates", "get_candidate", "get_draft",
    }  # fmt: skip
