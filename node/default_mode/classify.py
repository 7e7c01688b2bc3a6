"""The seed's classification of a surviving line, rules tried in this order."""

from __future__ import annotations

from node.default_mode import words

REFLECT_KINDS = ("open_question", "decision", "open_loop", "preference", "risk", "reflection")


def classify(text: str) -> str:
    """open_question if it ends with '?'; decision for decided/choose/selected; open_loop for todo/next/blocker;
    preference for prefer/likes/style; risk for a risk word; reflection otherwise."""
    if text.rstrip().endswith("?"):
        return "open_question"
    toks = words.tokens(text)
    present = set(toks)
    if present & words.DECISION_WORDS:
        return "decision"
    if present & words.OPEN_LOOP_WORDS:
        return "open_loop"
    if present & words.PREFERENCE_WORDS:
        return "preference"
    if words.mentions_risk(toks):
        return "risk"
    return "reflection"
