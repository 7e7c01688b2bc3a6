"""The default-mode runtime over REST on a real server: candidates, critic, promote, consolidate, templates."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.default_mode import store
from node.service import Node
from tests.conftest import AgentCreds
from wire.api import PostEntry

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
DM = "/v1/default-mode"


async def _post(client: TestClient, path: str, body: Any, who: AgentCreds, status: int) -> Any:
    resp = await client.post(path, json=body, headers=who.headers)
    assert resp.status == status, await resp.text()
    return await resp.json()


async def _entry(client: TestClient, who: AgentCreds, content: str, **extra: Any) -> dict[str, Any]:
    body = {"entry_type": "finding", "performative": "inform", "content": content, **extra}
    return await _post(client, "/v1/entries", body, who, 201)


async def test_reflect_writes_reviewed_candidates_that_ordinary_search_never_returns(
    client: TestClient, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    evidence = await _entry(client, alice, "Session notes for the storage meeting")
    transcript = "\n".join(
        [
            "We decided to use Postgres for storage",
            "ok",
            "Postgres storage needs a backup plan",
            "The weather is lovely this afternoon",
            "Remember the privacy review before launch",
        ]
    )
    out = await _post(
        client, f"{DM}/reflect-session", {"transcript": transcript, "evidence_refs": [str(evidence["id"])]}, alice, 201
    )
    assert out["lines_scored"] == 4 and out["dropped"] == 1
    kinds = {c["text"]: (c["kind"], c["status"], c["truth_state"], c["risk_flag"]) for c in out["candidates"]}
    assert kinds == {
        "We decided to use Postgres for storage": ("decision", "approved", "hypothesis", False),
        "Postgres storage needs a backup plan": ("reflection", "approved", "hypothesis", False),
        "Remember the privacy review before launch": ("risk", "needs_review", "hypothesis", True),
    }
    assert all(c["evidence_refs"] == [evidence["record_hash"]] for c in out["candidates"])
    assert all(c["evidence_flag"] and c["critic_decision"] == c["status"] for c in out["candidates"])
    for q in ("Postgres", "privacy"):
        resp = await client.get("/v1/search", params={"q": q, "include_synthetic": "true"}, headers=alice.headers)
        assert (await resp.json())["entries"] == []
    listed = await (await client.get(f"{DM}/candidates", headers=alice.headers)).json()
    assert len(listed["candidates"]) == 3


async def test_reflect_without_evidence_holds_everything_for_review(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    out = await _post(client, f"{DM}/reflect-session", {"transcript": "We decided to use SQLite for the node"},
                      alice, 201)  # fmt: skip
    (cand,) = out["candidates"]
    assert (cand["status"], cand["evidence_flag"], cand["critic_reasons"]) == ("needs_review", False, ["no_evidence"])


async def test_reflect_from_a_session_id_uses_its_entries_as_evidence(
    client: TestClient, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    e1 = await _entry(client, alice, "We decided to ship the sync feature first", tags=["session:s1"])
    await _entry(client, alice, "Unrelated note about gardening tools", tags=["session:other"])
    out = await _post(client, f"{DM}/reflect-session", {"session_id": "s1"}, alice, 201)
    (cand,) = out["candidates"]
    # the text is its own source entry, not a duplicate of it: approved, with that entry as evidence
    assert cand["evidence_refs"] == [e1["record_hash"]] and cand["status"] == "approved"
    assert cand["payload"]["source_ref"] == e1["record_hash"]
    problem = await _post(client, f"{DM}/reflect-session", {"session_id": "nope"}, alice, 404)
    assert problem["code"] == "session_not_found"


async def test_critic_endpoint_reviews_new_and_stored_candidates(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    ev = await _entry(client, alice, "Measured: WAL mode gives parallel readers")
    out = await _post(
        client,
        f"{DM}/critic",
        {
            "candidates": [
                {"kind": "reflection", "text": "Readers never block the writer", "evidence_refs": [ev["record_hash"]],
                 "truth_state": "fact", "confidence": 0.99},
                {"kind": "risk", "text": "A financial cost if the disk fills", "evidence_refs": [ev["record_hash"]],
                 "truth_state": "fact", "confidence": 0.99},
                {"kind": "reflection", "text": "Simulated readers are fast", "evidence_refs": [ev["record_hash"]],
                 "synthetic": True, "truth_state": "fact"},
            ]
        },
        alice,
        200,
    )  # fmt: skip
    got = [(c["status"], c["truth_state"], c["risk_flag"], c["evidence_flag"]) for c in out["candidates"]]
    assert got == [
        ("approved", "fact", False, True),
        ("needs_review", "hypothesis", True, True),
        ("approved", "simulation", False, True),
    ]
    first = out["candidates"][0]["id"]
    again = await _post(client, f"{DM}/critic", {"candidate_ids": [first]}, alice, 200)
    assert again["candidates"][0]["status"] == "approved"
    missing = await _post(client, f"{DM}/critic", {"candidate_ids": [first, 999]}, alice, 404)
    assert missing["code"] == "candidate_not_found" and missing["field"] == "$.candidate_ids[1]"


async def test_critic_with_no_arguments_reviews_proposed_candidates(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    new = store.NewCandidate("reflection", "Left proposed by an interrupted run", 0.5, 0.5, [], "hypothesis", False,
                             "test", alice.agent_id)  # fmt: skip
    (cid,) = await node.db.write(lambda c: store.insert(c, [new], 0))
    out = await _post(client, f"{DM}/critic", {}, alice, 200)
    assert [(c["id"], c["status"]) for c in out["candidates"]] == [(cid, "needs_review")]


async def test_promote_creates_a_derived_signed_entry_with_provenance(
    client: TestClient, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    ev1 = await _entry(client, alice, "Benchmark: 5k writes per second on the laptop")
    ev2 = await _entry(client, alice, "Benchmark: 4k writes per second on the Pi")
    out = await _post(
        client,
        f"{DM}/critic",
        {"candidates": [{"kind": "decision", "text": "Group commit stays on by default",
                         "evidence_refs": [ev1["record_hash"], str(ev2["id"])], "truth_state": "fact"}]},
        alice,
        200,
    )  # fmt: skip
    cid = out["candidates"][0]["id"]
    promoted = await _post(client, f"{DM}/promote/{cid}", None, bob, 201)
    entry, cand = promoted["entry"], promoted["candidate"]
    assert promoted["created"] is True
    assert (entry["authority"], entry["truth_state"], entry["author_id"]) == ("derived", "fact", bob.agent_id)
    assert entry["entry_type"] == "finding" and "default-mode" in entry["tags"]
    prov = entry["metadata"]["default_mode"]
    assert prov["candidate_id"] == cid and prov["proposed_by"] == alice.agent_id
    assert prov["evidence_refs"][0].endswith(f"/{cid}") and prov["evidence_refs"][1:] == [
        ev1["record_hash"],
        ev2["record_hash"],
    ]
    assert (cand["status"], cand["promoted_entry"], cand["promoted_by"]) == ("promoted", entry["record_hash"],
                                                                              bob.agent_id)  # fmt: skip
    # provenance chain: entry -> derived_from links -> evidence entries; entry metadata -> candidate
    resp = await client.get(f"/v1/entries/{entry['record_hash']}", params={"hops": "1", "link_types": "derived_from"},
                            headers=alice.headers)  # fmt: skip
    body = await resp.json()
    assert {e["record_hash"] for e in body["entries"]} == {entry["record_hash"], ev1["record_hash"],
                                                          ev2["record_hash"]}  # fmt: skip
    assert {(link["source"], link["target"], link["link_type"]) for link in body["links"]} == {
        (entry["record_hash"], ev1["record_hash"], "derived_from"),
        (entry["record_hash"], ev2["record_hash"], "derived_from"),
    }
    back = await (await client.get(f"{DM}/candidates/{prov['candidate_id']}", headers=alice.headers)).json()
    assert back["promoted_entry"] == entry["record_hash"]
    # promoting again is refused, naming the entry; nothing is written
    again = await _post(client, f"{DM}/promote/{cid}", {}, bob, 400)
    assert again["code"] == "candidate_not_promotable" and entry["record_hash"] in again["detail"]
    also = await _post(client, f"{DM}/promote/{cid}", {}, alice, 400)
    assert also["code"] == "candidate_not_promotable"


async def test_promote_refusals(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await _entry(client, alice, "Already known fact about the node")
    out = await _post(client, f"{DM}/critic", {"candidates": [{"kind": "reflection",
                      "text": "Already known fact about the node"}]}, alice, 200)  # fmt: skip
    rejected = out["candidates"][0]
    assert rejected["status"] == "rejected"
    problem = await _post(client, f"{DM}/promote/{rejected['id']}", None, alice, 400)
    assert (problem["code"], problem["field"]) == ("candidate_not_promotable", "candidate_id")
    new = store.NewCandidate("reflection", "Never reviewed yet", 0.5, 0.5, [], "hypothesis", False, "test",
                             alice.agent_id)  # fmt: skip
    (proposed,) = await node.db.write(lambda c: store.insert(c, [new], 0))
    assert (await _post(client, f"{DM}/promote/{proposed}", None, alice, 400))["code"] == "candidate_not_promotable"
    assert (await _post(client, f"{DM}/promote/4242", None, alice, 404))["code"] == "candidate_not_found"
    assert (await _post(client, f"{DM}/promote/abc", None, alice, 422))["field"] == "candidate_id"
    assert (await _post(client, f"{DM}/promote/{proposed}", {"scope": "mars"}, alice, 422))["field"] == "$.scope"
    count = await node.db.read(lambda c: c.execute("SELECT count(*) FROM entries").fetchone()[0])
    assert count == 1


async def test_promote_refuses_content_posted_since_the_approval(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    out = await _post(client, f"{DM}/critic", {"candidates": [{"kind": "reflection",
                      "text": "Backups run at 03:00 every night"}]}, alice, 200)  # fmt: skip
    cid, status = out["candidates"][0]["id"], out["candidates"][0]["status"]
    assert status in ("approved", "needs_review")  # promotable: not a duplicate when the critic ran
    posted = await _entry(client, bob, "Backups run at 03:00 every night")  # after the critic approved it
    problem = await _post(client, f"{DM}/promote/{cid}", None, alice, 409)
    assert (problem["code"], problem["field"]) == ("duplicate_of_entry", "candidate_id")
    assert posted["record_hash"] in problem["detail"]
    count = await node.db.read(lambda c: c.execute("SELECT count(*) FROM entries").fetchone()[0])
    assert count == 1
    cand = await (await client.get(f"{DM}/candidates/{cid}", headers=alice.headers)).json()
    assert cand["status"] == status and cand["promoted_entry"] is None


async def test_a_promotion_retried_after_its_entry_was_committed_is_not_a_duplicate(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    out = await _post(client, f"{DM}/critic", {"candidates": [{"kind": "reflection",
                      "text": "The NAS fan is loud at night"}]}, alice, 200)  # fmt: skip
    cid = out["candidates"][0]["id"]
    first = await _post(client, f"{DM}/promote/{cid}", None, alice, 201)
    # as if the node crashed after committing the entry, before marking the candidate promoted
    await node.db.write(
        lambda c: c.execute(
            "UPDATE dm_candidates SET status = 'approved', promoted_hash = NULL, promoted_by = NULL,"
            " promoted_ms = NULL WHERE id = ?",
            (cid,),
        )
    )
    again = await _post(client, f"{DM}/promote/{cid}", None, alice, 200)
    assert again["entry"]["record_hash"] == first["entry"]["record_hash"] and again["created"] is False
    assert again["candidate"]["status"] == "promoted"


async def _many_evidence(node: Node, who: AgentCreds, n: int) -> list[str]:
    entries = await node.entries.post_batch(
        who.agent_id,
        [PostEntry(entry_type="finding", performative="inform", content=f"measurement {i}") for i in range(n)],
    )
    return [entry.record_hash for entry, _ in entries]


async def test_a_promotion_beyond_the_inline_links_commits_entry_links_and_mark_together(
    client: TestClient, node: Node, make_agent: MakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = await make_agent("alice")
    evidence = await _many_evidence(node, alice, 40)  # 32 travel inside the entry, 8 become link records
    out = await _post(client, f"{DM}/critic", {"candidates": [{"kind": "decision", "text": "Measure twice",
                      "evidence_refs": evidence, "truth_state": "fact"}]}, alice, 200)  # fmt: skip
    cid = out["candidates"][0]["id"]

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the node died before marking the candidate")

    before = await node.db.read(lambda c: c.execute("SELECT count(*) FROM records").fetchone()[0])
    with monkeypatch.context() as m:
        m.setattr(store, "mark_promoted", crash)
        resp = await client.post(f"{DM}/promote/{cid}", headers=alice.headers)
        assert resp.status == 500
    # nothing of it committed: no entry without its links or its mark
    assert await node.db.read(lambda c: c.execute("SELECT count(*) FROM records").fetchone()[0]) == before
    promoted = await _post(client, f"{DM}/promote/{cid}", None, alice, 201)
    entry = promoted["entry"]
    links = await node.db.read(
        lambda c: c.execute(
            "SELECT count(DISTINCT target_hash) FROM links WHERE source_hash = ? AND link_type = 'derived_from'",
            (entry["record_hash"],),
        ).fetchone()[0]
    )
    assert links == 40 and promoted["candidate"]["status"] == "promoted"


async def test_promoting_a_needs_review_candidate_keeps_it_a_hypothesis(
    client: TestClient, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    out = await _post(client, f"{DM}/reflect-session", {"transcript": "todo: replace the failing disk next week"},
                      alice, 201)  # fmt: skip
    (cand,) = out["candidates"]
    assert (cand["kind"], cand["status"]) == ("open_loop", "needs_review")
    promoted = await _post(client, f"{DM}/promote/{cand['id']}", None, alice, 201)
    assert (promoted["entry"]["entry_type"], promoted["entry"]["truth_state"]) == ("task", "hypothesis")


async def test_consolidate_summarises_recent_entries_as_a_held_hypothesis(
    client: TestClient, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    hashes = [(await _entry(client, alice, f"finding number {i}", tags=["db"]))["record_hash"] for i in range(3)]
    hashes.append((await _post(client, "/v1/entries", {"entry_type": "question", "performative": "query",
                  "content": "why so slow?"}, bob, 201))["record_hash"])  # fmt: skip
    await _entry(client, bob, "a simulated entry", truth_state="simulation")
    cand = await _post(client, f"{DM}/consolidate", {"limit": 10}, alice, 201)
    assert (cand["kind"], cand["status"], cand["truth_state"]) == ("consolidation", "needs_review", "hypothesis")
    assert cand["evidence_refs"] == hashes  # every entry it read, oldest first; simulations left out
    dist = cand["payload"]["distribution"]
    assert dist["entries"] == 4 and dist["entry_type"] == [["finding", 3], ["question", 1]] and dist["authors"] == 2
    assert "finding 3" in cand["text"]
    only_db = await _post(client, f"{DM}/consolidate", {"tags": ["db"], "limit": 2}, alice, 201)
    assert only_db["evidence_refs"] == hashes[1:3]
    nothing = await _post(client, f"{DM}/consolidate", {"tags": ["none"]}, alice, 422)
    assert nothing["code"] == "nothing_to_consolidate"
    assert (await _post(client, f"{DM}/consolidate", {"since": "yesterday"}, alice, 422))["field"] == "$.since"


async def test_fixed_templates_are_stored_as_labelled_candidates(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    fut = await _post(client, f"{DM}/simulate-future", {"goal": "move to a bigger disk"}, alice, 201)
    assert (fut["candidate"]["truth_state"], fut["candidate"]["synthetic"]) == ("simulation", True)
    assert list(fut["template"]["paths"]) == ["best_case", "most_likely", "failure_path", "hidden_risk", "low_effort"]
    assert fut["candidate"]["status"] == "needs_review"  # no evidence (the fixed text names no risk: test_synthetic)
    again = await _post(client, f"{DM}/simulate-future", {"goal": "move to a bigger disk"}, alice, 201)
    assert again["template"] == fut["template"] and again["candidate"]["text"] == fut["candidate"]["text"]
    st = await _post(client, f"{DM}/stakeholder-simulation", {"stakeholder": "Grandma", "proposal": "a new router"},
                     alice, 201)  # fmt: skip
    assert st["template"]["label"] == "speculative_general_pattern"
    assert (st["candidate"]["truth_state"], st["candidate"]["synthetic"]) == ("simulation", True)
    inc = await _post(client, f"{DM}/incubate", {"problem": "sync is slow"}, alice, 201)
    assert len(inc["template"]["seeds"]) == 6
    assert (inc["candidate"]["truth_state"], inc["candidate"]["status"]) == ("hypothesis", "needs_review")
    # a simulation promoted stays a simulation, hidden from ordinary search
    promoted = await _post(client, f"{DM}/promote/{fut['candidate']['id']}", None, alice, 201)
    assert promoted["entry"]["truth_state"] == "simulation"
    resp = await client.get("/v1/search", params={"q": "bigger disk"}, headers=alice.headers)
    assert (await resp.json())["entries"] == []
    resp = await client.get("/v1/search", params={"q": "bigger disk", "include_synthetic": "true"},
                            headers=alice.headers)  # fmt: skip
    assert [e["record_hash"] for e in (await resp.json())["entries"]] == [promoted["entry"]["record_hash"]]


async def test_bad_input_is_refused_and_stores_nothing(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    cases = [
        (f"{DM}/reflect-session", {}, 422, "$.transcript"),
        (f"{DM}/reflect-session", {"transcript": "x" * 30, "session_id": "s"}, 422, "$.transcript"),
        (f"{DM}/reflect-session", {"transcript": "We decided to use tea daily", "evidence_refs": ["nope"]}, 404,
         "$.evidence_refs[0]"),
        (f"{DM}/reflect-session", {"transcript": "We decided it", "weights": {"action": 2}}, 422,
         "$.weights.action"),
        (f"{DM}/reflect-session", {"transcript": "We decided it", "bogus": 1}, 422, "$.bogus"),
        (f"{DM}/critic", {"candidates": [{"kind": "wish", "text": "a"}]}, 422, "$.candidates[0].kind"),
        (f"{DM}/critic", {"candidates": [{"kind": "risk", "text": "   "}]}, 422, "$.candidates[0].text"),
        (f"{DM}/critic", {"candidate_ids": [0]}, 422, "$.candidate_ids[0]"),
        (f"{DM}/simulate-future", {"goal": ""}, 422, "$.goal"),
        (f"{DM}/stakeholder-simulation", {"stakeholder": "x"}, 422, "$.proposal"),
        (f"{DM}/incubate", {"problem": "p", "evidence_refs": ["12345"]}, 404, "$.evidence_refs[0]"),
    ]  # fmt: skip
    for path, body, status, field in cases:
        problem = await _post(client, path, body, alice, status)
        assert problem["field"] == field, (path, body, problem)
    resp = await client.post(f"{DM}/critic", data=b"{not json", headers={**alice.headers,
                             "Content-Type": "application/json"})  # fmt: skip
    assert resp.status == 400
    resp = await client.post(f"{DM}/reflect-session", json={"transcript": "We decided to use tea daily"})
    assert resp.status == 401
    resp = await client.get(f"{DM}/candidates", params={"status": "lost"}, headers=alice.headers)
    assert resp.status == 422
    count = await node.db.read(lambda c: c.execute("SELECT count(*) FROM dm_candidates").fetchone()[0])
    assert count == 0


async def test_an_overlong_line_becomes_a_candidate_that_can_still_be_promoted(
    client: TestClient, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    ev = await _entry(client, alice, "evidence for the long line")
    line = "We decided to use " + "very " * 4000 + "long words"
    out = await _post(client, f"{DM}/reflect-session", {"transcript": line, "evidence_refs": [ev["record_hash"]],
                      "goal_relevance": 1, "weights": {"goal_relevance": 1}}, alice, 201)  # fmt: skip
    (cand,) = out["candidates"]
    assert len(cand["text"]) == 8_000 and cand["kind"] == "decision"
    promoted = await _post(client, f"{DM}/promote/{cand['id']}", None, alice, 201)
    assert promoted["entry"]["content"] == cand["text"].strip()


async def test_an_agent_holding_its_own_key_promotes_by_signing_the_draft(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    from tests.node.api_helpers import entry_record, self_signer

    sam = await self_signer(node, "sam")
    alice = await make_agent("alice")
    ev = await _entry(client, alice, "The meter reads 4 kWh a day")
    out = await _post(client, f"{DM}/critic", {"candidates": [{"kind": "reflection", "text": "Usage is steady",
                      "evidence_refs": [ev["record_hash"]], "truth_state": "fact"}]}, sam.creds, 200)  # fmt: skip
    cid = out["candidates"][0]["id"]
    refused = await _post(client, f"{DM}/promote/{cid}", None, sam.creds, 422)
    assert refused["code"] == "agent_signs_own_records"
    draft = await (await client.get(f"{DM}/candidates/{cid}/draft", headers=sam.headers)).json()
    assert draft["authority"] == "derived" and draft["links"] == [
        {"target": ev["record_hash"], "link_type": "derived_from", "annotation": ""}
    ]
    fields = {k: v for k, v in draft.items() if k not in ("content", "unlinked_evidence")}
    tampered = entry_record(sam.key, draft["content"], created_ms=node.now_ms(), **{**fields, "truth_state": "fact",
                            "metadata": {"default_mode": {"candidate_id": cid}}})  # fmt: skip
    bad = await _post(client, f"{DM}/promote/{cid}", {"record": tampered}, sam.creds, 422)
    assert (bad["code"], bad["field"]) == ("draft_mismatch", "$.record.metadata")
    record = entry_record(sam.key, draft["content"], created_ms=node.now_ms(), **fields)
    done = await _post(client, f"{DM}/promote/{cid}", {"record": record}, sam.creds, 201)
    assert (
        done["entry"]["author_id"] == sam.agent_id
        and done["candidate"]["promoted_entry"] == done["entry"]["record_hash"]
    )
    again = await _post(client, f"{DM}/promote/{cid}", {"record": record}, sam.creds, 400)
    assert again["code"] == "candidate_not_promotable" and done["entry"]["record_hash"] in again["detail"]
    gone = await client.get(f"{DM}/candidates/{cid}/draft", headers=sam.headers)
    assert gone.status == 400 and (await gone.json())["code"] == "candidate_not_promotable"


CREATING_CALLS: list[tuple[str, dict[str, Any], int]] = [
    ("reflect-session", {"transcript": "We decided to keep nightly backups\nRemember the privacy review"}, 201),
    ("critic", {"candidates": [{"kind": "reflection", "text": "Backups finish before six"}]}, 200),
    ("consolidate", {"limit": 5}, 201),
    ("simulate-future", {"goal": "move to a bigger disk"}, 201),
    ("stakeholder-simulation", {"stakeholder": "Grandma", "proposal": "a new router"}, 201),
    ("incubate", {"problem": "sync is slow"}, 201),
]


async def _candidate_count(node: Node) -> int:
    return int(await node.db.read(lambda c: c.execute("SELECT count(*) FROM dm_candidates").fetchone()[0]))


@pytest.mark.parametrize(("path", "body", "status"), CREATING_CALLS)
async def test_a_call_retried_with_its_idempotency_key_stores_its_candidates_once(
    client: TestClient, node: Node, make_agent: MakeAgent, path: str, body: dict[str, Any], status: int
) -> None:
    alice = await make_agent("alice")
    await _entry(client, alice, "Something to consolidate")
    headers = {**alice.headers, "Idempotency-Key": f"{path}-1"}
    first = await client.post(f"{DM}/{path}", json=body, headers=headers)
    assert first.status == status, await first.text()
    stored = await _candidate_count(node)
    assert stored >= 1
    # a retry gets the first answer back (200) and stores nothing, also when two retries race
    retries = await asyncio.gather(*(client.post(f"{DM}/{path}", json=body, headers=headers) for _ in range(3)))
    assert [r.status for r in retries] == [200, 200, 200]
    assert [await r.json() for r in retries] == [await first.json()] * 3
    assert await _candidate_count(node) == stored
    # without the key (or with another) the call stores again
    resp = await client.post(f"{DM}/{path}", json=body, headers={**alice.headers, "Idempotency-Key": f"{path}-2"})
    assert resp.status == status
    assert await _candidate_count(node) > stored


async def test_two_first_calls_with_one_key_racing_store_once(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    headers = {**alice.headers, "Idempotency-Key": "race"}
    body = {"problem": "the inbox is slow"}
    answers = await asyncio.gather(*(client.post(f"{DM}/incubate", json=body, headers=headers) for _ in range(4)))
    assert sorted(r.status for r in answers) == [200, 200, 200, 201]
    assert len({(await r.json())["candidate"]["id"] for r in answers}) == 1
    assert await _candidate_count(node) == 1


async def test_an_idempotency_key_belongs_to_one_operation_and_one_agent(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    posted = await client.post(
        "/v1/entries",
        json={"entry_type": "finding", "performative": "inform", "content": "a finding"},
        headers={**alice.headers, "Idempotency-Key": "k1"},
    )
    assert posted.status == 201
    refused = await _post_keyed(client, "incubate", {"problem": "p"}, alice, "k1", 409)
    assert (refused["code"], refused["field"]) == ("idempotency_key_reused", "Idempotency-Key")
    await _post_keyed(client, "incubate", {"problem": "p"}, alice, "k2", 201)
    refused = await _post_keyed(client, "simulate-future", {"goal": "g"}, alice, "k2", 409)
    assert refused["code"] == "idempotency_key_reused"
    refused = await _post_keyed(client, "reflect-session", {"transcript": "We decided on tea"}, alice, "k2", 409)
    assert refused["code"] == "idempotency_key_reused"
    # the same key of another agent is that agent's own
    await _post_keyed(client, "incubate", {"problem": "p"}, bob, "k2", 201)
    assert await _candidate_count(node) == 2
    bad = await _post_keyed(client, "incubate", {"problem": "p"}, alice, "k" * 129, 422)
    assert bad["field"] == "Idempotency-Key"
    assert await _candidate_count(node) == 2


async def _post_keyed(
    client: TestClient, path: str, body: dict[str, Any], who: AgentCreds, key: str, status: int
) -> Any:
    resp = await client.post(f"{DM}/{path}", json=body, headers={**who.headers, "Idempotency-Key": key})
    assert resp.status == status, await resp.text()
    return await resp.json()
