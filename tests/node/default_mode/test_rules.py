"""The pure rules of the runtime: salience formula, classification, critic, templates."""

from __future__ import annotations

import pytest

from node.default_mode import critic, salience, templates
from node.default_mode.classify import classify
from node.wire.default_mode import SalienceWeights

TRANSCRIPT = [
    "We decided to use Postgres for storage",
    "ok",
    "Postgres storage needs a backup plan",
    "The weather is lovely this afternoon",
]


def test_salience_formula_by_hand() -> None:
    scored = salience.score_lines(TRANSCRIPT, SalienceWeights())
    assert [s.index for s in scored] == [0, 2, 3]  # "ok" is 20 characters or fewer: not scored
    first, second, third = scored
    # "decided" is a seed rule word (1) and "use" an action word (0.5): action min(1, 1.5) = 1; content words
    # decided/postgres/storage all new; postgres and storage recur -> repetition 2/3.
    assert first.features == {
        "action": 1.0, "risk": 0.0, "novelty": 1.0, "repetition": 0.6667, "emphasis": 0.0,
        "goal_relevance": 0.0, "evidence_strength": 0.0,
    }  # fmt: skip
    assert first.score == round(0.4 + 0.05 + 0.05 * 2 / 3, 4) == 0.4833
    # two action words (needs, plan): action 1; content words postgres/storage/needs/backup/plan: 3 new, 2 recur
    assert second.features["action"] == 1.0
    assert second.features["novelty"] == 0.6 and second.features["repetition"] == 0.4
    assert second.score == 0.45
    assert third.score == 0.05 and not third.kept  # below 0.35: dropped
    assert first.kept and second.kept


def test_supplied_weights_and_goal_evidence_values() -> None:
    scored = salience.score_lines(TRANSCRIPT, SalienceWeights(), goal_relevance=1.0, evidence_strength=0.5)
    assert [s.score for s in scored] == [0.6333, 0.6, 0.2]
    only_novelty = SalienceWeights(action=0, risk=0, novelty=1, repetition=0, emphasis=0, goal_relevance=0,
                                   evidence_strength=0)  # fmt: skip
    assert [s.score for s in salience.score_lines(TRANSCRIPT, only_novelty)] == [1.0, 0.6, 1.0]


def test_emphasis_and_risk_features() -> None:
    (line,) = salience.score_lines(["Remember that Alice drinks green tea"], SalienceWeights())
    assert line.features["emphasis"] == 1.0 and line.score == 0.45
    (line,) = salience.score_lines(["This is important for the household"], SalienceWeights())
    assert line.features["emphasis"] == 1.0
    (line,) = salience.score_lines(["The disk failed during the night backup"], SalienceWeights())
    assert line.features["risk"] == 1.0 and line.score == 0.45 and line.kept
    weights = SalienceWeights(risk=0.3)
    (line,) = salience.score_lines(["The disk failed during the night backup"], weights)
    assert line.score == 0.35 and line.kept  # exactly 0.35 survives


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Should we ship the release on Friday?", "open_question"),
        ("We decided the next step is a todo?", "open_question"),  # the question mark wins
        ("We decided to use SQLite for the node", "decision"),
        ("You choose the colour of the dashboard", "decision"),
        ("Alice selected the cheaper plan today", "decision"),
        ("We decided the todo list goes first", "decision"),  # decision before open_loop
        ("todo: write the migration for trust", "open_loop"),
        ("Next we write the operations guide", "open_loop"),
        ("The blocker is the flaky CI runner", "open_loop"),
        ("I prefer tabs over spaces in Makefiles", "preference"),
        ("Alice likes short answers in the morning", "preference"),
        ("Our code style is whatever ruff says", "preference"),
        ("There is a privacy concern with the logs", "risk"),
        ("The medical records must stay on this node", "risk"),
        ("The build took nine minutes this morning", "reflection"),
    ],
)
def test_classification_rules(text: str, kind: str) -> None:
    assert classify(text) == kind


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


def test_templates_are_fixed_and_substitute_input() -> None:
    text, payload = templates.simulate_future("move the node to a new disk")
    assert list(payload["paths"]) == ["best_case", "most_likely", "failure_path", "hidden_risk", "low_effort"]
    assert templates.simulate_future("move the node to a new disk") == (text, payload)
    assert all("move the node to a new disk" in item for items in payload["paths"].values() for item in items)
    _, stake = templates.stakeholder_simulation("the landlord", "a rooftop antenna")
    assert stake["label"] == "speculative_general_pattern"
    assert stake["concerns"] and stake["message_adjustments"]
    _, inc = templates.incubate("slow sync {braces} kept")
    assert len(inc["seeds"]) == 6 and all("slow sync {braces} kept" in s["prompt"] for s in inc["seeds"])
