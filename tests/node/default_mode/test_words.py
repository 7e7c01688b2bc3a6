"""node.default_mode.words: tokenising and the fixed word lists the scorer, classifier and critic share."""

from __future__ import annotations

import pytest

from node.default_mode import words


def test_tokens_are_lower_case_words_with_an_apostrophe_part() -> None:
    assert words.tokens("We DON'T ship v2.0 -- Alice's plan!") == ["we", "don't", "ship", "v2", "0", "alice's", "plan"]
    assert words.tokens("café naïve") == ["caf", "na", "ve"]  # ASCII letters and digits only
    assert words.tokens("") == []
    assert words.tokens("trailing' quote") == ["trailing", "quote"]


def test_content_words_are_long_and_not_stop_words() -> None:
    toks = words.tokens("This plan is about the backup of your data and the node")
    assert words.content_words(toks) == {"plan", "backup", "data", "node"}
    assert words.content_words([]) == set()


@pytest.mark.parametrize(
    ("text", "risky"),
    [
        ("a risky plan", True),
        ("privacy-related logs", True),
        ("that is illegal", True),
        ("medical records", True),
        ("refinance the loan", True),
        ("the test failed", True),
        ("a calm afternoon", False),
        ("", False),
    ],
)
def test_risk_is_mentioned_by_stem(text: str, risky: bool) -> None:
    assert words.mentions_risk(words.tokens(text)) is risky


def test_the_word_lists() -> None:
    assert not (words.DECISION_WORDS | words.OPEN_LOOP_WORDS | words.PREFERENCE_WORDS) & words.ACTION_WORDS
    assert {"todo", "next", "blocker"} <= words.OPEN_LOOP_WORDS
    assert all(word == word.lower() for word in words.ACTION_WORDS | words.STOP_WORDS)
    assert words.EMPHASIS_PREFIXES == ("remember", "important")
