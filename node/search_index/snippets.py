"""A hit's highlighted snippet: a short window of its stored content with the search's matches marked.

The content is tokenized with the index's analyzer (character offsets into the original text); a token is a
match when it is one of the query's words, starts with one of its prefixes, or starts a run of tokens equal to
one of its phrases (the run is one highlight). The window is at most `SNIPPET_CHARS` characters, cut at token
boundaries, starting up to `LEAD_CHARS` before a match within `SCAN_CHARS` of the content's first match, and
placed to hold as many different clauses' matches as it can (then as many matches, then the earliest).
Highlights are [start, end) UTF-8 byte offsets into the snippet's text, as the API promises (docs/api.md,
"Search"). A long content costs little more than its part around the first match: the first match is found
with a regular expression (analyzer.spelled) before any word is folded in Python. An ASCII content searched for
words and prefixes (most snippets: a page renders 20 per search) skips the token-by-token scan altogether:
its matches are found with `str.find` and its token bounds looked up where the window needs them
(`_scan_ascii`), with the same result.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Sequence

from node.search_index.analyzer import (
    ascii_token_end,
    ascii_token_start,
    fold,
    is_token_char,
    iter_token_spans,
    spelled,
)
from node.search_index.query import Clause
from wire.api import Snippet

SNIPPET_CHARS = 160
LEAD_CHARS = 30  # context shown before the first match of the window
SCAN_CHARS = 1_000  # how far after the first match a window may start
MAX_MARKS = 1_000  # matches considered per content
ELLIPSIS = "…"

Span = tuple[str, int, int]  # (folded token, start, end): analyzer.token_spans
Mark = tuple[int, int, frozenset[int]]  # (start, end, indexes of the clauses it matches), character offsets


def snippet(content: str, clauses: Sequence[Clause]) -> Snippet:
    """The snippet of `content` for a search of these clauses (the start of the content when nothing matches)."""
    tokens, marks = _scan_ascii(content, clauses) or _scan(content, clauses)
    start, end = _window(content, tokens, marks)
    prefix = ELLIPSIS if content[:start].strip() else ""
    suffix = ELLIPSIS if content[end:].strip() else ""
    base = len(prefix.encode())
    highlights = []
    for s, e, _ in marks:
        if s >= start and s < end:
            e = min(e, end)
            lead = base + len(content[start:s].encode())
            highlights.append([lead, lead + len(content[s:e].encode())])
    return Snippet(text=prefix + content[start:end] + suffix, highlights=highlights)


class Tokens:
    """Where the scanned tokens of a content start and end, as lists."""

    def __init__(self, starts: list[int], ends: list[int]) -> None:
        self.starts, self.ends = starts, ends

    def start_from(self, pos: int) -> int:
        """The first token start at or after `pos` (there is one: `pos` is at most a mark's start)."""
        return self.starts[bisect.bisect_left(self.starts, pos)]

    def end_within(self, limit: int) -> int | None:
        """The last token end at or before `limit`, None when none ends by then."""
        i = bisect.bisect_right(self.ends, limit) - 1
        return self.ends[i] if i >= 0 else None


class AsciiTokens:
    """`Tokens` of an ASCII content from `begin` (not inside a word) on, looked up where asked instead of listed."""

    def __init__(self, content: str, begin: int) -> None:
        self.content, self.begin = content, begin

    def start_from(self, pos: int) -> int:
        """As `Tokens.start_from`."""
        return ascii_token_start(self.content, max(pos, self.begin))

    def end_within(self, limit: int) -> int | None:
        """As `Tokens.end_within`."""
        return ascii_token_end(self.content, self.begin, limit)


Scanned = tuple[Tokens | AsciiTokens, list[Mark]]  # the content's tokens, and its marks


def _scan(content: str, clauses: Sequence[Clause]) -> Scanned:
    """The content's tokens and matches (in order, overlapping ones merged), read up to where no window can reach.

    Windows start near one of the matches within `SCAN_CHARS` of the first, so the scan stops `SCAN_CHARS +
    SNIPPET_CHARS` after the first match: a long entry costs no more than its beginning.
    """
    words, prefixes, phrases = _by_kind(clauses)
    begin, stop = _scan_start(content, clauses)
    if begin is None:  # no word of the query is even a substring: read only what the window needs
        words, prefixes, phrases, begin = {}, [], [], 0
    spans: list[Span] = []
    found: list[tuple[int, int, int]] = []
    for span in iter_token_spans(content, begin):  # per token as little as can be: this loop is most of a search's
        token, s, e = span  # snippets
        if s > stop:
            break
        spans.append(span)
        before = len(found)
        if (w := words.get(token)) is not None:
            found.append((s, e, w))
        for p, i in prefixes:
            if token.startswith(p):
                found.append((s, e, i))
        for phrase, i in phrases:  # a phrase ending at this token
            n = len(phrase)
            if token == phrase[-1] and len(spans) >= n and all(spans[-n + j][0] == phrase[j] for j in range(n)):
                found.append((spans[-n][1], e, i))
        if len(found) != before:
            if not before:
                stop = min(found, key=lambda m: m[0])[0] + SCAN_CHARS + SNIPPET_CHARS
            if len(found) >= MAX_MARKS:
                break
    if not found and begin > 0:  # only near-misses: the window shows the start, cut at a word's end
        lead = len(content) - len(content.lstrip())
        spans = list(itertools.takewhile(lambda t: t[1] <= lead + SNIPPET_CHARS, iter_token_spans(content)))
    return Tokens([s for _, s, _ in spans], [e for _, _, e in spans]), _merged(found)


def _by_kind(
    clauses: Sequence[Clause],
) -> tuple[dict[str, int], list[tuple[str, int]], list[tuple[tuple[str, ...], int]]]:
    """The clauses `_scan` looks for at each token, by kind, each with its index: words (the first clause of a
    word), prefixes and phrases."""
    words: dict[str, int] = {}
    prefixes: list[tuple[str, int]] = []
    phrases: list[tuple[tuple[str, ...], int]] = []
    for i, clause in enumerate(clauses):
        if clause.prefix:
            prefixes.append((clause.tokens[0], i))
        elif len(clause.tokens) == 1:
            words.setdefault(clause.tokens[0], i)
        elif clause.tokens:
            phrases.append((clause.tokens, i))
    return words, prefixes, phrases


def _scan_ascii(content: str, clauses: Sequence[Clause]) -> Scanned | None:
    """`_scan` of an ASCII content for words and prefixes (no phrase), by `str.find` of each clause's word instead
    of a look at each token, the tokens looked up only where the window asks: the same marks, the same window.
    None where `_scan` must do it: another content or clause, no match, or MAX_MARKS matches (the loop's order
    decides which it keeps).

    A token of ASCII text is a run of letters and digits, folded by lower-casing: in the lower-cased content a
    clause's match is its word found where no letter or digit is just before it, and (for a word, not a prefix)
    none just after it; `_scan_start`'s first place is the first such start, whatever follows.
    """
    if not content.isascii() or not all(len(c.tokens) == 1 and _ascii_token(c.tokens[0]) for c in clauses):
        return None
    low = content.lower()
    at = [i for i in (_word_start(low, c.tokens[0], 0) for c in clauses) if i >= 0]
    if not at:
        return None
    begin = max(0, min(at) - LEAD_CHARS)  # as `_scan_start`
    while begin > 0 and low[begin - 1].isalnum():
        begin -= 1
    found: list[tuple[int, int, int]] = []
    stop = len(low)  # then SCAN_CHARS + SNIPPET_CHARS after the first match, as in `_scan`
    for i, clause in enumerate(clauses):
        word = clause.tokens[0]
        s = _word_start(low, word, begin)
        while 0 <= s <= stop:
            e = s + len(word)
            if clause.prefix:
                e += _run_length(low, e)
            if clause.prefix or e == len(low) or not low[e].isalnum():
                found.append((s, e, i))
                stop = min(stop, s + SCAN_CHARS + SNIPPET_CHARS)
            s = _word_start(low, word, s + 1)
    found = [m for m in found if m[0] <= stop]  # a later clause's match may have come first
    if not found or len(found) >= MAX_MARKS:
        return None
    return AsciiTokens(content, begin), _merged(found)


def _ascii_token(word: str) -> bool:
    """Whether `word` is what the analyzer makes of an ASCII word (one a token of ASCII text can equal)."""
    return word.isascii() and word.isalnum() and word == word.lower()


def _word_start(low: str, word: str, pos: int) -> int:
    """The first place from `pos` where `word` stands in lower-cased ASCII text with no letter or digit just
    before it; -1 if none."""
    i = low.find(word, pos)
    while i > 0 and low[i - 1].isalnum():
        i = low.find(word, i + 1)
    return i


def _run_length(low: str, at: int) -> int:
    """How many letters and digits follow from `at`."""
    m = _ALNUM.match(low, at)
    return m.end() - at if m else 0


_ALNUM = re.compile("[0-9a-z]+")


def _merged(found: list[tuple[int, int, int]]) -> list[Mark]:
    """Matches (start, end, clause index) in order, overlapping ones merged into one mark."""
    found.sort(key=lambda m: (m[0], -m[1]))
    merged: list[Mark] = []
    for s, e, i in found:
        if merged and s < merged[-1][1]:
            ms, me, mi = merged[-1]
            merged[-1] = (ms, max(me, e), mi | {i})
        else:
            merged.append((s, e, frozenset({i})))
    return merged


def _scan_start(content: str, clauses: Sequence[Clause]) -> tuple[int | None, int]:
    """Where the scan may begin (None when nothing can match) and where it may end, without any match.

    No match is before the earliest place where one of the clauses' first words is spelled (analyzer.spelled)
    after no character that folds to something; the scan begins a lead before it, at a word boundary.
    """
    at = [i for i in (_first_word_start(content, c.tokens[0]) for c in clauses if c.tokens) if i is not None]
    if not at:
        return None, len(content) - len(content.lstrip()) + SNIPPET_CHARS
    begin = max(0, min(at) - LEAD_CHARS)
    while begin > 0 and is_token_char(content[begin - 1]):
        begin -= 1
    return begin, len(content)


def _first_word_start(content: str, token: str) -> int | None:
    for m in spelled(token).finditer(content):
        i = m.start()
        if i == 0 or not is_token_char(content[i - 1]) or not fold(content[i - 1]):
            return i
    return None


def _window(content: str, tokens: Tokens | AsciiTokens, marks: Sequence[Mark]) -> tuple[int, int]:
    """[start, end) character offsets of the snippet in `content`, given its scanned tokens."""
    if not content.strip():
        return 0, len(content)
    if not marks:
        start = len(content) - len(content.lstrip())
        return start, _cut(content, tokens, start, start + SNIPPET_CHARS)
    mark_starts = [m[0] for m in marks]  # merged marks do not overlap: their ends are in order too
    mark_ends = [m[1] for m in marks]
    best: tuple[int, int, int] | None = None  # (clauses, matches, -start) of the best window so far
    best_start = 0
    for anchor in marks:
        if anchor[0] > marks[0][0] + SCAN_CHARS:
            break
        start = tokens.start_from(anchor[0] - LEAD_CHARS)  # the first token in the lead
        lo = bisect.bisect_left(mark_starts, start)
        inside = marks[lo : max(lo, bisect.bisect_right(mark_ends, start + SNIPPET_CHARS))]
        score = (len(frozenset().union(*(m[2] for m in inside))), len(inside), -start)
        if best is None or score > best:
            best, best_start = score, start
    start = best_start
    end = _cut(content, tokens, start, start + SNIPPET_CHARS)
    if end == len(content) and start > 0:  # near the end: use the room before the match instead
        start = min(start, tokens.start_from(max(0, end - SNIPPET_CHARS)))
    return start, end


def _cut(content: str, tokens: Tokens | AsciiTokens, start: int, limit: int) -> int:
    """Where a window from `start` ends: the content's end if it fits, else the last token end within `limit`."""
    if limit >= len(content.rstrip()):
        return len(content.rstrip())
    end = tokens.end_within(limit)
    return end if end is not None and end > start else limit
