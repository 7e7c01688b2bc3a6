"""The seed's classification of a surviving line, rules tried in this order."""

from __future__ import annotations

from node.default_mode import words

REFLECT_KINDS = ("open_question", "decision", "open_loop", "preference", "risk", "reflection")


def classify(text: str) -> str:
    """open_question if it ends with '?'; decision for decided/choose/selected; open_loop for todo/next/blocker;
    preference for prefer/likes/style; risk for a risk word; reflection otherwise. Words count in any
    inflection (words.py lists them)."""
    if words.asks(text):
        return "open_question"
    toks = words.tokens(text)
    if words.decides(toks):
        return "decision"
    if words.leaves_open(toks):
        return "open_loop"
    if words.prefers(toks):
        return "preference"
    if words.mentions_risk(toks):
        return "risk"
    return "reflection"
