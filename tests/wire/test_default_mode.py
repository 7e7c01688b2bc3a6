"""wire.default_mode: the wire types of /v1/default-mode and their bounds."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from identity import keys
from wire import default_mode as dm


def refused(typ: type[Any], value: Any) -> str:
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.convert(value, typ)
    return str(info.value)


def test_reflect_takes_a_transcript_or_a_session() -> None:
    body = msgspec.convert({"transcript": "we decided to paint the shed"}, dm.ReflectIn)
    assert (body.session_id, body.evidence_refs, body.goal_relevance, body.weights) == (None, [], 0.0, None)
    assert msgspec.convert({"session_id": "s-1:a.b"}, dm.ReflectIn).session_id == "s-1:a.b"
    assert "$.transcript" in refused(dm.ReflectIn, {"transcript": " \n\t "})  # NOT_BLANK: something not blank
    assert "$.transcript" in refused(dm.ReflectIn, {"transcript": "x" * (dm.MAX_TRANSCRIPT_CHARS + 1)})
    assert "$.session_id" in refused(dm.ReflectIn, {"session_id": "has space"})
    assert "$.session_id" in refused(dm.ReflectIn, {"session_id": "s" * 57})
    assert "$.tags" in refused(dm.ReflectIn, {"tags": ["t"] * (dm.MAX_CANDIDATE_TAGS + 1)})
    assert "$.evidence_refs" in refused(dm.ReflectIn, {"evidence_refs": ["1"] * (dm.MAX_EVIDENCE + 1)})


def test_salience_weights_are_each_between_zero_and_one() -> None:
    weights = msgspec.convert({}, dm.SalienceWeights)
    assert weights.emphasis == 0.4 and weights.action == 0.4
    assert "$.weights.risk" in refused(dm.ReflectIn, {"weights": {"risk": 1.5}})
    assert "unknown field `colour`" in refused(dm.SalienceWeights, {"colour": 1})


def test_proposed_candidates_and_the_critic() -> None:
    proposed = msgspec.convert({"kind": "risk", "text": "the ladder wobbles"}, dm.ProposedCandidate)
    assert (proposed.truth_state, proposed.confidence, proposed.synthetic) == ("hypothesis", 0.5, False)
    assert "$.kind" in refused(dm.ProposedCandidate, {"kind": "consolidation", "text": "t"})  # runtime kinds only
    assert "$.text" in refused(dm.ProposedCandidate, {"kind": "risk", "text": "x" * (dm.MAX_TEXT_CHARS + 1)})
    critic = msgspec.convert({}, dm.CriticIn)
    assert critic.candidate_ids == [] and critic.candidates == []
    assert "$.candidate_ids[0]" in refused(dm.CriticIn, {"candidate_ids": [0]})


def test_promote_names_an_author_by_name_or_did() -> None:
    assert msgspec.convert({}, dm.PromoteIn).scope == "federation"
    assert msgspec.convert({"author": "alice"}, dm.PromoteIn).author == "alice"
    did = keys.SigningKey.generate().did
    assert msgspec.convert({"author": did}, dm.PromoteIn).author == did
    for author in ["Alice", "did:key:short", "alice\n", ""]:
        assert "$.author" in refused(dm.PromoteIn, {"author": author})


def test_review_and_the_template_runtimes() -> None:
    assert msgspec.convert({"decision": "reject", "note": "no"}, dm.ReviewIn).decision == "reject"
    assert "$.decision" in refused(dm.ReviewIn, {"decision": "maybe"})
    assert "$.note" in refused(dm.ReviewIn, {"decision": "approve", "note": "n" * (dm.MAX_NOTE_CHARS + 1)})
    assert "$.goal" in refused(dm.SimulateFutureIn, {"goal": "   "})
    assert "$.stakeholder" in refused(dm.StakeholderIn, {"stakeholder": "", "proposal": "p"})
    assert "$.problem" in refused(dm.IncubateIn, {"problem": "p" * 1001})
    consolidate = msgspec.convert({}, dm.ConsolidateIn)
    assert (consolidate.limit, consolidate.since, consolidate.include_synthetic) == (50, None, False)
    assert "$.limit" in refused(dm.ConsolidateIn, {"limit": dm.MAX_CONSOLIDATE + 1})


def test_the_candidate_query() -> None:
    query = msgspec.convert({}, dm.CandidateQuery)
    assert (query.status, query.limit, query.offset) == ([], 50, 0)
    assert "$.status[0]" in refused(dm.CandidateQuery, {"status": ["pending"]})
    assert "$.limit" in refused(dm.CandidateQuery, {"limit": 201})


def test_a_candidate_encodes_with_its_optional_decision() -> None:
    candidate = dm.CandidateOut(
        id=1,
        kind="risk",
        text="t",
        salience=0.5,
        confidence=0.5,
        evidence_refs=[],
        truth_state="hypothesis",
        synthetic=False,
        status="needs_review",
        critic_decision="needs_review",
        critic_reasons=["no evidence"],
        risk_flag=True,
        evidence_flag=False,
        payload={},
        tags=[],
        source="reflect",
        proposed_by="did:key:x",
        created_at="2026-01-02T03:04:05Z",
        reviewed_at=None,
        promoted_entry=None,
        promoted_by=None,
        promoted_at=None,
    )
    encoded = msgspec.json.decode(msgspec.json.encode(candidate))
    assert encoded["decision"] is None and encoded["status"] == "needs_review"
    assert msgspec.json.decode(msgspec.json.encode(candidate), type=dm.CandidateOut) == candidate
