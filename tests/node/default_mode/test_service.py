"""node/default_mode/service.py: drafts, promotion and human review on the node's one `DefaultMode`, called
directly (REST: test_api.py, test_review.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable

import pytest

from node.default_mode.service import ADMIN, NotPromotable
from node.errors import Conflict, Forbidden, InvalidInput, NotFound
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import self_signer
from wire.api import PostEntry
from wire.default_mode import CriticIn, PromoteIn, ProposedCandidate, ReviewIn

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def evidenced_candidate(node: Node, author: AgentCreds, text: str) -> int:
    """A candidate the critic approves: evidenced, nothing risky."""
    evidence, _ = await node.entries.post(author.agent_id, PostEntry("finding", "inform", f"evidence for {text}"), None)
    proposed = ProposedCandidate(kind="decision", text=text, evidence_refs=[evidence.record_hash], truth_state="fact")
    result, _ = await node.default_mode.critic(author.agent_id, CriticIn(candidates=[proposed]))
    assert result.candidates[0].status == "approved", result
    return result.candidates[0].id


async def derived_from_links(node: Node, source: str) -> int:
    def run(conn: sqlite3.Connection) -> int:
        return int(
            conn.execute(
                "SELECT count(*) FROM links WHERE source_hash = ? AND link_type = 'derived_from'", (source,)
            ).fetchone()[0]
        )

    return await node.db.read(run)


async def test_a_promotion_is_a_derived_entry_stored_once(node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    cid = await evidenced_candidate(node, alice, "Group commit stays on")
    draft = await node.default_mode.draft(cid, viewer=None)
    assert (draft.entry_type, draft.authority, draft.content) == ("finding", "derived", "Group commit stays on")
    assert draft.metadata["default_mode"]["evidence_refs"][0] == f"candidate:{node.node_id}/{cid}"
    promoted = await node.default_mode.promote(bob.agent_id, cid, PromoteIn())
    assert promoted.created and promoted.entry.author_id == bob.agent_id and promoted.entry.content == draft.content
    assert (promoted.candidate.status, promoted.candidate.promoted_by) == ("promoted", bob.agent_id)
    assert await derived_from_links(node, promoted.entry.record_hash) == 1
    with pytest.raises(NotPromotable) as twice:
        await node.default_mode.promote(alice.agent_id, cid, PromoteIn())
    assert promoted.entry.record_hash in twice.value.detail and twice.value.field == "candidate_id"
    with pytest.raises(NotPromotable):
        await node.default_mode.draft(cid, viewer=None)  # promoted: no longer a draft


async def test_a_retry_with_the_promotion_s_key_answers_it_and_no_other_does(node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    cid = await evidenced_candidate(node, alice, "Snapshots run at two")
    promoted = await node.default_mode.promote(bob.agent_id, cid, PromoteIn(), idempotency_key="k-1")
    again = await node.default_mode.promote(bob.agent_id, cid, PromoteIn(), idempotency_key="k-1")
    assert (again.created, again.entry, again.candidate) == (False, promoted.entry, promoted.candidate)
    for who, key in ((bob, None), (bob, "k-2"), (alice, "k-1")):  # a key belongs to the agent that used it
        with pytest.raises(NotPromotable) as refused:
            await node.default_mode.promote(who.agent_id, cid, PromoteIn(), idempotency_key=key)
        assert promoted.entry.record_hash in refused.value.detail


async def test_an_interrupted_promotion_is_finished_by_promoting_again(node: Node, make_agent: MakeAgent) -> None:
    """An older node committed the entry and stopped before marking the candidate (docs/default-mode.md)."""
    alice = await make_agent("alice")
    cid = await evidenced_candidate(node, alice, "The UPS lasts twelve minutes")
    draft = await node.default_mode.draft(cid, viewer=None)
    body = PostEntry(
        draft.entry_type, draft.performative, draft.content, confidence=draft.confidence, tags=draft.tags,  # type: ignore[arg-type]
        metadata=draft.metadata, truth_state=draft.truth_state, authority="derived",
    )  # fmt: skip
    interrupted, _ = await node.entries.post_with(
        alice.agent_id, body, f"default-mode:promote:{cid}", derived_from=[], then=lambda conn, entry: None
    )
    assert (await node.default_mode.candidate(cid, viewer=None)).status == "approved"
    finished = await node.default_mode.promote(alice.agent_id, cid, PromoteIn(), idempotency_key="finish")
    assert not finished.created and finished.entry.record_hash == interrupted.record_hash
    assert (finished.candidate.status, finished.candidate.promoted_entry) == ("promoted", interrupted.record_hash)
    retried = await node.default_mode.promote(alice.agent_id, cid, PromoteIn(), idempotency_key="finish")
    assert retried.entry.record_hash == interrupted.record_hash


async def test_promotion_refusals(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    cid = await evidenced_candidate(node, alice, "Backups finish before six")
    with pytest.raises(Forbidden) as names_author:
        await node.default_mode.promote(alice.agent_id, cid, PromoteIn(author="bob"))
    assert names_author.value.code == "author_admin_only"
    with pytest.raises(NotFound):
        await node.default_mode.promote(alice.agent_id, 4242, PromoteIn())
    signer = await self_signer(node, "own")
    with pytest.raises(InvalidInput) as unsigned:
        await node.default_mode.promote(signer.agent_id, cid, PromoteIn())
    assert unsigned.value.code == "agent_signs_own_records"
    with pytest.raises(InvalidInput) as mismatch:
        await node.default_mode.promote(signer.agent_id, cid, PromoteIn(record={"content": "something else"}))
    assert mismatch.value.code == "draft_mismatch"
    # the same content posted since the approval: promoting it would store it twice
    await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "Backups finish before six"), None)
    with pytest.raises(Conflict) as duplicate:
        await node.default_mode.promote(alice.agent_id, cid, PromoteIn())
    assert duplicate.value.code == "duplicate_of_entry"
    assert (await node.default_mode.candidate(cid, viewer=None)).status == "approved"


async def test_review_decisions_and_the_admins_promotion(node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    proposed = ProposedCandidate(kind="reflection", text="An unevidenced hunch")  # held for review
    result, _ = await node.default_mode.critic(alice.agent_id, CriticIn(candidates=[proposed]))
    (held,) = result.candidates
    assert held.status == "needs_review"
    with pytest.raises(Forbidden) as own:
        await node.default_mode.review(alice.agent_id, held.id, ReviewIn(decision="approve"))
    assert own.value.code == "own_candidate"
    approved = await node.default_mode.review(bob.agent_id, held.id, ReviewIn(decision="approve", note=" fine "))
    assert (approved.status, approved.decided_by, approved.decision_note) == ("approved", bob.agent_id, "fine")
    with pytest.raises(InvalidInput) as no_author:
        await node.default_mode.promote_as_admin(held.id, PromoteIn())
    assert no_author.value.code == "author_required"
    by_admin = await node.default_mode.promote_as_admin(held.id, PromoteIn(author="bob"))
    assert by_admin.entry.author_id == bob.agent_id and by_admin.candidate.promoted_by == bob.agent_id
    with pytest.raises(Conflict) as promoted:
        await node.default_mode.review(ADMIN, held.id, ReviewIn(decision="reject"))
    assert promoted.value.code == "candidate_promoted"
