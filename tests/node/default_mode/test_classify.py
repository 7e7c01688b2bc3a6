"""node.default_mode.classify: the kind of a surviving transcript line, rules tried in order."""

from __future__ import annotations

import pytest

from node.default_mode.classify import REFLECT_KINDS, classify
from wire.default_mode import ReflectKind


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


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Is it done?   ", "open_question"),  # trailing whitespace after the mark
        ("Why? Because it leaked", "reflection"),  # a mark inside the line is not a question
        ("We DECIDED on Tuesday", "decision"),  # any case
        ("We decide tomorrow", "decision"),  # any inflection of a rule word: 'decide' counts
        ("The nextcloud sync is slow", "reflection"),  # 'nextcloud' is not 'next'
        ("A failing disk, nothing else", "risk"),  # stems: 'failing' mentions failure
        ("the prefer-tabs rule", "preference"),  # tokens split at punctuation
        ("", "reflection"),
    ],
)
def test_what_counts_as_a_word(text: str, kind: str) -> None:
    assert classify(text) == kind


def test_the_kinds_are_the_wire_kinds_of_reflect() -> None:
    assert set(REFLECT_KINDS) == set(ReflectKind.__args__)  # type: ignore[attr-defined]
