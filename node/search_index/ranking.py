"""Which index hits make a search page, and in which order: BM25, author trust, community confidence.

Trust is node-local (node/trust/service.py's cache), so it is never in the index: a search sorted or filtered by trust
turns the cache into author term-sets around the words' query. Every order ends with BM25 descending, then entry
id descending (newest first), so a page is exact whatever the index's internal document order (segments merge):

- `default`: BM25, id. `top` breaks a tie at the page's end exactly without fetching the tied group (BM25 of a
  common word ties in groups of thousands: tantivy quantizes field lengths to 256 levels). After a fetch of
  `2 * (need + 1)` hits, if the last one still ties at the page's last score s, every hit scoring above s is in
  hand (`above`), and the page wants the m = need - len(above) highest ids among all hits scoring s. It asks
  for them in seq windows: the query AND `seq >= x`, a fast-field range wrapped in a zero const score (BM25
  unchanged, bit for bit; checked on every window), limited to the window's hits of `above` plus 2m + 64. A
  window that is not truncated at s holds every tied hit with seq >= x: with at least m of them it answers;
  with fewer it is widened; a truncated one is narrowed, bisecting between the two. Every step halves the
  range once bracketed, so at most ~2 log2(highest id) windows; past that bound (ids repeated) `top` goes
  back to doubling. An offset page is the slice of the exact top `offset + limit`.
- `min_trust` (with any sort): only authors whose trust passes, as an include term-set (the scored authors at or
  above it) when neutral authors fail, or an exclude term-set (the scored authors below it) when they pass.
- `sort=trust`: the trust levels, highest first, are the distinct cached scores at or above `min_trust` (authors
  without a score are in the neutral level, "not scored otherwise"; with an `author` filter, only its authors'
  levels). A search with at most SORT_CAP matches is one count and one fetch, sorted in memory by author trust
  (authors read from `entries` by id). Otherwise `Ranking._by_trust` walks the levels from the top, by runs that
  double while they are small enough to sort in memory and halve when not, until `offset + limit` hits are
  collected. Work: a level with more matches than a run may hold either fills the page or adds at least
  RUN_HITS hits to it, so at most 1 + (offset + limit) / RUN_HITS of them are reached, each after at most
  log2(levels) halvings; stretches of sparse or empty levels cost a logarithmic number of queries. Scores have
  4 decimals: at most 10,001 levels.
- `sort=community_confidence`: the best SORT_CAP matches by BM25, re-sorted by the entries' community
  confidence (read from the cache in the search's own read transaction); pages past the cap are empty.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import tantivy

from node.search_index import store
from node.store.conn import Conn
from wire.api import SearchQuery

NEUTRAL = (
    0.5  # the trust of an author without a cached score (node/trust/service.py, NEUTRAL; node/queries.AUTHOR_TRUST)
)
SORT_CAP = 1_000  # matches `sort=community_confidence` re-sorts (docs/api.md, "Search")
RUN_HITS = 256  # sort=trust fetches a run of trust levels whole when it has at most this many matches (or the page's)

Hit = tuple[float, int]  # (BM25 score, entry id)


@dataclass(frozen=True)
class Authors:
    """A set of authors as one term-set: exactly `include` when it is given, else everyone but `exclude`."""

    include: frozenset[str] | None = None
    exclude: frozenset[str] = frozenset()

    def clauses(self, schema: tantivy.Schema) -> list[tuple[tantivy.Occur, tantivy.Query]]:
        """Boolean clauses (scoring nothing) that keep only entries by these authors."""
        if self.include is not None:
            terms = sorted(self.include)
            query = tantivy.Query.term_set_query(schema, "author", terms) if terms else tantivy.Query.empty_query()
            return [(tantivy.Occur.Must, tantivy.Query.const_score_query(query, 0.0))]
        if self.exclude:
            return [(tantivy.Occur.MustNot, tantivy.Query.term_set_query(schema, "author", sorted(self.exclude)))]
        return []

    @staticmethod
    def union(sets: Iterable[Authors]) -> Authors:
        """The authors in any of these sets."""
        include: set[str] = set()
        exclude: frozenset[str] | None = None
        for authors in sets:
            if authors.include is not None:
                include |= authors.include
            else:
                exclude = authors.exclude if exclude is None else exclude & authors.exclude
        return Authors(include=frozenset(include)) if exclude is None else Authors(exclude=exclude - include)


EVERYONE = Authors()


def passing(scores: Mapping[str, float], min_trust: float) -> Authors:
    """The authors whose trust is at least `min_trust`; `scores` holds every scored author."""
    if min_trust <= NEUTRAL:
        return Authors(exclude=frozenset(a for a, s in scores.items() if s < min_trust))
    return Authors(include=frozenset(a for a, s in scores.items() if s >= min_trust))


def trust_levels(
    scores: Mapping[str, float], min_trust: float | None = None, authors: Sequence[str] = ()
) -> list[tuple[float, Authors]]:
    """The authors grouped by trust, highest first, each level at or above `min_trust`.

    With `authors` (a search's author filter) only they are grouped, as include sets. Otherwise the neutral
    level holds everyone not scored at another value (an exclude set), the others hold their scored authors.
    """
    floor = -1.0 if min_trust is None else min_trust
    if authors:
        by_level: dict[float, set[str]] = {}
        for a in authors:
            by_level.setdefault(scores.get(a, NEUTRAL), set()).add(a)
        return [(t, Authors(include=frozenset(by_level[t]))) for t in sorted(by_level, reverse=True) if t >= floor]
    levels: dict[float, set[str]] = {}
    for a, s in scores.items():
        levels.setdefault(s, set()).add(a)
    out = []
    for t in sorted(set(levels) | {NEUTRAL}, reverse=True):
        if t < floor:
            break
        if t == NEUTRAL:
            out.append((t, Authors(exclude=frozenset(a for a, s in scores.items() if s != NEUTRAL))))
        else:
            out.append((t, Authors(include=frozenset(levels[t]))))
    return out


def hits(searcher: tantivy.Searcher, query: tantivy.Query, limit: int) -> list[Hit]:
    """Up to `limit` of tantivy's best hits of `query`, in no particular order among equal scores."""
    found: list[tuple[Any, tantivy.DocAddress]] = searcher.search(query, limit=limit, count=False).hits
    seqs = searcher.fast_field_values("seq", [address for _, address in found])
    return [(float(score), int(seq or 0)) for (score, _), seq in zip(found, seqs, strict=True)]


class Span(NamedTuple):
    """What the index knows of a query's matches without searching: every match's seq is below `end` (the
    position the index covers, plus one), and there are at most about `matches` of them (term-dictionary counts)."""

    end: int
    matches: int


def top(
    searcher: tantivy.Searcher,
    query: tantivy.Query,
    need: int,
    schema: tantivy.Schema | None = None,
    span: Span | None = None,
) -> list[Hit]:
    """The best `need` hits of `query`, BM25 descending then entry id descending (fewer when fewer match).

    Asks tantivy for `2 * (need + 1)` hits, then twice as many while the last hit fetched ties with the `need`-th
    score, so a tie is broken by entry id over every tied hit, whichever of them tantivy's top-k kept (pages
    never skip or repeat one). A tied group longer than the first fetch is not fetched whole: with `schema`,
    `_tied` finds the newest of its hits the page needs by seq windows; doubling goes on only if the windows run
    out of steps. `span`, when given, sizes the first window without a search over every match.
    """
    if need <= 0:
        return []
    fetch = 2 * (need + 1)
    while True:
        found = sorted(hits(searcher, query, fetch), key=_best)
        if len(found) < fetch or found[-1][0] < found[need - 1][0]:
            return found[:need]
        if schema is not None:  # a tied group longer than the page: windows
            score = found[need - 1][0]
            above = [h for h in found if h[0] > score]
            tied = _tied(searcher, schema, query, above, score, need - len(above), span)
            if tied is not None:
                return above + tied
            schema = None
        fetch *= 2


def _tied(
    searcher: tantivy.Searcher,
    schema: tantivy.Schema,
    query: tantivy.Query,
    above: list[Hit],
    score: float,
    m: int,
    span: Span | None = None,
) -> list[Hit] | None:
    """The `m` newest hits scoring exactly `score`, found by seq windows; None when the steps run out.

    A window is `query` AND seq >= x (a fast-field range scoring 0, so scores are unchanged), asked for the hits
    of `above` in it plus `cap`: when fewer come back, or the last scores below `score`, the window holds every
    tied hit at or above x. `lo` is a start known to hold at least m tied hits, `hi` one known to hold fewer.
    The first window is sized to hold about `cap` matches at the matches' average density; a window with too few
    tied hits is widened by what it lacks (x2 to x16) until one is too full, then the two are bisected.
    """
    cap = 2 * m + 64  # a window may hold this many tied hits: small, yet twice m, so few probes bracket m
    if span is None:  # the newest match and the count: a pass over every match
        newest = searcher.search(query, limit=1, count=True, order_by_field="seq")
        last = searcher.fast_field_values("seq", [address for _, address in newest.hits])
        span = Span(int(last[0] or 0) + 1 if last else 0, newest.count)  # type: ignore[attr-defined]
    end = hi = span.end
    lo, width, bracketed = 0, max(1, cap * end // max(span.matches, 1)), False
    x = max(lo, end - width)
    for _ in range(2 * end.bit_length() + 8):
        window = tantivy.Query.range_query(schema, "seq", tantivy.FieldType.Integer, x, None)
        filtered = tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, query), (tantivy.Occur.Must, tantivy.Query.const_score_query(window, 0.0))]
        )
        inside = sum(1 for _, seq in above if seq >= x)
        found = hits(searcher, filtered, inside + cap)
        if sum(1 for s, _ in found if s > score) != inside:
            return None  # the filter changed scores: let the caller fall back
        tied = sorted((h for h in found if h[0] == score), key=_best)
        if len(found) < inside + cap or min(s for s, _ in found) < score:
            if len(tied) >= m:
                return tied[:m]
            hi = x
            if not bracketed:
                width *= 16 if not tied else min(16, max(2, -(-2 * m // len(tied))))
                x = max(lo, end - width)
                continue
        else:
            lo, bracketed = x, True
        x = (lo + hi) // 2
    return None


def _best(hit: Hit) -> tuple[float, int]:
    return -hit[0], -hit[1]


def _restricted(query: tantivy.Query, schema: tantivy.Schema, authors: Authors) -> tantivy.Query:
    clauses = authors.clauses(schema)
    if not clauses:
        return query
    return tantivy.Query.boolean_query([(tantivy.Occur.Must, query), *clauses])


Lookup = Callable[[Sequence[int]], Mapping[int, Any]]  # entry ids -> a column of theirs, read on the search's conn


@dataclass(frozen=True)
class Ranking:
    """How a search page is selected from the index's matches (see the module docstring)."""

    sort: str = "default"
    authors: Authors = EVERYONE  # the `min_trust` filter (sort=trust: in `levels`)
    trust: Mapping[str, float] = field(default_factory=dict)  # sort=trust: the scored authors
    levels: list[tuple[float, Authors]] = field(default_factory=list)  # sort=trust: `trust` by level, best first
    author_of: Lookup | None = None  # sort=trust
    confidence: Lookup | None = None  # sort=community_confidence
    cap: int = SORT_CAP  # the matches sorted in memory: all of them for sort=trust, the best for the other

    def page(
        self,
        searcher: tantivy.Searcher,
        schema: tantivy.Schema,
        query: tantivy.Query,
        offset: int,
        limit: int,
        span: Span | None = None,
    ) -> list[int]:
        """Entry ids of the page [offset, offset + limit) of `query`'s matches in this ranking's order (`span`: what
        the index knows of them without searching, see `top`)."""
        need = offset + limit
        if self.sort == "trust":
            return self._by_trust(searcher, schema, query, need, span)[offset:need]
        query = _restricted(query, schema, self.authors)
        if self.sort == "community_confidence" and self.confidence is not None:
            if offset >= self.cap:
                return []
            best = top(searcher, query, self.cap, schema, span)
            confidence = self.confidence([seq for _, seq in best])
            best.sort(key=lambda h: (-confidence.get(h[1], NEUTRAL), -h[0], -h[1]))
            return [seq for _, seq in best[offset:need]]
        return [seq for _, seq in top(searcher, query, need, schema, span)[offset:need]]

    def _by_trust(
        self, searcher: tantivy.Searcher, schema: tantivy.Schema, query: tantivy.Query, need: int, span: Span | None
    ) -> list[int]:
        """The first `need` matches by author trust, BM25, id, gathered over runs of trust levels, highest first.

        The first run is every level: a search with at most `cap` matches is one count and one fetch, sorted in
        memory (authors read from `entries`). Otherwise the walk starts from one level, whose best hits `top`
        fetches, and goes on by runs: a run with few enough matches (counted first: what the page still needs, at
        least RUN_HITS, at most `cap`) is fetched whole and sorted in memory, and the next run is twice as long;
        a run with more is halved, down to one level.
        """
        collected: list[int] = []
        i, size = 0, len(self.levels) if self.author_of is not None else 1
        while i < len(self.levels) and len(collected) < need:
            run = self.levels[i : i + size]
            if len(run) == 1:
                level = _restricted(query, schema, run[0][1])
                collected += [seq for _, seq in top(searcher, level, need - len(collected), schema, span)]
                i, size = i + 1, 2 if self.author_of is not None else 1
                continue
            union = _restricted(query, schema, Authors.union(authors for _, authors in run))
            count = searcher.search(union, limit=1, count=True).count  # type: ignore[attr-defined]
            whole = len(run) == len(self.levels)
            if count > (self.cap if whole else min(self.cap, max(need - len(collected), RUN_HITS))):
                size = 1 if whole else len(run) // 2
                continue
            found = hits(searcher, union, count) if count else []
            author = self.author_of([seq for _, seq in found]) if self.author_of is not None else {}
            found.sort(key=lambda h: (-self.trust.get(author.get(h[1], ""), NEUTRAL), -h[0], -h[1]))
            collected += [seq for _, seq in found]
            i, size = i + len(run), size * 2
        return collected[:need]


DEFAULT = Ranking()


def for_query(conn: Conn, q: SearchQuery) -> Ranking:
    """The ranking a search asks for, with what it needs of the trust cache read on `conn` (the search's read)."""
    if q.sort == "default" and q.min_trust is None:
        return DEFAULT
    scores = store.author_scores(conn)
    if q.sort == "trust":  # min_trust drops the levels below it
        levels = trust_levels(scores, q.min_trust, q.author)
        return Ranking(sort=q.sort, trust=scores, levels=levels, author_of=lambda ids: store.authors_of(conn, ids))
    authors = EVERYONE if q.min_trust is None else passing(scores, q.min_trust)
    if q.sort == "community_confidence":
        return Ranking(
            sort=q.sort, authors=authors, confidence=lambda ids: store.community_confidence(conn, ids, NEUTRAL)
        )
    return Ranking(authors=authors)
