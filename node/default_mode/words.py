"""Tokenising and the fixed word lists the scorer, classifier and critic share.

The seed's rule words count in any inflection: each list below spells the forms out, so what counts is
readable here rather than hidden in a stemmer.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")

# Stems: a token *containing* one of these mentions the topic ("failed", "privacy-related", "illegal").
RISK_STEMS: tuple[str, ...] = ("risk", "privacy", "legal", "medical", "financ", "fail")

# The seed's rule words (decided/choose/selected, todo/next/blocker, prefer/likes/style), every inflection.
DECISION_WORDS = frozenset(
    {
        "decide", "decides", "decided", "deciding", "choose", "chooses", "chose", "chosen", "choosing", "select",
        "selects", "selected", "selecting",
    }
)  # fmt: skip
OPEN_LOOP_WORDS = frozenset({"todo", "todos", "next", "blocker", "blockers", "blocked", "blocking"})
PREFERENCE_WORDS = frozenset(
    {"prefer", "prefers", "preferred", "preferring", "likes", "liked", "liking", "style", "styles"}
)
# "like" is also a preposition ("looks like rain"): the bare form counts only after one of these.
LIKE_AFTER = frozenset(
    {"i", "we", "you", "they", "i'd", "we'd", "you'd", "they'd", "would", "don't", "didn't", "really", "also", "always"}
)  # fmt: skip
EMPHASIS_PREFIXES: tuple[str, ...] = ("remember", "important")

# "next" followed by one of these is a date ("next week"), not the next step: it counts half (salience.py).
TIME_WORDS = frozenset(
    {
        "time", "times", "day", "week", "weekend", "month", "year", "morning", "afternoon", "evening", "night",
        "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "spring", "summer", "autumn",
        "winter", "term", "quarter",
    }
)  # fmt: skip
# A question put to the listeners themselves ("did you", "anyone ... ?") is how small talk asks: it counts half.
LISTENER_WORDS = frozenset(
    {"you", "your", "yours", "you're", "you've", "you'll", "you'd", "everyone", "everybody", "anyone", "anybody"}
)

# Other words of doing, every inflection spelled out: each counts half as much as a seed rule word (salience.py).
ACTION_WORDS = frozenset(
    {
        "add", "adds", "added", "adding", "ask", "asks", "asked", "asking", "book", "books", "booked", "booking",
        "build", "builds", "built", "building", "buy", "buys", "bought", "buying", "call", "calls", "called",
        "calling", "cancel", "cancels", "cancelled", "cancelling", "canceled", "canceling", "change", "changes",
        "changed", "changing", "check", "checks", "checked", "checking", "clean", "cleans", "cleaned", "cleaning",
        "clear", "clears", "cleared", "clearing", "delete", "deletes", "deleted", "deleting", "deploy", "deploys",
        "deployed", "deploying", "find", "finds", "found", "finding", "finish", "finishes", "finished", "finishing",
        "fix", "fixes", "fixed", "fixing", "implement", "implements", "implemented", "implementing", "install",
        "installs", "installed", "installing", "merge", "merges", "merged", "merging", "migrate", "migrates",
        "migrated", "migrating", "move", "moves", "moved", "moving", "need", "needs", "needed", "needing", "order",
        "orders", "ordered", "ordering", "pay", "pays", "paid", "paying", "plan", "plans", "planned", "planning",
        "remove", "removes", "removed", "removing", "renew", "renews", "renewed", "renewing", "repair", "repairs",
        "repaired", "repairing", "replace", "replaces", "replaced", "replacing", "review", "reviews", "reviewed",
        "reviewing", "run", "runs", "ran", "running", "schedule", "schedules", "scheduled", "scheduling", "send",
        "sends", "sent", "sending", "ship", "ships", "shipped", "shipping", "sign", "signs", "signed", "signing",
        "sort", "sorts", "sorted", "sorting", "start", "starts", "started", "starting", "stop", "stops", "stopped",
        "stopping", "test", "tests", "tested", "testing", "update", "updates", "updated", "updating", "use", "uses",
        "used", "using", "write", "writes", "wrote", "written", "writing", "must", "should",
    }
)  # fmt: skip

STOP_WORDS = frozenset(
    {
        "about", "after", "also", "been", "before", "being", "does", "from", "have", "into", "just", "like", "more",
        "most", "only", "over", "said", "some", "such", "than", "that", "their", "them", "then", "there", "these",
        "they", "this", "very", "were", "what", "when", "which", "while", "will", "with", "would", "your",
    }
)  # fmt: skip


def tokens(text: str) -> list[str]:
    """Lower-case word tokens ("to-do" is read as "todo")."""
    return _TOKEN.findall(text.lower().replace("to-do", "todo"))


def content_words(toks: list[str]) -> set[str]:
    """The words that carry topic: four letters or more, not a stop word."""
    return {t for t in toks if len(t) >= 4 and t not in STOP_WORDS}


def mentions_risk(toks: list[str]) -> bool:
    """True if any token mentions risk, privacy, legal, medical, financial or failure."""
    return any(stem in t for t in toks for stem in RISK_STEMS)


def decides(toks: list[str]) -> bool:
    """True if the line says decided, choose or selected, in any inflection."""
    return not DECISION_WORDS.isdisjoint(toks)


def leaves_open(toks: list[str]) -> bool:
    """True if the line says todo, next or blocker, in any inflection."""
    return not OPEN_LOOP_WORDS.isdisjoint(toks)


def prefers(toks: list[str]) -> bool:
    """True if the line says prefer, likes or style, in any inflection ("like" only as a verb after a subject)."""
    return any(t in PREFERENCE_WORDS or _like_verb(toks, i) for i, t in enumerate(toks))


def rule_word(toks: list[str], i: int) -> bool:
    """True if token i is one of the seed's rule words (decision, open loop or preference), in any inflection."""
    t = toks[i]
    return t in DECISION_WORDS or t in OPEN_LOOP_WORDS or t in PREFERENCE_WORDS or _like_verb(toks, i)


def _like_verb(toks: list[str], i: int) -> bool:
    return toks[i] == "like" and i > 0 and toks[i - 1] in LIKE_AFTER


def emphasised(toks: list[str]) -> bool:
    """True if the line says remember or important, in any inflection."""
    return any(t.startswith(EMPHASIS_PREFIXES) for t in toks)


def asks(text: str) -> bool:
    """True if the line ends with a question mark."""
    return text.rstrip().endswith("?")
