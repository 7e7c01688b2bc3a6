"""node.default_mode.salience: the weighted sum of seven features that scores transcript lines."""

from __future__ import annotations

from node.default_mode import salience
from wire.default_mode import SalienceWeights

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


def test_the_score_is_capped_at_one() -> None:
    heavy = SalienceWeights(action=1, risk=1, novelty=1, repetition=1, emphasis=1, goal_relevance=1,
                            evidence_strength=1)  # fmt: skip
    (line,) = salience.score_lines(["Remember: we must fix the privacy risk next"], heavy, goal_relevance=1.0)
    assert line.score == 1.0 and line.kept


def test_lines_are_trimmed_and_short_ones_skipped() -> None:
    assert salience.score_lines([], SalienceWeights()) == []
    assert salience.score_lines(["   " + "x" * salience.MIN_LINE_CHARS + "   "], SalienceWeights()) == []
    (line,) = salience.score_lines(["  " + "y" * (salience.MIN_LINE_CHARS + 1) + "  "], SalienceWeights())
    assert line.text == "y" * 21 and line.index == 0


def test_a_line_without_content_words_has_no_novelty_or_repetition() -> None:
    (line,) = salience.score_lines(["do it, do it, do it, do it!"], SalienceWeights())
    assert line.features["novelty"] == 0.0 and line.features["repetition"] == 0.0
    assert line.features["action"] == 0.0  # "do" is no action word: neither a seed rule word nor in ACTION_WORDS


def test_skipped_lines_still_count_as_seen() -> None:
    """A short line is not scored, but its words are no longer new for the lines after it."""
    scored = salience.score_lines(["kettle descaled", "The kettle was descaled again today"], SalienceWeights())
    (line,) = scored
    assert line.index == 1 and line.features["novelty"] == 0.5  # kettle, descaled seen; again, today new
