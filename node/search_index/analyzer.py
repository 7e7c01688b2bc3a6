"""Words of a text exactly as SQLite FTS5's `unicode61` tokenizer (remove_diacritics 1) finds them.

The tantivy index is fed pre-tokenized words so that its answers match the FTS5 path's. A token is a run of
token characters (ASCII letters and digits, and the non-ASCII characters unicode61 counts: letters, numbers,
private use, and the combining diacritics it folds away); each character is lower-cased and its diacritic
folded ("Café" and "CAFE" are both "cafe"). The non-ASCII rules are FTS5's own: `unicode61.json` was
measured from SQLite (every code point between two letters, read back through fts5vocab; see
tests/node/search_index/test_analyzer.py, which checks the table against the running SQLite).

`ANALYZER_VERSION` is stamped into the index: change it whenever these rules change, and every node rebuilds
its index when it next opens it.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from collections.abc import Iterator
from importlib import resources

ANALYZER_VERSION = 1


def _load() -> tuple[list[int], list[int], dict[str, str]]:
    data = json.loads(resources.files(__package__).joinpath("unicode61.json").read_text("ascii"))
    starts = [r[0] for r in data["token_ranges"]]
    ends = [r[1] for r in data["token_ranges"]]
    folds = {chr(int(cp)): out for cp, out in data["fold"].items()}
    return starts, ends, folds


_STARTS, _ENDS, _FOLDS = _load()


def is_token_char(ch: str) -> bool:
    """Whether unicode61 counts `ch` as part of a word."""
    if ch.isascii():
        return ch.isalnum()
    cp = ord(ch)
    i = bisect.bisect_right(_STARTS, cp) - 1
    return i >= 0 and cp <= _ENDS[i]


def fold(ch: str) -> str:
    """A token character as unicode61 indexes it: lower-cased, diacritic removed ('' when it is only one)."""
    if ch.isascii():
        return ch.lower()
    return _FOLDS.get(ch, ch)


_ASCII_WORD = re.compile(r"[a-z0-9]+")
_ASCII_RUN = re.compile(r"[0-9A-Za-z]+")  # `_RUN` for ASCII text: a short character class, tested faster
# A run of token characters (any case), for `token_spans`: the same test as `is_token_char`, at C speed.
_RUN = re.compile("[0-9A-Za-z" + "".join(f"\\U{s:08x}-\\U{e:08x}" for s, e in zip(_STARTS, _ENDS, strict=True)) + "]+")


def tokens(text: str) -> list[str]:
    """The folded words of `text`, in order (a word folding to nothing is dropped)."""
    if text.isascii():  # the common case, at C speed
        return _ASCII_WORD.findall(text.lower())
    out: list[str] = []
    word: list[str] = []
    for ch in text:
        if is_token_char(ch):
            word.append(fold(ch))
        elif word:
            token = "".join(word)
            if token:
                out.append(token)
            word = []
    if word:
        token = "".join(word)
        if token:
            out.append(token)
    return out


def token_spans(text: str) -> list[tuple[str, int, int]]:
    """`tokens(text)` with where each word stands in `text`: (folded word, start, end) as character offsets.

    A word's span runs from its first to its last token character, so `text[start:end]` is the word as written.
    """
    return list(iter_token_spans(text))


_FOLD_TABLE = {ord(ch): out for ch, out in _FOLDS.items()} | {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def _spellings() -> tuple[dict[str, str], str]:
    by_fold: dict[str, list[str]] = {}
    for ch, out in _FOLDS.items():
        by_fold.setdefault(out, []).append(ch)
    for c in range(ord("A"), ord("Z") + 1):
        by_fold.setdefault(chr(c + 32), []).append(chr(c))
    classes = {out: "".join(re.escape(ch) for ch in [out, *chars]) for out, chars in by_fold.items() if out}
    return classes, "".join(re.escape(ch) for ch in by_fold.get("", []))


_SPELLINGS, _DROPPED = _spellings()


@functools.lru_cache(maxsize=1024)
def spelled(token: str) -> re.Pattern[str]:
    """A pattern that matches where a word folding to `token...` may start: every spelling of `token` (any case,
    any diacritics, dropped marks between its characters), wherever it stands.

    A filter, not a match: it ignores word boundaries, so it finds more places than there are such words, and
    never misses one.
    """
    parts = []
    for ch in token:
        parts.append(f"[{_SPELLINGS.get(ch, re.escape(ch))}]")
        if _DROPPED:
            parts.append(f"[{_DROPPED}]*")
    return re.compile("".join(parts))


def ascii_token_start(text: str, pos: int) -> int:
    """The first word start at or after `pos` in ASCII `text` (len(text) when none)."""
    m = _ASCII_RUN.search(text, pos)
    if m is not None and m.start() == pos and pos > 0 and text[pos - 1].isalnum():  # `pos` is inside a word
        m = _ASCII_RUN.search(text, m.end())
    return len(text) if m is None else m.start()


_ASCII_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_ASCII_OTHER = "".join(chr(c) for c in range(128) if not chr(c).isalnum())


def ascii_token_end(text: str, pos: int, limit: int) -> int | None:
    """The last word end at or before `limit` of the words of ASCII `text` from `pos` on (`pos` not inside a
    word), None when none ends by then."""
    kept = text[pos:limit]
    if 0 < limit < len(text) and text[limit - 1].isalnum() and text[limit].isalnum():  # a word runs past `limit`
        kept = kept.rstrip(_ASCII_ALNUM)
    kept = kept.rstrip(_ASCII_OTHER)
    return pos + len(kept) if kept else None


def iter_token_spans(text: str, pos: int = 0) -> Iterator[tuple[str, int, int]]:
    """`token_spans`, lazily (a caller may stop early), from `pos` (which should not be inside a word)."""
    if text.isascii():
        for m in _ASCII_RUN.finditer(text, pos):
            yield m.group().lower(), m.start(), m.end()
        return
    for m in _RUN.finditer(text, pos):
        run = m.group()
        token = run.lower() if run.isascii() else run.translate(_FOLD_TABLE)  # `fold` of each character
        if token:
            yield token, m.start(), m.end()
