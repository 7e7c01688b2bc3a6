"""node/default_mode/proposals.py: reflect, critic, consolidate, the templates and listing, called on the node's
one `DefaultMode` (REST: test_api.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from node.errors import InvalidInput, NotFound
from node.service import Node
from tests.conftest import AgentCreds
from wire.api import PostEntry
from wire.default_mode import (
    CandidateQuery,
    ConsolidateIn,
    CriticIn,
    IncubateIn,
    ProposedCandidate,
    ReflectIn,
    SimulateFutureIn,
)

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def test_evidence_refs_resolve_to_hashes_and_an_unknown_one_is_named(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    evidence, _ = await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "the backup ran"), None)
    pending = "b" * 64  # a well-formed hash of an entry not here yet: kept, it may arrive
    proposed = ProposedCandidate(
        kind="reflection", text="Backups run nightly", evidence_refs=[str(evidence.id), evidence.record_hash, pending]
    )
    result, stored = await node.default_mode.critic(alice.agent_id, CriticIn(candidates=[proposed]))
    assert stored and result.candidates[0].evidence_refs == [evidence.record_hash, pending]
    unknown = ProposedCandidate(kind="reflection", text="Something else", evidence_refs=[evidence.record_hash, "777"])
    with pytest.raises(NotFound) as caught:
        await node.default_mode.critic(alice.agent_id, CriticIn(candidates=[proposed, unknown]))
    assert (caught.value.code, caught.value.field) == ("evidence_not_found", "$.candidates[1].evidence_refs[1]")
    assert str(caught.value) == "evidence '777' is not a known entry id or a record hash"
    assert len((await node.default_mode.candidates(CandidateQuery(), viewer=None)).candidates) == 1


async def test_reflect_keeps_salient_lines_and_replays_its_key(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    lines = ["We decided to keep group commit on", "Remember the privacy review next week"]
    first, stored = await node.default_mode.reflect(alice.agent_id, ReflectIn(transcript="\n".join(lines)), "r1")
    assert stored and first.candidates and {c.text for c in first.candidates} <= set(lines)
    assert all(c.proposed_by == alice.agent_id and c.source == "reflect-session" for c in first.candidates)
    again, stored_again = await node.default_mode.reflect(alice.agent_id, ReflectIn(transcript="other words"), "r1")
    assert not stored_again and [c.id for c in again.candidates] == [c.id for c in first.candidates]
    with pytest.raises(InvalidInput) as neither:
        await node.default_mode.reflect(alice.agent_id, ReflectIn())
    assert neither.value.code == "transcript_or_session"
    with pytest.raises(NotFound) as no_session:
        await node.default_mode.reflect(alice.agent_id, ReflectIn(session_id="s-none"))
    assert (no_session.value.code, no_session.value.field) == ("session_not_found", "$.session_id")


async def test_consolidate_and_templates_store_one_reviewed_candidate(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    with pytest.raises(InvalidInput) as nothing:
        await node.default_mode.consolidate(alice.agent_id, ConsolidateIn(), None)
    assert nothing.value.code == "nothing_to_consolidate"
    for i in range(3):
        await node.entries.post(alice.agent_id, PostEntry("finding", "inform", f"note {i}", tags=["ops"]), None)
    summary, _ = await node.default_mode.consolidate(alice.agent_id, ConsolidateIn(tags=["ops"]), None)
    assert summary.kind == "consolidation" and len(summary.evidence_refs) == 3
    assert summary.text.startswith("Consolidation of 3 recent entries")
    future, _ = await node.default_mode.simulate_future(alice.agent_id, SimulateFutureIn(goal="a second node"))
    assert future.candidate.synthetic and future.candidate.truth_state == "simulation"
    idea, _ = await node.default_mode.incubate(alice.agent_id, IncubateIn(problem="slow backups"), "i1")
    again, stored = await node.default_mode.incubate(alice.agent_id, IncubateIn(problem="another problem"), "i1")
    assert not stored and again.candidate.id == idea.candidate.id
    listed = await node.default_mode.candidates(CandidateQuery(limit=2), viewer=None)
    assert [c.id for c in listed.candidates] == [idea.candidate.id, future.candidate.id] and listed.next_offset == 2
    assert (await node.default_mode.candidate(summary.id, viewer=None)).text == summary.text
    with pytest.raises(NotFound) as unknown:
        await node.default_mode.candidate(4242, viewer=None)
    assert unknown.value.code == "candidate_not_found"
