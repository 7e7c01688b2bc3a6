"""Issue 24's tie probe: `ranking.top` breaking a BM25 tie by seq windows vs by fetching the whole tied group.

`python -m scenarios.bench.ties DATA_FOLDER... [--rounds N]` opens each data folder's search-index/ read-only
(plain tantivy.Index.open: no writer, no lock) and times, in process and in the same run, for each query and
page: the plain tantivy top-`need` (no tie-breaking: the floor), the old `top` (asks for need + 1 hits, doubling
while the hit after the page ties, a copy here) and the new one (seq windows). It
checks both `top`s give the same hits and counts the hits and searches each one asked tantivy for.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import tantivy

from node.search_index import ranking
from node.search_index.index import FOLDER, SCHEMA
from node.search_index.query import parse, tantivy_clauses

QUERIES = [("kernel", 0), ("kernel", 1000), ("kernel observation", 0), ("zeppelin", 0)]


class Counting:
    """A real searcher that counts the hits and searches it answers."""

    def __init__(self, searcher: tantivy.Searcher) -> None:
        self.searcher, self.fetched, self.searches = searcher, 0, 0

    def search(self, query: tantivy.Query, **kwargs: Any) -> Any:
        result = self.searcher.search(query, **kwargs)
        self.fetched, self.searches = self.fetched + len(result.hits), self.searches + 1
        return result

    def fast_field_values(self, name: str, addresses: Any) -> Any:
        return self.searcher.fast_field_values(name, addresses)


def old_top(searcher: Any, query: tantivy.Query, need: int) -> list[ranking.Hit]:
    """`ranking.top` before the seq windows: need + 1 hits, doubled while the last one ties with the page's."""
    fetch = need + 1
    while True:
        found = sorted(ranking.hits(searcher, query, fetch), key=lambda h: (-h[0], -h[1]))
        if len(found) < fetch or found[-1][0] < found[need - 1][0]:
            return found[:need]
        fetch *= 2


def timed(run: Callable[[], object], rounds: int) -> tuple[float, float]:
    """(p50, p95) in ms of `rounds` runs, after one warm-up."""
    run()
    spans = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        spans.append((time.perf_counter() - start) * 1000)
    spans.sort()
    return statistics.median(spans), spans[min(len(spans) - 1, int(0.95 * len(spans)))]


def probe(data: Path, rounds: int) -> list[str]:
    """Markdown rows for one data folder."""
    searcher = tantivy.Index.open(str(data / FOLDER)).searcher()
    rows = []
    for words, offset in QUERIES:
        clauses = tantivy_clauses(parse(words), SCHEMA, searcher)
        assert clauses is not None
        query = tantivy.Query.boolean_query([(tantivy.Occur.Must, c) for c in clauses])
        need = offset + 20
        matches = searcher.search(query, limit=1, count=True).count  # type: ignore[attr-defined]
        old, new = Counting(searcher), Counting(searcher)
        assert old_top(old, query, need) == ranking.top(new, query, need, SCHEMA)  # type: ignore[arg-type]
        floor = timed(partial(searcher.search, query, limit=need, count=False), rounds)
        before = timed(partial(old_top, searcher, query, need), rounds)
        after = timed(partial(ranking.top, searcher, query, need, SCHEMA), rounds)
        rows.append(
            f"| {searcher.num_docs - 1:,} | '{words}' offset {offset} ({matches:,} matches) "
            f"| {after[0]:.2f} / {after[1]:.2f} ms ({new.fetched:,} hits, {new.searches} searches) "
            f"| {before[0]:.2f} / {before[1]:.2f} ms ({old.fetched:,} hits, {old.searches} searches) "
            f"| {floor[0]:.2f} / {floor[1]:.2f} ms | {after[1] / before[1]:.2f} | {after[1] / floor[1]:.1f} |"
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m scenarios.bench.ties", description=__doc__)
    parser.add_argument("data", nargs="+", type=Path, help="data folders with a built search-index/")
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args(argv)
    print(
        "| entries | query, page of 20 | seq windows p50 / p95 | old doubling p50 / p95 | plain tantivy top-k "
        "p50 / p95 | windows / old (p95) | windows / plain (p95) |"
    )
    print("|---|---|---|---|---|---|---|")
    for data in args.data:
        for row in probe(data, args.rounds):
            print(row, flush=True)


if __name__ == "__main__":
    main()
