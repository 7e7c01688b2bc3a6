"""node.default_mode.critic: the rules that stand between a candidate and promotion."""

from __future__ import annotations

import pytest

from node.default_mode import critic


def _review(text: str = "The node uses WAL mode", *, evidence: bool = True, truth: str = "fact",
            synthetic: bool = False, kind: str = "reflection", duplicate: bool = False) -> critic.Review:  # fmt: skip
    return critic.review(kind=kind, text=text, evidence_refs=["a" * 64] if evidence else [], truth_state=truth,
                         synthetic=synthetic, duplicate=duplicate)  # fmt: skip


def test_critic_approves_evidenced_unrisky_and_keeps_truth_state() -> None:
    r = _review()
    assert (r.decision, r.truth_state, r.risk_flag, r.evidence_flag) == ("approved", "fact", False, True)


@pytest.mark.parametrize("word", ["risk", "privacy", "legal", "medical", "financial", "failure"])
def test_critic_forces_risky_to_needs_review_hypothesis(word: str) -> None:
    r = _review(f"A note about {word} in the plan", truth="fact")
    assert (r.decision, r.truth_state, r.risk_flag) == ("needs_review", "hypothesis", True)
    assert "risk_mentioned" in r.reasons


def test_critic_forces_unevidenced_to_needs_review_hypothesis() -> None:
    r = _review(evidence=False, truth="fact")
    assert (r.decision, r.truth_state, r.evidence_flag) == ("needs_review", "hypothesis", False)
    assert r.reasons == ("no_evidence",)


def test_critic_synthetic_approved_but_stays_simulation() -> None:
    r = _review(synthetic=True, truth="fact")
    assert (r.decision, r.truth_state) == ("approved", "simulation")
    risky = _review("a hidden risk", synthetic=True)
    assert (risky.decision, risky.truth_state) == ("needs_review", "simulation")


def test_critic_rejects_duplicates_and_holds_runtime_summaries() -> None:
    assert _review(duplicate=True).decision == "rejected"
    for kind in ("consolidation", "incubation"):
        r = _review(kind=kind)
        assert (r.decision, r.truth_state) == ("needs_review", "hypothesis")


def test_every_reason_is_listed_in_rule_order() -> None:
    r = _review("a legal risk", evidence=False, kind="consolidation", duplicate=True, synthetic=True, truth="fact")
    assert r.reasons == (
        "duplicate_of_entry",
        "risk_mentioned",
        "no_evidence",
        "runtime_summary",
        "synthetic_stays_simulation",
    )
    assert (r.decision, r.truth_state) == ("rejected", "simulation")  # a duplicate keeps its truth_state otherwise
    assert _review(duplicate=True, truth="hypothesis").truth_state == "hypothesis"


def test_an_approved_hypothesis_stays_a_hypothesis() -> None:
    assert _review(truth="hypothesis") == critic.Review("approved", "hypothesis", False, True, ())
    assert {"consolidation", "incubation"} == critic.ALWAYS_REVIEW
