"""Tokenising and the fixed word lists the scorer, classifier and critic share."""

from __future__ import annotations

import re

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")

# Stems: a token *containing* one of these mentions the topic ("failed", "privacy-related", "illegal").
RISK_STEMS: tuple[str, ...] = ("risk", "privacy", "legal", "medical", "financ", "fail")

ACTION_WORDS = frozenset(
    {
        "add", "build", "change", "check", "choose", "chose", "decide", "decided", "delete", "deploy", "do", "done",
        "finish", "fix", "implement", "merge", "migrate", "move", "must", "need", "needs", "next", "plan", "prefer",
        "remove", "replace", "review", "run", "schedule", "select", "selected", "send", "ship", "should", "start",
        "stop", "test", "todo", "update", "use", "will", "write",
    }
)  # fmt: skip

DECISION_WORDS = frozenset({"decided", "choose", "selected"})
OPEN_LOOP_WORDS = frozenset({"todo", "next", "blocker"})
PREFERENCE_WORDS = frozenset({"prefer", "likes", "style"})
EMPHASIS_PREFIXES: tuple[str, ...] = ("remember", "important")

STOP_WORDS = frozenset(
    {
        "about", "after", "also", "been", "before", "being", "does", "from", "have", "into", "just", "like", "more",
        "most", "only", "over", "said", "some", "such", "than", "that", "their", "them", "then", "there", "these",
        "they", "this", "very", "were", "what", "when", "which", "while", "will", "with", "would", "your",
    }
)  # fmt: skip


def tokens(text: str) -> list[str]:
    """Lower-case word tokens."""
    return _TOKEN.findall(text.lower())


def content_words(toks: list[str]) -> set[str]:
    """The words that carry topic: four letters or more, not a stop word."""
    return {t for t in toks if len(t) >= 4 and t not in STOP_WORDS}


def mentions_risk(toks: list[str]) -> bool:
    """True if any token mentions risk, privacy, legal, medical, financial or failure."""
    return any(stem in t for t in toks for stem in RISK_STEMS)
