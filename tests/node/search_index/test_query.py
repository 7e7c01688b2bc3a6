"""node.search_index.query: the only syntax is "phrase" and word*; nothing else can be injected; FTS5 agrees."""

from __future__ import annotations

import json
import sqlite3
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.errors import InvalidInput
from node.search_index.analyzer import tokens
from node.search_index.index import Filters, Row, SearchIndex
from node.search_index.query import MAX_CLAUSES, MAX_PREFIXES, PREFIX_TERMS, Clause, parse
from tests.node.search_index.fts5_oracle import fts5_term


def row(seq: int, content: str, tags: Sequence[str] = ()) -> Row:
    return Row(seq, f"h{seq}", content, json.dumps(list(tags), ensure_ascii=False), "finding", "inform",
               "did:key:a", "fact", 0.5, seq)  # fmt: skip


def hits(index: SearchIndex, q: str, position: int) -> set[int]:
    return set(index.search(parse(q), Filters(), 10_000, 0).ids)


W = Clause  # a word: Clause(("cafe",))


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        ("Café au LAIT", [W(("cafe",)), W(("au",)), W(("lait",))]),
        ('"hot Water" pipe', [W(("hot", "water")), W(("pipe",))]),
        ('"one"', [W(("one",))]),  # a phrase of one token is a word
        ('x "" "..." y', [W(("x",)), W(("y",))]),  # a phrase of no token is ignored
        ('say "unclosed words', [W(("say",)), W(("unclosed",)), W(("words",))]),
        ('a "b c" "d e', [W(("a",)), W(("b", "c")), W(("d",)), W(("e",))]),
        ("desc* ab*cd ab**", [W(("desc",), True), W(("ab",)), W(("cd",)), W(("ab",), True)]),
        ("Naïv*", [W(("naiv",), True)]),
        ('"pre* fix"*', [W(("pre", "fix"))]),  # no star inside quotes or after a phrase
        ("* ** x *", [W(("x",))]),  # a star after no word is text
        ("NEAR(a b) col:x ^y -z OR (w)", [W((t,)) for t in ("near", "a", "b", "col", "x", "y", "z", "or", "w")]),
        ("dup Dup DUP", [W(("dup",))]),
        ("", []),
    ],
)
def test_parse(q: str, expected: list[Clause]) -> None:
    assert parse(q) == expected


@pytest.mark.parametrize("q", ["a*", "x é* y", "1*", '"ok" b*'])
def test_a_prefix_needs_two_characters(q: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse(q)
    assert refused.value.code == "invalid_query" and refused.value.field == "$.q"
    assert "at least 2" in refused.value.detail


def test_at_most_four_prefixes() -> None:
    assert [c.prefix for c in parse("ab* cd* ef* gh* ij")] == [True, True, True, True, False]
    with pytest.raises(InvalidInput) as refused:
        parse("ab* cd* ef* gh* ij*")
    assert refused.value.code == "invalid_query" and refused.value.field == "$.q"


def test_clauses_are_capped() -> None:
    assert parse(" ".join(f"w{i}" for i in range(MAX_CLAUSES + 5))) == [W((f"w{i}",)) for i in range(MAX_CLAUSES)]


@given(st.text(max_size=600))
def test_any_text_parses_or_is_the_documented_422(q: str) -> None:
    clauses = parsed_or_refused(q)
    if clauses is not None:
        assert len(clauses) <= MAX_CLAUSES and all(c.tokens for c in clauses)
        assert all(len(c.tokens) == 1 and len(c.tokens[0]) >= 2 for c in clauses if c.prefix)
        assert sum(c.prefix for c in clauses) <= MAX_PREFIXES


def test_fts5_rendering_is_quoted() -> None:
    assert " ".join(fts5_term(c) for c in parse('x "a b" cd*')) == '"x" "a b" "cd"*'


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SearchIndex]:
    """ab00..ab63 in two entries each, ab64..ab69 in one: `ab*` expands to the first 64 only."""
    index = SearchIndex(tmp_path_factory.mktemp("capped") / "ix", "epoch")
    rows = [row(i * 2 + k + 1, f"ab{i:02d}") for i in range(PREFIX_TERMS) for k in range(2)]
    rows += [row(1000 + i, f"ab{i:02d}") for i in range(PREFIX_TERMS, 70)]
    index.apply(rows, 2000)
    yield index
    index.close()


def test_a_prefix_expands_to_its_most_frequent_terms(capped: SearchIndex) -> None:
    assert hits(capped, "ab*", 2000) == set(range(1, 2 * PREFIX_TERMS + 1))  # ab64..ab69 are past the cap
    assert hits(capped, "ab6*", 2000) == {121, 122, 123, 124, 125, 126, 127, 128} | set(range(1064, 1070))
    assert hits(capped, "ab69", 2000) == {1069}  # as a word it is found
    assert hits(capped, "zz*", 2000) == set()


# ---- random corpora: the index against a reference and against FTS5 ---------------------------------------

VOCAB = ["cafe", "Café", "cab", "cabin", "naïve", "naive", "日本語", "日本", "x\u0301y", "xy", "😀", "a_b", "ab",
         "Straße", "ok", "OK", "NEAR", "OR"]  # fmt: skip
contents = st.one_of(
    st.lists(st.sampled_from(VOCAB), max_size=6).map(" ".join),
    st.text(alphabet=st.sampled_from(list("abcé É\u0301日本😀ßΩω_-.")), max_size=24),
)
tag_lists = st.lists(st.sampled_from(VOCAB), max_size=2)
corpora = st.lists(st.tuples(contents, tag_lists), min_size=1, max_size=12)
# Search text from the vocabulary, short random words and every character that is syntax somewhere (FTS5,
# Lucene, tantivy).
SYNTAX = ['"', "*", "(", ")", ":", "^", "-", "+", " ", "~", "\\", "'", "{", "}", "[", "]", "AND", "NOT", "NEAR/2",
          "content:", "ca"]  # fmt: skip
queries = st.lists(
    st.one_of(st.sampled_from(VOCAB), st.text(alphabet="abcéΩω日", min_size=1, max_size=3), st.sampled_from(SYNTAX)),
    min_size=1,
    max_size=8,
).map("".join)


def reference(q: Sequence[Clause], fields: Sequence[list[str]]) -> bool:
    """Whether an entry whose fields hold these tokens matches the clauses (a phrase within one field)."""

    def holds(clause: Clause, toks: list[str]) -> bool:
        if clause.prefix:
            return any(t.startswith(clause.tokens[0]) for t in toks)
        n = len(clause.tokens)
        return any(tuple(toks[i : i + n]) == clause.tokens for i in range(len(toks) - n + 1))

    return all(any(holds(c, toks) for toks in fields) for c in q)


def words_and(q: str, fields: Sequence[list[str]]) -> bool:
    """Whether every token of q (a `tok*` as a prefix) is somewhere in the entry: the most any q may match."""
    return all(any(t.startswith(tok) if tok in {c.tokens[0] for c in parse(q) if c.prefix} else t == tok
                   for toks in fields for t in toks) for tok in tokens(q))  # fmt: skip


def parsed_or_refused(q: str) -> list[Clause] | None:
    try:
        return parse(q)
    except InvalidInput as refused:  # the documented 422s: a prefix of fewer than 2 characters, or too many
        assert refused.code == "invalid_query" and refused.field == "$.q"
        return None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpus=corpora, asked=st.lists(queries, min_size=1, max_size=8))
def test_random_text_matches_the_reference_and_fts5(corpus: list[tuple[str, list[str]]], asked: list[str]) -> None:
    rows = [row(i + 1, content, tags) for i, (content, tags) in enumerate(corpus)]
    fts = sqlite3.connect(":memory:")
    fts.execute("CREATE VIRTUAL TABLE t USING fts5(content, tags)")  # as node/store/migrations/0001_core.sql
    fts.executemany("INSERT INTO t (rowid, content, tags) VALUES (?, ?, ?)", [(r.seq, r.content, r.tags) for r in rows])
    with tempfile.TemporaryDirectory() as tmp:
        index = SearchIndex(Path(tmp) / "ix", "epoch")
        try:
            index.apply(rows, len(rows))
            for q in asked:
                clauses = parsed_or_refused(q)
                if not clauses:
                    continue
                got = hits(index, q, len(rows))
                fields = {r.seq: [tokens(r.content), tokens(r.tags)] for r in rows}
                assert got == {s for s, f in fields.items() if reference(clauses, f)}, q
                assert got <= {s for s, f in fields.items() if words_and(q, f)}, q
                match = " ".join(fts5_term(c) for c in clauses)
                assert got == {r for (r,) in fts.execute("SELECT rowid FROM t WHERE t MATCH ?", (match,))}, q
        finally:
            index.close()
