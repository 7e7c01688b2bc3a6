"""Salience of transcript lines: a weighted sum of seven features, each in [0, 1].

    score = min(1, w_action * action + w_risk * risk + w_novelty * novelty + w_repetition * repetition
                   + w_emphasis * emphasis + w_goal * goal_relevance + w_evidence * evidence_strength)

action      = min(1, signs of action): a seed rule word or a trailing "?" counts 1, a weak sign WEAK (see action)
risk        = 1 if the line mentions risk, privacy, legal, medical, financial or failure, else 0
novelty     = share of the line's content words not seen in any earlier line
repetition  = share of the line's content words that occur in some other line
emphasis    = 1 if the line says "remember" or "important" (any inflection), else 0
goal_relevance, evidence_strength = supplied by the caller for the whole transcript

Lines of 20 characters or fewer are not scored; lines scoring under DROP_BELOW are dropped. With the default
weights (wire/default_mode.py, calibrated in docs/default-mode.md) one signal passes alone, one weak sign
does not.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from node.default_mode import words
from wire.default_mode import SalienceWeights

MIN_LINE_CHARS = 20
DROP_BELOW = 0.35
WEAK = 0.5  # what a weak sign of action counts for, against 1 for a seed rule word


def action(toks: list[str], line: str) -> float:
    """min(1, sum of the line's signs of action).

    A seed rule word (decided/choose/selected, todo/blocker, prefer/likes/style, any inflection) counts 1, and so
    do "next" and a trailing "?". Counting WEAK: "next" before a time word ("next week"), a question put to the
    listeners ("did you ...?", "anyone ...?"), and each other action word (words.ACTION_WORDS)."""
    total = 0.0
    for i, t in enumerate(toks):
        if t == "next":
            dated = i + 1 < len(toks) and toks[i + 1] in words.TIME_WORDS
            total += WEAK if dated else 1.0
        elif words.rule_word(toks, i):
            total += 1.0
        elif t in words.ACTION_WORDS:
            total += WEAK
    if words.asks(line):
        total += WEAK if words.LISTENER_WORDS.intersection(toks) else 1.0
    return min(1.0, total)


@dataclass(frozen=True)
class ScoredLine:
    """One transcript line with its features and score."""

    index: int  # position among the transcript's lines, from 0
    text: str
    features: dict[str, float]
    score: float

    @property
    def kept(self) -> bool:
        return self.score >= DROP_BELOW


def score_lines(
    lines: list[str], weights: SalienceWeights, *, goal_relevance: float = 0.0, evidence_strength: float = 0.0
) -> list[ScoredLine]:
    """Score every line longer than MIN_LINE_CHARS (after trimming)."""
    stripped = [line.strip() for line in lines]
    toks = [words.tokens(line) for line in stripped]
    content = [words.content_words(t) for t in toks]
    occurrences = Counter(w for c in content for w in c)  # in how many lines each word occurs
    seen: set[str] = set()
    out: list[ScoredLine] = []
    for i, line in enumerate(stripped):
        cw = content[i]
        if len(line) > MIN_LINE_CHARS:
            features = {
                "action": action(toks[i], line),
                "risk": 1.0 if words.mentions_risk(toks[i]) else 0.0,
                "novelty": (len(cw - seen) / len(cw)) if cw else 0.0,
                "repetition": (sum(1 for w in cw if occurrences[w] > 1) / len(cw)) if cw else 0.0,
                "emphasis": 1.0 if words.emphasised(toks[i]) else 0.0,
                "goal_relevance": goal_relevance,
                "evidence_strength": evidence_strength,
            }
            total = sum(getattr(weights, name) * value for name, value in features.items())
            out.append(ScoredLine(i, line, {k: round(v, 4) for k, v in features.items()}, round(min(1.0, total), 4)))
        seen |= cw
    return out
