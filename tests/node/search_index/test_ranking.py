"""node.search_index.ranking: min_trust, sort=trust and sort=community_confidence answered by the index; exact paging.

The differential test posts a random corpus through a real node, writes random scores into the trust cache,
and compares the index's pages with an oracle of its own: SQL over `entries`, the trust cache and an FTS5 table
this test creates in the node's database (the match set), and the index's own default ranking (BM25, then
newest first) for the order inside a trust or confidence level.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import tantivy
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.ops.datadir import initialise
from node.search_index import indexer, ranking
from node.search_index.index import SCHEMA, Filters, Row, SearchIndex
from node.search_index.query import Clause, parse, tantivy_clauses
from node.search_index.ranking import NEUTRAL, SORT_CAP, Authors, passing, trust_levels
from node.service import Node
from node.spaces.sight import OPERATOR
from node.store.conn import Conn
from node.web.appkeys import SEARCH_INDEXER
from tests.conftest import FakeClock
from tests.node.search_index import fts5_oracle
from wire.api import PostEntry, SearchQuery

WORDS = ["café", "cafe", "tea", "naïve", "foo", "bar", "foo_bar", "x"]
SCORES = [0.2, 0.5, 0.6, 0.6154, 0.9]
AGENTS = 4
ROW: dict[str, Any] = {
    "tags": "[]", "entry_type": "finding", "performative": "inform", "author_id": "did:key:a",
    "truth_state": "fact", "confidence": 0.5, "created_ms": 1000,
}  # fmt: skip

corpora = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=5),  # content words
        st.integers(0, AGENTS - 1),  # author
        st.one_of(st.none(), st.sampled_from([0.1, 0.55, 0.9])),  # a cached community confidence
    ),
    min_size=1,
    max_size=24,
)
scorings = st.lists(st.one_of(st.none(), st.sampled_from(SCORES)), min_size=AGENTS, max_size=AGENTS)
searches = st.lists(
    st.fixed_dictionaries(
        {
            "words": st.lists(st.sampled_from(WORDS), min_size=1, max_size=2),
            "sort": st.sampled_from(["default", "trust", "community_confidence"]),
        },
        optional={
            "min_trust": st.sampled_from([0.3, 0.5, 0.55, 0.6154, 0.95]),
            "authors": st.lists(st.integers(0, AGENTS - 1), min_size=1, max_size=2, unique=True),
        },
    ),
    min_size=1,
    max_size=5,
)


def test_passing_is_an_include_set_only_when_neutral_authors_fail() -> None:
    scores = {"a": 0.2, "b": 0.5, "c": 0.9}
    assert passing(scores, 0.5) == Authors(exclude=frozenset({"a"}))
    assert passing(scores, 0.1) == Authors(exclude=frozenset())
    assert passing(scores, 0.6) == Authors(include=frozenset({"c"}))
    assert passing(scores, 0.95) == Authors(include=frozenset())


def test_trust_levels_put_unscored_authors_in_the_neutral_level() -> None:
    scores = {"a": 0.2, "b": 0.5, "c": 0.9, "d": 0.9}
    assert trust_levels(scores) == [
        (0.9, Authors(include=frozenset({"c", "d"}))),
        (NEUTRAL, Authors(exclude=frozenset({"a", "c", "d"}))),  # b, and everyone without a score
        (0.2, Authors(include=frozenset({"a"}))),
    ]
    assert [t for t, _ in trust_levels(scores, min_trust=0.5)] == [0.9, NEUTRAL]
    assert [t for t, _ in trust_levels(scores, min_trust=0.6)] == [0.9]
    assert trust_levels({}) == [(NEUTRAL, Authors())]
    # an author filter: only its authors, each in its level
    assert trust_levels(scores, authors=["a", "zed"]) == [
        (NEUTRAL, Authors(include=frozenset({"zed"}))),
        (0.2, Authors(include=frozenset({"a"}))),
    ]


def test_union_of_author_sets() -> None:
    a, b, c = Authors(include=frozenset("ab")), Authors(include=frozenset("bc")), Authors(exclude=frozenset("abx"))
    assert Authors.union([a, b]) == Authors(include=frozenset("abc"))
    assert Authors.union([a, c]) == Authors(exclude=frozenset("x"))
    assert Authors.union([c, Authors(exclude=frozenset("ay"))]) == Authors(exclude=frozenset("a"))
    assert Authors.union([b]) == b


def oracle_table(store: Conn) -> sqlite3.Connection:
    """An in-memory SQLite copy of the node's entries, trust scores and entry confidences (read from either engine's
    store, as fts5_oracle.build does) with this test's own FTS5 table over the entries."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)  # built on a reader thread, read on the test's
    for table in ("entries", "trust_scores", "entry_confidence"):
        cursor = store.execute(f"SELECT * FROM {table}")
        columns = [c[0] for c in cursor.description]
        conn.execute(f"CREATE TABLE {table} ({', '.join(columns)})")  # untyped: each value kept as read
        conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(columns))})", map(tuple, cursor))
    conn.execute("CREATE VIRTUAL TABLE oracle_fts USING fts5(content, tags)")
    conn.execute("INSERT INTO oracle_fts (rowid, content, tags) SELECT id, content, tags FROM entries")
    return conn


def oracle(conn: sqlite3.Connection, words: list[str], authors: list[str], min_trust: float | None) -> dict[int, Any]:
    """{entry id: (author trust, community confidence)} of the entries the search must match."""
    rows = conn.execute(
        "SELECT e.id, e.author_id, coalesce(t.score, 0.5),"
        " coalesce(c.community_confidence, t.score, 0.5) FROM oracle_fts f JOIN entries e ON e.id = f.rowid"
        " LEFT JOIN trust_scores t ON t.agent_id = e.author_id"
        " LEFT JOIN entry_confidence c ON c.entry_hash = e.record_hash WHERE oracle_fts MATCH ?",
        (fts5_oracle.fts_query(" ".join(words)),),
    ).fetchall()
    return {
        i: (trust, confidence)
        for i, author, trust, confidence in rows
        if (not authors or author in authors) and (min_trust is None or trust >= min_trust)
    }


async def walk(node: Node, q: SearchQuery, size: int) -> list[int]:
    """Every page of a search through the node's read service, following `next_offset`."""
    ids: list[int] = []
    offset: int | None = 0
    while offset is not None:
        result = await node.reads.search(msgspec.structs.replace(q, limit=size, offset=offset), agent=None)
        ids += [e.id for e in result.entries]
        offset = result.next_offset
    return ids


async def page(node: Node, q: SearchQuery) -> list[int]:
    hits = await node.db.read(lambda c: indexer.page(c, node.search_index, q, None, sight=OPERATOR))
    return hits.ids


async def page_as(node: Node, q: SearchQuery, **changes: Any) -> list[int] | None:
    """A page of `q` (words and authors only) from the index, with `changes` made to the ranking it asks for:
    `author_of=None` walks the trust levels one by one, a small `cap` makes sort=trust walk runs of levels and
    caps sort=community_confidence."""
    index = node.search_index
    assert index is not None and q.q is not None
    words = parse(q.q)

    def run(c: sqlite3.Connection) -> list[int] | None:
        order = dataclasses.replace(ranking.for_query(c, q), **changes)
        return index.search(words, Filters(author=q.author), q.limit, q.offset, order).ids

    return await node.db.read(run)


async def differential(
    root: Path, corpus: list[tuple[list[str], int, float | None]], scores: list[float | None], asked: list[Any]
) -> None:
    node = Node(root, clock=FakeClock())
    node.open()
    try:
        assert node.search_index is not None
        agents = [(await node.agents.create(f"a{i}", f"A{i}")).agent_id for i in range(AGENTS)]
        entry_hashes: list[tuple[str, float | None]] = []
        for n, (words, who, confidence) in enumerate(corpus):
            body = {"entry_type": "finding", "performative": "inform", "content": " ".join(words), "tags": [str(n)]}
            entry, _ = await node.entries.post(agents[who], msgspec.convert(body, PostEntry), None)
            entry_hashes.append((entry.record_hash, confidence))

        def cache(c: sqlite3.Connection) -> None:
            c.executemany(
                "INSERT INTO trust_scores VALUES (?, 0, 0, 0.5, ?, 0, 0)",
                [(a, s) for a, s in zip(agents, scores, strict=True) if s is not None],
            )
            c.executemany(
                "INSERT INTO entry_confidence VALUES (?, ?, 0, 0)", [(h, c) for h, c in entry_hashes if c is not None]
            )

        await node.db.write(cache)
        await indexer.Indexer(node.db, node.search_index).catch_up()
        with contextlib.closing(await node.db.read(oracle_table)) as conn:
            for spec in asked:
                authors = [agents[i] for i in spec.get("authors", [])]
                params = {"q": " ".join(spec["words"]), "sort": spec["sort"], "author": authors, "limit": 200}
                if "min_trust" in spec:
                    params["min_trust"] = spec["min_trust"]
                q = msgspec.convert(params, SearchQuery)
                expected = oracle(conn, spec["words"], authors, spec.get("min_trust"))
                bm25 = await page(node, msgspec.structs.replace(q, sort="default", min_trust=None))
                in_order = [i for i in bm25 if i in expected]  # BM25 desc, id desc: the index's default order
                if q.sort == "trust":
                    in_order.sort(key=lambda i: -expected[i][0])  # stable: BM25 and id order within a level
                elif q.sort == "community_confidence":
                    in_order.sort(key=lambda i: -expected[i][1])
                got = await page(node, q)
                assert sorted(got) == sorted(expected), (spec, got, expected)
                assert got == in_order, (spec, got, in_order)
                if q.sort == "trust":  # by runs of trust levels and level by level, as when many entries match
                    for changes in ({"cap": 0}, {"cap": 2}, {"author_of": None}):
                        assert await page_as(node, q, **changes) == got, changes
                        for offset in range(0, len(got) + 1, 3):
                            walked = msgspec.structs.replace(q, limit=3, offset=offset)
                            assert await page_as(node, walked, **changes) == got[offset : offset + 3], changes
                assert await walk(node, q, 3) == got
        assert node.reads.answered["sql"] == 0
    finally:
        node.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(corpus=corpora, scores=scorings, asked=searches)
def test_trust_orders_and_filters_match_the_oracle(
    node_store: Callable[[], str | None],
    corpus: list[tuple[list[str], int, float | None]],
    scores: list[float | None],
    asked: list[Any],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "node"
        initialise(root, node_store())  # the node's store: PostgreSQL in the --store postgresql pass
        asyncio.run(differential(root, corpus, scores, asked))


async def post(node: Node, agent_id: str, content: str, n: int, links: Any = ()) -> Any:
    body = {"entry_type": "finding", "performative": "inform", "content": content, "tags": [f"t{n}"]}
    entry, _ = await node.entries.post(agent_id, msgspec.convert(body | {"links": list(links)}, PostEntry), None)
    return entry


@contextlib.contextmanager
def reopened(node: Node) -> Iterator[None]:
    """Close the node (its index writer finishes its merges) and open it again."""
    node.close()
    node.open()
    yield


async def test_pages_of_tied_hits_survive_segment_merges(node: Node) -> None:
    """Identical contents tie on BM25: every sort walks them newest first, each exactly once, before and after
    the index merges the segments of many one-entry commits."""
    agents = [(await node.agents.create(f"a{i}", f"A{i}")).agent_id for i in range(3)]
    assert node.search_index is not None
    worker = indexer.Indexer(node.db, node.search_index)
    ids = []
    for n in range(40):
        ids.append((await post(node, agents[n % 3], "tied words here", n)).id)
        await worker.catch_up()  # one commit, one segment, per entry
    await node.db.write(lambda c: c.execute("INSERT INTO trust_scores VALUES (?, 0, 0, 0.5, 0.9, 0, 0)", (agents[1],)))
    newest_first = sorted(ids, reverse=True)
    by_trust = [i for i in newest_first if (i - ids[0]) % 3 == 1] + [i for i in newest_first if (i - ids[0]) % 3 != 1]
    assert node.search_index.index.searcher().num_segments < 40  # tantivy merged segments of those commits
    for sort, expected in (("default", newest_first), ("trust", by_trust), ("community_confidence", by_trust)):
        q = msgspec.convert({"q": "tied", "sort": sort}, SearchQuery)
        for size in (1, 7, 40):
            assert await walk(node, q, size) == expected, (sort, size)
    q = msgspec.convert({"q": "tied", "sort": "trust", "limit": 7}, SearchQuery)
    for changes in ({"cap": 5}, {"author_of": None}):  # by runs of levels; level by level
        for offset in range(0, 42, 7):
            walked = msgspec.structs.replace(q, offset=offset)
            assert await page_as(node, walked, **changes) == by_trust[offset : offset + 7], changes
    with reopened(node):
        for sort, expected in (("default", newest_first), ("trust", by_trust), ("community_confidence", by_trust)):
            q = msgspec.convert({"q": "tied", "sort": sort}, SearchQuery)
            assert await walk(node, q, 6) == expected, sort
    assert node.reads.answered == {"index": node.reads.answered["index"], "sql": 0}


async def test_community_confidence_sorts_within_the_cap(node: Node) -> None:
    alice = (await node.agents.create("alice", "Alice")).agent_id
    assert node.search_index is not None
    entries = [await post(node, alice, "capped " * (1 + n % 3), n) for n in range(8)]
    await indexer.Indexer(node.db, node.search_index).catch_up()
    best_confidence = entries[0]  # the oldest, with the term once: behind the entries with it 3 times by BM25

    def cache(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO entry_confidence VALUES (?, 0.99, 1, 0)", (best_confidence.record_hash,))

    await node.db.write(cache)

    def pages(cap: int, offset: int, limit: int) -> Any:
        params = {"q": "capped", "sort": "community_confidence", "offset": offset, "limit": limit}
        return page_as(node, msgspec.convert(params, SearchQuery), cap=cap)

    bm25 = await page(node, msgspec.convert({"q": "capped", "limit": 50}, SearchQuery))
    assert sorted(bm25) == sorted(e.id for e in entries)
    whole = await pages(SORT_CAP, 0, 50)
    assert whole == [best_confidence.id] + [i for i in bm25 if i != best_confidence.id]
    # a cap of 3: the 3 best BM25 matches, re-sorted; the entry of highest confidence is past them
    assert best_confidence.id not in bm25[:3]
    assert await pages(3, 0, 50) == bm25[:3]
    assert await pages(3, 2, 50) == bm25[2:3]
    assert await pages(3, 3, 50) == []  # past the cap: empty
    big = msgspec.convert({"q": "capped", "sort": "community_confidence", "offset": SORT_CAP}, SearchQuery)
    assert await page(node, big) == []


async def test_min_trust_with_no_passing_author_matches_nothing(node: Node) -> None:
    alice = (await node.agents.create("alice", "Alice")).agent_id
    assert node.search_index is not None
    await post(node, alice, "lonely", 0)
    await indexer.Indexer(node.db, node.search_index).catch_up()
    for sort in ("default", "trust", "community_confidence"):
        assert await page(node, msgspec.convert({"q": "lonely", "min_trust": 0.51, "sort": sort}, SearchQuery)) == []
        assert await page(node, msgspec.convert({"q": "lonely", "min_trust": 0.5, "sort": sort}, SearchQuery)) != []


async def test_a_search_with_hops_answered_by_the_index_returns_the_neighbourhood(node: Node) -> None:
    alice = (await node.agents.create("alice", "Alice")).agent_id
    assert node.search_index is not None
    seed = await post(node, alice, "needle", 0)
    neighbour = await post(node, alice, "unrelated", 1, [{"target": seed.record_hash, "link_type": "supports"}])
    await indexer.Indexer(node.db, node.search_index).catch_up()
    for sort in ("default", "trust"):
        q = msgspec.convert({"q": "needle", "hops": 1, "sort": sort}, SearchQuery)
        before = node.reads.answered["index"]
        result = await node.reads.search(q, agent=None)
        assert node.reads.answered["index"] == before + 1
        assert [e.id for e in result.entries] == [seed.id, neighbour.id]
        assert [(link.source, link.target) for link in result.links] == [(neighbour.record_hash, seed.record_hash)]
        assert result.next_offset is None


async def test_rest_search_by_trust_is_answered_by_the_index(client: TestClient, node: Node) -> None:
    low, high = (await node.agents.create("low", "Low")), (await node.agents.create("high", "High"))
    first = await post(node, high.agent_id, "shared word", 0)
    second = await post(node, low.agent_id, "shared word", 1)
    await node.db.write(
        lambda c: c.execute("INSERT INTO trust_scores VALUES (?, 0, 0, 0.5, 0.3, 0, 0)", (low.agent_id,))
    )
    await client.app[SEARCH_INDEXER].catch_up()
    headers = {"Authorization": f"Bearer {low.api_key}"}
    for params, expected in (
        ({"q": "shared"}, [second.id, first.id]),
        ({"q": "shared", "sort": "trust"}, [first.id, second.id]),
        ({"q": "shared", "min_trust": "0.4"}, [first.id]),
        ({"q": "shared", "sort": "community_confidence", "min_trust": "0.2"}, [first.id, second.id]),
    ):
        resp = await client.get("/v1/search", params=params, headers=headers)
        assert resp.status == 200, await resp.text()
        assert [e["id"] for e in (await resp.json())["entries"]] == expected, params
    assert node.reads.answered == {"index": 4, "sql": 0}


async def test_every_way_of_walking_the_trust_levels_gives_the_same_pages(node: Node) -> None:
    """Many trust levels, some empty for a word: the in-memory sort, runs of levels under several caps and the
    walk level by level agree on every page."""
    rng = random.Random(24)
    agents = [(await node.agents.create(f"a{i}", f"A{i}")).agent_id for i in range(24)]
    for n in range(150):
        await post(node, rng.choice(agents), " ".join(rng.choices(["alpha", "beta", "gamma"], k=rng.randint(1, 4))), n)
    scored = [(a, rng.choice([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])) for a in agents if rng.random() < 0.8]
    await node.db.write(lambda c: c.executemany("INSERT INTO trust_scores VALUES (?, 0, 0, 0.5, ?, 0, 0)", scored))
    assert node.search_index is not None
    await indexer.Indexer(node.db, node.search_index).catch_up()
    for word in ("alpha", "beta gamma"):
        for min_trust in (None, 0.35, 0.6):
            q = msgspec.convert({"q": word, "sort": "trust", "min_trust": min_trust, "limit": 200}, SearchQuery)
            every = await page_as(node, q)
            assert every and len(every) == len(set(every))
            for changes in [{"cap": cap} for cap in (0, 1, 3, 10, 30, 60)] + [{"author_of": None}]:
                for limit in (4, 11):
                    pages = []
                    for offset in range(0, len(every) + limit, limit):
                        walked = msgspec.structs.replace(q, limit=limit, offset=offset)
                        pages += await page_as(node, walked, **changes) or []
                    assert pages == every, (word, min_trust, changes, limit)


class Counting:
    """The real searcher, counting the hits its searches hand back."""

    def __init__(self, searcher: Any) -> None:
        self.searcher, self.fetched, self.searches = searcher, 0, 0

    def search(self, query: Any, **kwargs: Any) -> Any:
        result = self.searcher.search(query, **kwargs)
        self.fetched, self.searches = self.fetched + len(result.hits), self.searches + 1
        return result

    def fast_field_values(self, name: str, addresses: Any) -> Any:
        return self.searcher.fast_field_values(name, addresses)


def every_hit(searcher: Any, query: Any) -> list[ranking.Hit]:
    """The oracle: every match, sorted by BM25 descending then id descending."""
    return sorted(ranking.hits(searcher, query, searcher.num_docs + 1), key=lambda h: (-h[0], -h[1]))


def matching(w: str) -> Any:
    """The query of one word (no prefix: the term dictionary is not looked at)."""
    clauses = tantivy_clauses([w], SCHEMA, None)  # type: ignore[arg-type]
    assert clauses is not None
    return tantivy.Query.boolean_query([(tantivy.Occur.Must, c) for c in clauses])


def test_a_tie_is_broken_by_seq_windows_exactly_whatever_the_segments(tmp_path: Path) -> None:
    """Few distinct contents make big tied groups at several scores; every `need` gives the oracle's prefix,
    with many one-commit segments, after merges, and with seq windows or the plain doubling."""
    rng = random.Random(24)
    index = SearchIndex(tmp_path / "ix", "epoch")
    contents = ["kernel", "kernel panic", "kernel kernel", "the kernel of it", "panic"]
    seq = 0
    for _ in range(60):  # small commits: many segments
        batch = [Row(seq + i + 1, f"h{seq + i + 1}", rng.choice(contents), **ROW) for i in range(rng.randint(1, 9))]
        seq += len(batch)
        index.apply(batch, seq)

    def check() -> None:
        searcher = index.index.searcher()
        for w in ("kernel", "panic"):
            oracle = every_hit(searcher, matching(w))
            # What the index knows without searching (`Span`): exact, or off in either direction (windows widen
            # or bisect); `end` far above the newest match (its position when the word is old).
            spans = [None, *(ranking.Span(e, m) for e in (seq + 1, 10 * seq) for m in (1, len(oracle), 50 * seq))]
            for need in (1, 2, 3, 5, 17, 40, 99, len(oracle) - 1, len(oracle), len(oracle) + 3):
                for span in spans:
                    assert ranking.top(searcher, matching(w), need, SCHEMA, span) == oracle[:need], (w, need, span)
                assert ranking.top(searcher, matching(w), need) == oracle[:need], (w, need)

    assert index.index.searcher().num_segments > 1
    check()
    index.close()  # the writer finishes its merges
    index = SearchIndex(tmp_path / "ix", "epoch")
    check()
    index.close()


def test_a_tied_page_fetches_what_the_page_needs_not_the_tied_group(tmp_path: Path) -> None:
    index = SearchIndex(tmp_path / "ix", "epoch")
    for start in range(0, 3000, 500):
        index.apply([Row(s, f"h{s}", "same words", **ROW) for s in range(start + 1, start + 501)], start + 500)
    searcher = index.index.searcher()
    assert ranking.top(searcher, matching("same"), 20, SCHEMA) == [
        (h[0], s) for h, s in zip(every_hit(searcher, matching("same"))[:20], range(3000, 2980, -1), strict=True)
    ]
    windows, doubling = Counting(searcher), Counting(searcher)
    assert ranking.top(windows, matching("same"), 20, SCHEMA) == ranking.top(doubling, matching("same"), 20)  # type: ignore[arg-type]
    assert doubling.fetched >= 3000  # the old way: the whole tied group
    assert windows.fetched <= 8 * (4 * 20 + 64), (windows.fetched, windows.searches)  # O(need)
    # The index's position and the word's count size the first window without the pass over every match that
    # finds the newest one: the same page.
    spanned = Counting(searcher)
    span = ranking.Span(3001, index.bound([Clause(("same",))]) or 0)
    assert span.matches == 3000
    assert ranking.top(spanned, matching("same"), 20, SCHEMA, span) == ranking.top(doubling, matching("same"), 20)  # type: ignore[arg-type]
    assert spanned.searches < windows.searches
    assert index.search(["same"], Filters(), 20, 0).ids == list(range(3000, 2980, -1))
    index.close()


def test_duplicate_seqs_run_the_windows_out_of_steps_and_fall_back_to_doubling(tmp_path: Path) -> None:
    index = SearchIndex(tmp_path / "ix", "epoch")
    index.apply([Row(5, f"h{n}", "same", **ROW) for n in range(300)] + [Row(9, "h9", "other", **ROW)], 9)
    searcher = index.index.searcher()
    counting = Counting(searcher)
    assert ranking.top(counting, matching("same"), 3, SCHEMA) == every_hit(searcher, matching("same"))[:3]  # type: ignore[arg-type]
    assert counting.fetched >= 300  # the windows gave up; the doubling fetched the group
    index.close()


def test_a_seq_window_leaves_bm25_scores_bit_identical(tmp_path: Path) -> None:
    rng = random.Random(7)
    index = SearchIndex(tmp_path / "ix", "epoch")
    for start in range(0, 400, 40):
        mixed = " ".join(rng.choices(["kernel", "panic", "x", "y"], k=rng.randint(1, 12)))
        rows = [Row(start + 1, f"h{start + 1}", mixed, **ROW)]
        rows += [Row(s, f"h{s}", "kernel " * rng.randint(1, 4), **ROW) for s in range(start + 2, start + 41)]
        index.apply(rows, start + 40)
    searcher = index.index.searcher()
    whole = dict((seq, score) for score, seq in every_hit(searcher, matching("kernel")))
    window = tantivy.Query.range_query(SCHEMA, "seq", tantivy.FieldType.Integer, 200, None)
    filtered = tantivy.Query.boolean_query(
        [(tantivy.Occur.Must, matching("kernel")), (tantivy.Occur.Must, tantivy.Query.const_score_query(window, 0.0))]
    )
    inside = every_hit(searcher, filtered)
    assert inside and all(seq >= 200 for _, seq in inside)
    assert {seq: score for score, seq in inside} == {seq: score for seq, score in whole.items() if seq >= 200}
    index.close()
