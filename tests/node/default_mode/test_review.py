"""Human review of default-mode candidates (approve / reject) and the admin's promote that names an author."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from node.default_mode import store
from node.default_mode.store import NewCandidate
from node.service import Node
from tests.conftest import AgentCreds, FakeClock

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
DM = "/v1/default-mode"


async def _call(client: TestClient, path: str, body: Any, headers: dict[str, str], status: int) -> Any:
    resp = await client.post(path, json=body, headers=headers)
    assert resp.status == status, await resp.text()
    if status >= 400:
        assert resp.content_type == "application/problem+json"
    return await resp.json()


async def _review(client: TestClient, cid: int, headers: dict[str, str], status: int = 200, **body: Any) -> Any:
    return await _call(client, f"{DM}/candidates/{cid}/review", body, headers, status)


async def _proposed(node: Node, who: AgentCreds, text: str, truth_state: str = "hypothesis") -> int:
    """A candidate the critic has not seen yet (status `proposed`), stored the way the runtime stores one."""
    new = NewCandidate(kind="reflection", text=text, salience=0.5, confidence=0.5, evidence_refs=[],
                       truth_state=truth_state, synthetic=truth_state == "simulation", source="critic",
                       proposed_by=who.agent_id)  # fmt: skip
    (cid,) = await node.db.write(lambda c: store.insert(c, [new], node.now_ms()))
    return cid


async def _row(node: Node, cid: int) -> dict[str, Any]:
    def run(conn: sqlite3.Connection) -> dict[str, Any]:
        return dict(conn.execute("SELECT * FROM dm_candidates WHERE id = ?", (cid,)).fetchone())

    return await node.db.read(run)


async def _critic(client: TestClient, who: AgentCreds, **candidate: Any) -> dict[str, Any]:
    out = await _call(client, f"{DM}/critic", {"candidates": [candidate]}, who.headers, 200)
    return out["candidates"][0]


async def test_each_transition_records_who_and_when_and_never_touches_truth_state(
    client: TestClient, node: Node, make_agent: MakeAgent, admin_headers: dict[str, str], clock: FakeClock
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    # proposed -> approved (a simulation stays a simulation)
    sim = await _proposed(node, alice, "Simulated: the meter doubles next winter", "simulation")
    out = await _review(client, sim, admin_headers, decision="approve", note="  fine as a scenario  ")
    assert (out["status"], out["truth_state"], out["synthetic"]) == ("approved", "simulation", True)
    assert (out["decision"], out["decided_by"], out["decision_note"]) == ("approve", "admin", "fine as a scenario")
    assert out["decided_at"] is not None and out["critic_decision"] is None
    # needs_review -> approved (a hypothesis stays a hypothesis; the critic's verdict is kept beside it)
    risky = await _critic(client, alice, kind="risk", text="The cable could be a fire hazard", truth_state="fact")
    assert (risky["status"], risky["truth_state"]) == ("needs_review", "hypothesis")
    out = await _review(client, risky["id"], bob.headers, decision="approve")
    assert (out["status"], out["truth_state"], out["decided_by"]) == ("approved", "hypothesis", bob.agent_id)
    assert out["critic_decision"] == "needs_review" and out["decision_note"] is None
    # approved -> rejected, proposed -> rejected, needs_review -> rejected
    out = await _review(client, risky["id"], admin_headers, decision="reject", note="no source for this")
    assert (out["status"], out["truth_state"], out["decided_by"]) == ("rejected", "hypothesis", "admin")
    plain = await _proposed(node, alice, "Usage is steady across the week")
    assert (await _review(client, plain, admin_headers, decision="reject"))["status"] == "rejected"
    held = await _critic(client, alice, kind="reflection", text="Nobody has checked the fuse box", truth_state="fact")
    assert held["status"] == "needs_review"
    out = await _review(client, held["id"], admin_headers, decision="reject")
    assert (out["status"], out["truth_state"]) == ("rejected", "hypothesis")
    # a critic-approved candidate may be confirmed by a person: status stays approved, the decision is recorded
    ev = await _call(client, "/v1/entries", {"entry_type": "finding", "performative": "inform",
                     "content": "Meter log for November"}, alice.headers, 201)  # fmt: skip
    fact = await _critic(client, alice, kind="reflection", text="Usage peaks on Sundays", truth_state="fact",
                         evidence_refs=[ev["record_hash"]])  # fmt: skip
    assert (fact["status"], fact["truth_state"]) == ("approved", "fact")
    out = await _review(client, fact["id"], admin_headers, decision="approve")
    assert (out["status"], out["truth_state"], out["decision"]) == ("approved", "fact", "approve")
    # repeating the stored decision changes nothing, not even the time
    before = await _row(node, sim)
    clock.advance(60)
    again = await _review(client, sim, admin_headers, decision="approve", note="other note")
    assert await _row(node, sim) == before and again["decision_note"] == "fine as a scenario"


async def test_refusals_promoted_rejected_own_and_unknown(
    client: TestClient, node: Node, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    cid = await _proposed(node, alice, "Remember to read the meter monthly")
    await _review(client, cid, admin_headers, decision="reject")
    problem = await _review(client, cid, admin_headers, 409, decision="approve")
    assert (problem["code"], problem["field"]) == ("candidate_rejected", "candidate_id")

    risky = await _critic(client, alice, kind="risk", text="Financial exposure if the tariff changes")
    await _call(client, f"{DM}/promote/{risky['id']}", None, bob.headers, 201)
    for decision in ("approve", "reject"):
        problem = await _review(client, risky["id"], admin_headers, 409, decision=decision)
        assert (problem["code"], problem["field"]) == ("candidate_promoted", "candidate_id")
    assert (await _row(node, risky["id"]))["status"] == "promoted"

    own = await _proposed(node, alice, "Alice thinks the heater is oversized")
    problem = await _review(client, own, alice.headers, 403, decision="approve")
    assert (problem["code"], problem["field"]) == ("own_candidate", "candidate_id")
    assert (await _row(node, own))["decision"] is None
    problem = await _review(client, 999_999, admin_headers, 404, decision="approve")
    assert (problem["code"], problem["field"]) == ("candidate_not_found", "candidate_id")
    resp = await client.post(f"{DM}/candidates/{own}/review", json={"decision": "approve"})
    assert resp.status == 401


async def test_bad_input_is_refused_with_its_field_and_nothing_is_stored(
    client: TestClient, node: Node, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    alice = await make_agent("alice")
    cid = await _proposed(node, alice, "The boiler service is due in March")
    before = await _row(node, cid)
    cases: list[tuple[str, Any, int, str | None]] = [
        (str(cid), {}, 422, "$.decision"),
        (str(cid), {"decision": "maybe"}, 422, "$.decision"),
        (str(cid), {"decision": "promote"}, 422, "$.decision"),
        (str(cid), {"decision": 1}, 422, "$.decision"),
        (str(cid), {"decision": "approve", "note": 5}, 422, "$.note"),
        (str(cid), {"decision": "approve", "note": "x" * 1_001}, 422, "$.note"),
        (str(cid), {"decision": "approve", "status": "promoted"}, 422, "$.status"),
        (str(cid), {"decision": "approve", "truth_state": "fact"}, 422, "$.truth_state"),
        (str(cid), ["approve"], 422, "$"),
        ("abc", {"decision": "approve"}, 422, "candidate_id"),
        ("-1", {"decision": "approve"}, 422, "candidate_id"),
    ]
    for ref, body, status, field in cases:
        problem = await _call(client, f"{DM}/candidates/{ref}/review", body, admin_headers, status)
        assert problem["field"] == field, (body, problem)
    for raw, ctype in ((b"{not json", "application/json"), (b"decision=approve", "text/plain")):
        resp = await client.post(f"{DM}/candidates/{cid}/review", data=raw,
                                 headers={**admin_headers, "Content-Type": ctype})  # fmt: skip
        assert 400 <= resp.status < 500 and resp.content_type == "application/problem+json", await resp.text()
    assert await _row(node, cid) == before


async def test_the_critic_leaves_a_human_decision_standing(
    client: TestClient, node: Node, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    alice = await make_agent("alice")
    risky = await _critic(client, alice, kind="risk", text="Privacy: the camera uploads by default")
    await _review(client, risky["id"], admin_headers, decision="approve")
    out = await _call(client, f"{DM}/critic", {"candidate_ids": [risky["id"]]}, alice.headers, 200)
    assert out["skipped"] == [risky["id"]] and out["candidates"] == []
    assert (await _row(node, risky["id"]))["status"] == "approved"


async def test_admin_promotes_an_approved_candidate_as_a_named_agent(
    client: TestClient, node: Node, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    sim = await _call(client, f"{DM}/simulate-future", {"goal": "halve the power bill"}, alice.headers, 201)
    cid = sim["candidate"]["id"]
    await _review(client, cid, admin_headers, decision="approve", note="keep as a scenario")
    done = await _call(client, f"{DM}/promote/{cid}", {"author": "bob"}, admin_headers, 201)
    entry, cand = done["entry"], done["candidate"]
    assert entry["author_id"] == bob.agent_id and entry["truth_state"] == "simulation"
    assert (cand["status"], cand["promoted_by"], cand["promote_requested_by"]) == ("promoted", bob.agent_id, "admin")
    review = entry["metadata"]["default_mode"]["review"]
    assert (review["decision"], review["decided_by"], review["note"]) == ("approve", "admin", "keep as a scenario")
    # the entry is in the log, hidden from default reads as a simulation, shown with include_synthetic
    resp = await client.get(f"/v1/entries/{entry['id']}", params={"include_synthetic": "true"}, headers=alice.headers)
    assert [e["record_hash"] for e in (await resp.json())["entries"]] == [entry["record_hash"]]
    # a repeat is refused, naming the entry (by did works too)
    again = await _call(client, f"{DM}/promote/{cid}", {"author": bob.agent_id}, admin_headers, 400)
    assert again["code"] == "candidate_not_promotable" and entry["record_hash"] in again["detail"]

    held = await _critic(client, alice, kind="reflection", text="The freezer door seal is worn")
    done = await _call(client, f"{DM}/promote/{held['id']}", {"author": alice.agent_id}, admin_headers, 201)
    assert done["entry"]["author_id"] == alice.agent_id and done["entry"]["truth_state"] == "hypothesis"
    assert "review" not in done["entry"]["metadata"]["default_mode"]


async def test_admin_promote_refusals_store_nothing(
    client: TestClient, node: Node, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    from tests.node.api_helpers import self_signer

    alice = await make_agent("alice")
    sam = await self_signer(node, "sam")
    held = await _critic(client, alice, kind="reflection", text="The loft insulation is thin")
    cid = held["id"]
    before = await _row(node, cid)
    cases: list[tuple[dict[str, str], Any, int, str, str]] = [
        (admin_headers, None, 422, "author_required", "$.author"),
        (admin_headers, {}, 422, "author_required", "$.author"),
        (admin_headers, {"author": "carol"}, 404, "author_not_found", "$.author"),
        (admin_headers, {"author": "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"}, 404,
         "author_not_found", "$.author"),
        (admin_headers, {"author": "sam"}, 422, "author_key_not_kept", "$.author"),
        (admin_headers, {"author": "Not A Name"}, 422, "validation_error", "$.author"),
        (admin_headers, {"author": "alice", "record": {"kind": "entry"}}, 422, "record_not_allowed", "$.record"),
        (alice.headers, {"author": "alice"}, 403, "author_admin_only", "$.author"),
        (sam.headers, {"author": "alice"}, 403, "author_admin_only", "$.author"),
    ]  # fmt: skip
    for headers, body, status, code, field in cases:
        problem = await _call(client, f"{DM}/promote/{cid}", body, headers, status)
        assert (problem["code"], problem["field"]) == (code, field), (body, problem)
    assert await _row(node, cid) == before
    resp = await client.get("/v1/search", params={"q": "insulation", "include_synthetic": "true"},
                            headers=alice.headers)  # fmt: skip
    assert (await resp.json())["entries"] == []


async def test_a_critic_run_never_lands_between_a_promotion_and_its_mark(
    client: TestClient, make_agent: MakeAgent
) -> None:
    """A critic run overlapping a promote used to see the new entry before the candidate was marked promoted,
    and reject the candidate as a duplicate of the entry it had just become."""
    alice, bob = await make_agent("alice"), await make_agent("bob")
    evidence = await client.post(
        "/v1/entries",
        json={"entry_type": "finding", "performative": "inform", "content": "Measured twice"},
        headers=alice.headers,
    )
    ref = str((await evidence.json())["id"])
    for trial in range(6):
        resp = await client.post(
            f"{DM}/critic",
            json={"candidates": [{"kind": "decision", "text": f"We decided on plan {trial}", "evidence_refs": [ref]}]},
            headers=bob.headers,
        )
        cid = (await resp.json())["candidates"][0]["id"]

        async def critic_again(cid: int) -> None:
            for _ in range(4):
                again = await client.post(f"{DM}/critic", json={"candidate_ids": [cid]}, headers=bob.headers)
                assert again.status == 200

        promoted, *_ = await asyncio.gather(
            client.post(f"{DM}/promote/{cid}", headers=alice.headers), critic_again(cid), critic_again(cid)
        )
        assert promoted.status == 201
        cand = await (await client.get(f"{DM}/candidates/{cid}", headers=alice.headers)).json()
        assert (cand["status"], cand["critic_decision"]) == ("promoted", "approved"), (trial, cand)
