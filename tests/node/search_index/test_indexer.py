"""node.search_index.indexer: the index follows the log, and answers searches with the FTS5 path's match sets.

The differential test draws random corpora (unicode, diacritics, underscores, marks) and queries with filters,
posts the corpus through a real node, catches the index up, and compares the index's answer with
node.queries.search (the FTS5 path, the oracle).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node import queries
from node.datadir import initialise
from node.search_index import indexer
from node.service import Node
from node.wire.api import PostEntry, SearchQuery
from tests.conftest import FakeClock

WORDS = ["café", "CAFE", "cafe", "naïve", "naive", "Straße", "strasse", "ǽsir", "foo_bar", "foo", "bar",
         "日本語", "x\u0301y", "Ωmega", "ωmega", "42", "v2", "ﬁle", "İstanbul", "µs", "tea"]  # fmt: skip
SEPARATORS = [" ", ", ", "-", "_", ". ", "'", "\n", " / "]
TAGS = ["db", "Café", "cafe", "x y", "ü"]


@st.composite
def texts(draw: Any, max_words: int = 6) -> str:
    words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=max_words))
    out = words[0]
    for w in words[1:]:
        out += draw(st.sampled_from(SEPARATORS)) + w
    return out


entries = st.lists(
    st.fixed_dictionaries(
        {
            "content": texts(),
            "tags": st.lists(st.sampled_from(TAGS), max_size=2, unique=True),
            "entry_type": st.sampled_from(["finding", "question"]),
            "truth_state": st.sampled_from(["fact", "hypothesis", "simulation"]),
            "confidence": st.sampled_from([0.2, 0.5, 0.9]),
            "by_bob": st.booleans(),
        }
    ),
    min_size=1,
    max_size=14,
)
searches = st.lists(
    st.fixed_dictionaries(
        {"q": st.one_of(texts(max_words=2), st.text(alphabet="aécfé_ 語x\u0301Ω.-", min_size=1, max_size=6))},
        optional={
            "tags": st.lists(st.sampled_from(TAGS), min_size=1, max_size=2),
            "entry_type": st.just(["question"]),
            "truth_state": st.just(["simulation"]),
            "min_confidence": st.sampled_from([0.5, 0.9]),
            "include_synthetic": st.booleans(),
            "author": st.just("bob"),
        },
    ),
    min_size=1,
    max_size=6,
)


async def differential(root: Path, corpus: list[dict[str, Any]], asked: list[dict[str, Any]]) -> None:
    node = Node(root, clock=FakeClock())
    node.open()
    try:
        assert node.search_index is not None
        alice = await node.agents.create("alice", "Alice")
        bob = await node.agents.create("bob", "Bob")
        for spec in corpus:
            body = {k: v for k, v in spec.items() if k != "by_bob"} | {"performative": "inform"}
            who = bob if spec["by_bob"] else alice
            await node.entries.post(who.agent_id, msgspec.convert(body, PostEntry), None)
        await indexer.Indexer(node.db, node.search_index).catch_up()
        for params in asked:
            if "author" in params:
                params = params | {"author": [bob.agent_id]}
            q = msgspec.convert(params | {"limit": 200}, SearchQuery)
            if queries.fts_query(q.q or "") is None:
                continue
            expected = await node.db.read(lambda c, q=q: [e.id for e in queries.search(c, q, None)])
            got = await node.db.read(lambda c, q=q: indexer.page(c, node.search_index, q, None))  # type: ignore[arg-type]
            assert got is not None
            assert sorted(got) == sorted(expected), (params, got, expected)
            # paging through the index: pages of 2 concatenate to the whole ranking, no skip, no repeat
            paged: list[int] = []
            for offset in range(0, len(got) + 2, 2):
                pq = msgspec.structs.replace(q, limit=2, offset=offset)
                paged += await node.db.read(lambda c, pq=pq: indexer.page(c, node.search_index, pq, None))  # type: ignore[arg-type]
            assert paged == got
    finally:
        node.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpus=entries, asked=searches)
def test_the_index_matches_what_fts5_matches(corpus: list[dict[str, Any]], asked: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "node"
        initialise(root)
        asyncio.run(differential(root, corpus, asked))
