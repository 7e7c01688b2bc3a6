"""node.search_index.analyzer: words as FTS5's unicode61 finds them, checked against the running SQLite."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from node.search_index.analyzer import (
    ascii_token_end,
    ascii_token_start,
    fold,
    is_token_char,
    spelled,
    token_spans,
    tokens,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Café au LAIT", ["cafe", "au", "lait"]),
        ("foo_bar-baz", ["foo", "bar", "baz"]),  # underscore separates, as in unicode61
        ("naïve Straße", ["naive", "straße"]),
        ("x\u0301y", ["xy"]),  # a combining acute inside a word is dropped
        ("日本語 ok", ["日本語", "ok"]),
        ("", []),
        ("... --- ...", []),
    ],
)
def test_tokens(text: str, expected: list[str]) -> None:
    assert tokens(text) == expected


def test_the_table_agrees_with_this_sqlite() -> None:
    """Every code point of a sample (all of Latin, Greek, combining marks, CJK, private use) through FTS5."""
    sample = [cp for r in (range(0x80, 0x600), range(0x1E00, 0x2100), range(0x3000, 0x3100), range(0xE000, 0xE010))
              for cp in r]  # fmt: skip
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    conn.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)", ((cp, f"q{chr(cp)}z") for cp in sample))
    found: dict[int, list[str]] = {}
    for term, doc in conn.execute("SELECT term, doc FROM v ORDER BY doc, offset"):
        found.setdefault(doc, []).append(term)
    for cp in sample:
        assert tokens(f"q{chr(cp)}z") == found[cp], hex(cp)
        assert is_token_char(chr(cp)) == (len(found[cp]) == 1)


def test_fold_of_ascii_is_lower_case() -> None:
    assert fold("A") == "a"
    assert fold("é") == "e"


@given(st.text(alphabet=st.sampled_from(list("aZ9_ -é\u0301日本😀\ue000ßΩ\u2070.")), max_size=40) | st.text())
def test_token_spans_are_tokens_with_where_they_stand(text: str) -> None:
    spans = token_spans(text)
    assert [t for t, _, _ in spans] == tokens(text)
    for token, start, end in spans:
        assert tokens(text[start:end]) == [token]
        assert is_token_char(text[start]) and is_token_char(text[end - 1])


@given(st.text(alphabet=st.sampled_from(list("aAbé É\u0301\u0327cÇ日本ßΩω._")), max_size=40))
def test_spelled_finds_every_spelling_of_a_words_beginning(text: str) -> None:
    for token, start, end in token_spans(text):
        for k in range(1, len(token) + 1):
            assert any(start <= m.start() < end for m in spelled(token[:k]).finditer(text)), (text, token[:k])


def test_ascii_word_bounds_are_looked_up_around_a_position() -> None:
    text = "ab, cd-ef  gh"
    assert [ascii_token_start(text, i) for i in (0, 1, 2, 4, 5, 7, 13)] == [0, 4, 4, 4, 7, 7, 13]  # 13: none
    assert [ascii_token_end(text, 0, limit) for limit in (1, 2, 5, 6, 8, 13)] == [None, 2, 2, 6, 6, 13]
    assert ascii_token_end(text, 4, 3) is None and ascii_token_end(text, 4, 9) == 9
