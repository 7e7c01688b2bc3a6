"""The critic: the rules that stand between a candidate and promotion.

1. duplicate: the same content (by content fingerprint) is already an entry -> rejected.
2. risk: mentions risk, privacy, legal, medical, financial or failure -> needs_review, hypothesis.
3. no evidence: no evidence references at all -> needs_review, hypothesis.
4. runtime summary: consolidation and incubation output -> needs_review, hypothesis.
5. otherwise approved, keeping the candidate's truth_state.
Synthetic candidates keep truth_state simulation whatever the decision: approval never launders them.
The rules read the candidate's text; the templates' fixed text names no risk word, so for their output the
risk rule judges what the caller supplied.
"""

from __future__ import annotations

from dataclasses import dataclass

from node.default_mode import words

ALWAYS_REVIEW = frozenset({"consolidation", "incubation"})


@dataclass(frozen=True)
class Review:
    """The critic's verdict on one candidate."""

    decision: str  # approved | needs_review | rejected
    truth_state: str
    risk_flag: bool
    evidence_flag: bool
    reasons: tuple[str, ...]


def review(*, kind: str, text: str, evidence_refs: list[str], truth_state: str, synthetic: bool,
           duplicate: bool) -> Review:  # fmt: skip
    """Apply the critic's rules to one candidate."""
    risk = words.mentions_risk(words.tokens(text))
    evidence = bool(evidence_refs)
    reasons: list[str] = []
    if duplicate:
        reasons.append("duplicate_of_entry")
    if risk:
        reasons.append("risk_mentioned")
    if not evidence:
        reasons.append("no_evidence")
    if kind in ALWAYS_REVIEW:
        reasons.append("runtime_summary")
    if duplicate:
        decision = "rejected"
    elif risk or not evidence or kind in ALWAYS_REVIEW:
        decision = "needs_review"
        truth_state = "hypothesis"
    else:
        decision = "approved"
    if synthetic:
        truth_state = "simulation"
        reasons.append("synthetic_stays_simulation")
    return Review(decision, truth_state, risk, evidence, tuple(reasons))
