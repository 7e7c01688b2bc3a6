"""A search's `q` as the index answers it: words (ANDed), "quoted phrases" and trailing-`*` prefixes.

The only syntax is the double quote and a trailing star; every other character is text, tokenized as FTS5's
unicode61 does (node/search_index/analyzer.py), so nothing else can be injected:

- A word is a token of the analyzer ("Café" is `cafe`); every word must appear in the content or the tags.
- `"a b c"` is a phrase: its tokens adjacent and in order, in one field. A phrase of one token is a word, one of
  none is ignored. A quote left unclosed is ordinary text (its words are words).
- `word*` (the star directly after a word, outside quotes, not followed by a token character) matches the terms
  starting with the word, at least `PREFIX_MIN_CHARS` characters after folding (else 422 `invalid_query`).
  Against the index, a prefix expands to at most `PREFIX_TERMS` terms per field: those that the most documents
  hold, ties alphabetical (the term dictionary's counts, which include replaced versions until tantivy merges
  their segments). A term past the cap does not match.
- At most `MAX_CLAUSES` clauses (words, phrases and prefixes, in the order of `q`) count; the rest is ignored.
  Of those, at most `MAX_PREFIXES` may be prefixes (else 422 `invalid_query`).

The index builds term, phrase and term-set queries from the parsed clauses itself: nothing is handed to a
query parser.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import tantivy

from node.errors import InvalidInput
from node.search_index.analyzer import is_token_char, token_spans, tokens

MAX_CLAUSES = 32  # as many as the words the FTS5 path took before it left (docs/decisions.md)
PREFIX_MIN_CHARS = 2
PREFIX_TERMS = 64  # terms a prefix expands to, per field
MAX_PREFIXES = 4  # each costs a walk of the terms sharing it (docs/decisions.md)
FIELDS = ("content", "tags")


@dataclass(frozen=True)
class Clause:
    """One thing a hit must hold: a word (one token), a phrase (several, adjacent) or a prefix (one token)."""

    tokens: tuple[str, ...]
    prefix: bool = False


def parse(q: str) -> list[Clause]:
    """The clauses of a search's text, in order, duplicates dropped; raises InvalidInput for a short prefix."""
    parts = q.split('"')
    closed = len(parts) - 1 if len(parts) % 2 == 0 else len(parts)  # an unclosed quote's text is ordinary
    clauses: list[Clause] = []
    for i, part in enumerate(parts):
        if i % 2 == 1 and i < closed:
            clauses.append(Clause(tuple(tokens(part))))
        else:
            clauses += _plain_clauses(part)
    wanted = [c for c in dict.fromkeys(clauses) if c.tokens][:MAX_CLAUSES]
    if sum(c.prefix for c in wanted) > MAX_PREFIXES:
        raise InvalidInput(
            f"at most {MAX_PREFIXES} prefixes (word*) in one search: each walks the index's term dictionary",
            field="$.q",
            code="invalid_query",
        )
    return wanted


def _plain_clauses(text: str) -> list[Clause]:
    out = []
    for token, start, end in token_spans(text):
        star = end < len(text) and text[end] == "*" and not (end + 1 < len(text) and is_token_char(text[end + 1]))
        if star and len(token) < PREFIX_MIN_CHARS:
            raise InvalidInput(
                f"a prefix needs at least {PREFIX_MIN_CHARS} letters or digits before its '*': "
                f"{text[start : end + 1]!r}",
                field="$.q",
                code="invalid_query",
            )
        out.append(Clause((token,), prefix=star))
    return out


def as_clause(item: str | Clause) -> Clause:
    """A clause as given, or a plain word (no syntax) as the clause of its tokens: a phrase when it has several."""
    return item if isinstance(item, Clause) else Clause(tuple(tokens(item)))


def tantivy_clauses(
    items: Sequence[str | Clause], schema: tantivy.Schema, searcher: tantivy.Searcher
) -> list[tantivy.Query] | None:
    """One query per clause, each matching content or tags; None when one of them can match nothing.

    A clause with no token is ignored (FTS5 ignores a word that folds to nothing); None also when no clause
    remains (FTS5 matches nothing then).
    """
    out = []
    for clause in map(as_clause, items):
        if not clause.tokens:
            continue
        per_field: list[tantivy.Query] = []
        for field in FIELDS:
            if clause.prefix:
                terms = searcher.terms_with_prefix(field, clause.tokens[0], limit=PREFIX_TERMS)
                per_field += [tantivy.Query.term_query(schema, field, term) for term, _ in terms]
            elif len(clause.tokens) == 1:
                per_field.append(tantivy.Query.term_query(schema, field, clause.tokens[0]))
            else:
                per_field.append(tantivy.Query.phrase_query(schema, field, list(clause.tokens)))
        if not per_field:
            return None
        out.append(tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in per_field]))
    return out or None
