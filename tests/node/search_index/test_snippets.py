"""node.search_index.snippets: a short window of the content, its matches as UTF-8 byte ranges."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from node.search_index import snippets
from node.search_index.analyzer import tokens
from node.search_index.query import parse
from node.search_index.snippets import ELLIPSIS, SNIPPET_CHARS, snippet


def marked(content: str, q: str) -> list[str]:
    s = snippet(content, parse(q))
    raw = s.text.encode()
    return [raw[start:end].decode() for start, end in s.highlights]


def test_byte_offsets_with_multibyte_text() -> None:
    content = "Le café 😀 est prêt: 日本語 and Crème brûlée, très bien"
    assert marked(content, "cafe 日本語 creme brulee") == ["café", "日本語", "Crème", "brûlée"]
    assert marked(content, '"creme brulee" pret') == ["prêt", "Crème brûlée"]  # a phrase is one range
    assert marked(content, "tr* 😀") == ["très"]  # an emoji is no token: nothing to mark
    assert snippet(content, parse("cafe")).text == content  # short: the whole content, no ellipsis


def test_a_phrase_marks_only_its_adjacent_run() -> None:
    assert marked("hot water and water hot, hot water", '"hot water"') == ["hot water", "hot water"]


def test_a_long_content_is_cut_around_its_matches() -> None:
    content = "filler words " * 40 + "the Zeppelin landed; zeppelins fly " + "more filler " * 40
    s = snippet(content, parse("zeppelin*"))
    assert s.text.startswith(ELLIPSIS) and s.text.endswith(ELLIPSIS)
    assert len(s.text) <= SNIPPET_CHARS + 2
    raw = s.text.encode()
    assert [raw[a:b].decode() for a, b in s.highlights] == ["Zeppelin", "zeppelins"]
    assert s.text.index("Zeppelin") <= 40  # a little context before the first match


def test_the_window_prefers_more_different_words() -> None:
    content = "alpha " + "x " * 100 + "alpha beta " + "y " * 100
    assert marked(content, "alpha beta") == ["alpha", "beta"]


def test_no_match_in_the_content_shows_its_start() -> None:
    s = snippet("  plain start " + "w " * 200, parse("tagonly"))
    assert s.text.startswith("plain start") and s.text.endswith(ELLIPSIS) and s.highlights == []
    near = snippet("wordy " * 40 + "xtagonly tagonlyx", parse("tagonly"))  # spelled inside words only
    assert near.text == "wordy " * 25 + "wordy" + ELLIPSIS and near.highlights == []  # cut at a word


text = st.text(alphabet=st.sampled_from(list('ab é日本😀\u0301_-"*ÉA\n')), max_size=400)


@settings(max_examples=200, deadline=None)
@given(content=text, q=st.sampled_from(["ab", "a", "e", '"a b"', "日本", "ab*", "ea*", '"é a"']))
def test_every_highlight_is_a_match(content: str, q: str) -> None:
    clauses = parse(q)
    s = snippet(content, clauses)
    raw = s.text.encode()
    assert len(s.text) <= SNIPPET_CHARS + 2
    last = 0
    for start, end in s.highlights:
        assert last <= start < end <= len(raw)
        last = end
        found = tokens(raw[start:end].decode())
        assert any(
            (c.prefix and len(found) == 1 and found[0].startswith(c.tokens[0])) or tuple(found) == c.tokens
            for c in clauses
        ) or end == len(raw) - len(ELLIPSIS.encode()), (content, q, raw[start:end])  # cut at the window's end


@settings(max_examples=200, deadline=None)
@given(
    content=st.text(alphabet=st.sampled_from(list("ab éÉ\u0301日本_-")), max_size=150),
    p=st.sampled_from(["ab", "ba", "ea", "日本"]),
)
def test_a_short_content_shows_every_match(content: str, p: str) -> None:
    s = snippet(content, parse(p + "*"))
    assert len(s.highlights) == sum(1 for t in tokens(content) if t.startswith(p))


words = st.sampled_from(["ab", "AB", "abc", "b", "ba", "xab", "ab1", "1", "zz", "ab" + "z" * 170])
ascii_text = st.tuples(
    st.sampled_from(["", "  ", "\n- "]),
    st.lists(st.tuples(words, st.sampled_from([" ", "  ", "-", ", ", "_", "\n", "."])), max_size=700),
    st.sampled_from(["", " ", "z"]),
).map(lambda t: t[0] + "".join(w + sep for w, sep in t[1]) + t[2])


@settings(max_examples=300, deadline=None)
@given(content=ascii_text, q=st.sampled_from(["ab", "AB b", "ab*", "ba* ab", "ba 1", "zz* ab* b 1"]))
def test_ascii_text_is_scanned_by_find_to_the_same_marks_and_window(content: str, q: str) -> None:
    """The `str.find` scan of ASCII text finds the marks, and gives the window, of the token-by-token scan (long
    contents too: the scan stops SCAN_CHARS + SNIPPET_CHARS after the first match)."""
    clauses = parse(q)
    fast = snippets._scan_ascii(content, clauses)
    if fast is not None:
        slow = snippets._scan(content, clauses)
        assert fast[1] == slow[1]
        assert snippets._window(content, *fast) == snippets._window(content, *slow)


def same_scan(content: str, q: str) -> bool:
    fast, slow = snippets._scan_ascii(content, parse(q)), snippets._scan(content, parse(q))
    assert fast is not None
    return fast[1] == slow[1] and snippets._window(content, *fast) == snippets._window(content, *slow)


def test_the_find_scan_takes_ascii_words_and_prefixes_only() -> None:
    assert snippets._scan_ascii("the Zeppelin landed", parse("zeppelin land*")) is not None
    assert snippets._scan_ascii("the Zeppelin landed", parse('"zeppelin landed"')) is None  # a phrase
    assert snippets._scan_ascii("the Zeppelin landed, café", parse("zeppelin")) is None  # not ASCII
    assert snippets._scan_ascii("the Zeppelin landed", parse("airship")) is None  # no match
    assert snippets._scan_ascii("the Zeppelin landed", parse("zeppelin 日本")) is None  # a word no ASCII token is
    long = "x " * 100 + "ab " + "y " * 700 + "abab ab ab1 abc"  # the scan stops past the reach of any window
    assert same_scan(long, "ab*") and same_scan(long, "ab")
    near_end = "w " * 300 + "lead-in words before the Zeppelin landed"  # the window takes room before the match
    assert same_scan(near_end, "zeppelin") and same_scan("  Zeppelin  ", "zeppelin")
    assert same_scan("z" * 200 + " zeppelinzzzzzzzzz" + "z" * 300, "zeppelin*")  # a word longer than a window
