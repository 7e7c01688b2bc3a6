"""node.search_index.indexer: the index follows the log, and answers searches with the old FTS5 path's match sets.

The differential test draws random corpora (unicode, diacritics, underscores, marks) and queries with filters,
posts the corpus through a real node, catches the index up, and compares the index's answer with the FTS5
search the node had before (tests/node/search_index/fts5_oracle.py: its table built from the same rows).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.errors import InvalidInput, SearchIndexBuilding
from node.ops import pg_tools
from node.ops import store as ops_store
from node.ops.datadir import DataDir, initialise
from node.search_index import index as index_mod
from node.search_index import indexer, store
from node.search_index.index import FOLDER, Row, SearchIndex
from node.service import Node
from node.spaces.sight import OPERATOR
from node.store import db
from node.store.conn import Conn
from node.web.appkeys import SEARCH_INDEXER
from tests.conftest import FakeClock
from tests.node.search_index import fts5_oracle
from wire.api import PostEntry, SearchQuery

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
        {
            "q": st.one_of(
                texts(max_words=2),
                st.text(alphabet='aécfé_ 語x\u0301Ω.-"*', min_size=1, max_size=6),
                texts(max_words=3).map(lambda t: f'"{t}"'),  # a phrase
                texts(max_words=1).map(lambda t: t[:3] + "*"),  # a prefix
            )
        },
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
        oracle = await node.db.read(fts5_oracle.build)
        for params in asked:
            if "author" in params:
                params = params | {"author": [bob.agent_id]}
            q = msgspec.convert(params | {"limit": 200}, SearchQuery)
            try:
                expected = fts5_oracle.search_ids(oracle, q)
            except InvalidInput:  # a one-character prefix: refused before the index runs
                continue
            if expected is None:
                continue
            got = (
                await node.db.read(partial(indexer.page, index=node.search_index, q=q, since_ms=None, sight=OPERATOR))
            ).ids
            assert sorted(got) == sorted(expected), (params, got, expected)
            # paging through the index: pages of 2 concatenate to the whole ranking, no skip, no repeat
            paged: list[int] = []
            for offset in range(0, len(got) + 2, 2):
                pq = msgspec.structs.replace(q, limit=2, offset=offset)
                paged += (
                    await node.db.read(
                        partial(indexer.page, index=node.search_index, q=pq, since_ms=None, sight=OPERATOR)
                    )
                ).ids
            assert paged == got
        oracle.close()
    finally:
        node.close()


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(corpus=entries, asked=searches)
def test_the_index_matches_what_fts5_matches(
    node_store: Callable[[], str | None], corpus: list[dict[str, Any]], asked: list[dict[str, Any]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "node"
        initialise(root, node_store())  # the node's store: PostgreSQL in the --store postgresql pass
        asyncio.run(differential(root, corpus, asked))


async def post_text(node: Node, agent_id: str, content: str) -> int:
    body = msgspec.convert({"entry_type": "finding", "performative": "inform", "content": content}, PostEntry)
    entry, _ = await node.entries.post(agent_id, body, None)
    return entry.id


async def words(node: Node, text: str, **params: Any) -> list[int]:
    q = msgspec.convert({"q": text, "limit": 50} | params, SearchQuery)
    return (await node.db.read(lambda c: indexer.page(c, node.search_index, q, None, sight=OPERATOR))).ids


async def test_the_index_answers_as_it_stands_with_its_position(node: Node) -> None:
    alice = await node.agents.create("alice", "Alice")
    assert node.search_index is not None
    first = await post_text(node, alice.agent_id, "Café crème")
    q = SearchQuery(q="cafe")
    hits = await node.db.read(lambda c: indexer.page(c, node.search_index, q, None, sight=OPERATOR))
    assert (hits.ids, hits.position) == ([], 0)  # behind the log: answered as the index stands, saying where
    worker = indexer.Indexer(node.db, node.search_index)
    assert await worker.lag() == 1
    assert await worker.catch_up() == 1
    assert await worker.lag() == 0
    hits = await node.db.read(lambda c: indexer.page(c, node.search_index, q, None, sight=OPERATOR))
    assert (hits.ids, hits.position) == ([first], first)
    second = await post_text(node, alice.agent_id, "Crème café")
    await worker.catch_up()
    assert await words(node, "cafe") == [second, first]  # the same text ties: newest first
    assert await words(node, "cafe", min_trust=0.6) == []  # trust is node-local: test_ranking.py
    assert set(await words(node, "cafe", sort="trust")) == {first, second}


async def test_a_search_while_the_index_is_built_is_answered_503(node: Node) -> None:
    """Far behind the log (a first start on an upgraded store): 503 search_index_building with Retry-After, until
    the index gets near the log's head; from then on it answers, even when it falls behind again."""
    alice = await node.agents.create("alice", "Alice")
    assert node.search_index is not None
    posted = await post_text(node, alice.agent_id, "kettle")
    # entries the log's projection holds but the index does not: a fresh index beside an upgraded store
    await node.db.write(lambda c: copy_entry(c, posted, indexer.SERVING_LAG + 1))
    with pytest.raises(SearchIndexBuilding) as caught:
        await words(node, "kettle")
    assert caught.value.status == 503 and caught.value.code == "search_index_building"
    assert int(caught.value.headers["Retry-After"]) >= 1
    worker = indexer.Indexer(node.db, node.search_index)
    await worker.catch_up()
    assert len(await words(node, "kettle", limit=1)) == 1
    assert node.search_index.serving
    await node.db.write(lambda c: copy_entry(c, posted, indexer.SERVING_LAG + 1, start=10**6))
    assert len(await words(node, "kettle", limit=1)) == 1  # serving: behind again, answered as it stands
    node.search_index.reset()  # a rebuild starts: refused again until it is near the head
    with pytest.raises(SearchIndexBuilding):
        await words(node, "kettle")
    await worker.catch_up()
    assert len(await words(node, "kettle", limit=1)) == 1


def copy_entry(conn: Conn, entry_id: int, count: int, start: int = 1000) -> None:
    """`count` copies of an entries row under new ids and addresses (rows the index has not seen), on either
    engine."""
    columns = [c[0] for c in conn.execute("SELECT * FROM entries LIMIT 0").description]
    picked = ", ".join(
        {"id": f"{start} + n", "record_hash": f"record_hash || '-' || ({start} + n)"}.get(c, c) for c in columns
    )
    conn.execute(
        f"WITH RECURSIVE k(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM k WHERE n < ?)"
        f" INSERT INTO entries ({', '.join(columns)}) SELECT {picked} FROM entries, k WHERE id = ?",
        (count, entry_id),
    )


async def test_an_address_shows_its_winner(node: Node) -> None:
    """An equivocated address: the index follows the version the node serves (delete by address, add)."""
    from tests.node.store.test_equivocation import append_to, version, version_hex

    a, b = version(["alpha"]), version(["omega"])
    worse, better = sorted([a, b], key=version_hex, reverse=True)
    assert node.search_index is not None
    worker = indexer.Indexer(node.db, node.search_index)
    await node.db.write(lambda c: append_to(c, [worse]))
    await worker.catch_up()
    tag_of = {id(a): "alpha", id(b): "omega"}
    assert len(await words(node, tag_of[id(worse)])) == 1
    await node.db.write(lambda c: append_to(c, [better]))
    await worker.catch_up()
    assert await words(node, tag_of[id(worse)]) == []
    assert len(await words(node, tag_of[id(better)])) == 1
    assert node.search_index.documents() == 1


async def _copy_of(node: Node, root: Path, database: str | None) -> Any:
    """A connection to a copy of the node's database as it is now: SQLite's online backup of the file, or on
    PostgreSQL a dump loaded into `database` (what a restore from an old backup holds)."""
    url = DataDir(root).store_url
    if url is None:
        early = sqlite3.connect(root.parent / "early.db")
        await node.db.read(lambda c: c.backup(early))
        return early
    assert database is not None
    dump = root.parent / "early.pgdump"
    await asyncio.to_thread(pg_tools.dump, url, dump)
    await asyncio.to_thread(pg_tools.restore, dump, database, ops_store.CLEAR_SCHEMA_PG)
    return db.connect_store(database)


async def test_rebuild_and_check(node: Node, data_dir: tuple[Path, str], node_store: Callable[[], str | None]) -> None:
    root = data_dir[0]
    alice = await node.agents.create("alice", "Alice")
    for text in ("one", "two"):
        await post_text(node, alice.agent_id, text)
    early = await _copy_of(node, root, node_store())  # a copy taken before the last entry
    await post_text(node, alice.agent_id, "three")
    assert node.search_index is not None
    await indexer.Indexer(node.db, node.search_index).catch_up()
    status, detail = await node.db.read(lambda c: indexer.check(root, c))
    assert status == "ok", detail
    status, detail = indexer.check(root, early)  # the index is ahead of that copy: not a failure
    assert status == "warn" and "past this copy" in detail
    early.close()
    held = await node.db.read(lambda c: indexer.rebuild(root, c))
    assert held.entries is None and held.status == "ok"  # the serving node holds the writer
    node.close()
    with contextlib.closing(db.connect_store(DataDir(root).store)) as conn:
        assert indexer.rebuild(root, conn) == indexer.Rebuilt(3, detail=indexer.check(root, conn)[1])
        assert indexer.check(root, conn)[0] == "ok"
        damaged = SearchIndex(root / FOLDER, store.store_epoch(conn))
        damaged.apply([Row(99, "h99", "stray", "[]", "finding", "inform", "x", "fact", 0.5, 0)], 3)
        damaged.close()
        status, detail = indexer.check(root, conn)
        assert status == "fail" and "bbs rebuild" in detail
        repaired = indexer.rebuild(root, conn)  # opens, fails its check: emptied in place and built again
        assert repaired.entries == 3 and repaired.status == "ok" and repaired.repaired is not None
        assert repaired.repaired == "search index holds 4 documents for 2 entries; rebuilding it from the log"
        shutil.rmtree(root / FOLDER)
        assert indexer.check(root, conn)[0] == "warn"


async def test_rest_search_answers_from_the_index_and_metrics_show_it(
    client: TestClient, node: Node, data_dir: tuple[Path, str]
) -> None:
    alice = await node.agents.create("alice", "Alice")
    entry_id = await post_text(node, alice.agent_id, "naïve answer")
    await client.app[SEARCH_INDEXER].catch_up()
    headers = {"Authorization": f"Bearer {alice.api_key}"}
    resp = await client.get("/v1/search", params={"q": "NAIVE"}, headers=headers)
    assert resp.status == 200
    assert [e["id"] for e in (await resp.json())["entries"]] == [entry_id]
    assert node.reads.answered["index"] == 1
    metrics = await client.get("/metrics", headers={"Authorization": f"Bearer {data_dir[1]}"})
    text = await metrics.text()
    assert "bbs_search_index_lag_entries 0.0" in text
    assert "bbs_search_index_documents 1.0" in text
    assert 'bbs_searches_answered{path="index"} 1.0' in text


async def test_a_stopped_indexer_returns_without_being_cancelled(node: Node) -> None:
    """The app's cleanup stops the worker before cancelling it: on Python 3.11 `asyncio.wait_for` can drop a
    cancellation that lands as the wake event is set, and the worker must end all the same."""
    assert node.search_index is not None
    worker = indexer.Indexer(node.db, node.search_index)
    task = asyncio.create_task(worker.run())
    await asyncio.sleep(0.05)  # caught up, waiting for a wake-up
    worker.stop()
    await asyncio.wait_for(task, 5)  # no cancel: stop alone ends it
    assert task.done() and not task.cancelled()


async def test_a_serving_index_is_rebuilt_when_the_store_epoch_changes_under_it(
    client: TestClient, node: Node, clock: FakeClock
) -> None:
    """A database brought back under a serving process gets a new epoch (node/ops/history.py): the index built for
    the old one is rebuilt from the log, since the log it indexed may have lost its end."""
    worker: indexer.Indexer = client.app[SEARCH_INDEXER]
    alice = await node.agents.create("alice", "Alice")
    ids = [await post_text(node, alice.agent_id, f"ledger note {i}") for i in range(3)]
    await worker.catch_up()
    repairs = worker.repairs
    epoch = await node.db.read(store.store_epoch)
    assert worker.epoch_is in node.epoch_watch.listeners
    await node.epoch_watch.look()  # the epoch it was built for: nothing to do
    assert worker.epoch_now is None
    await node.db.write(lambda c: ops_store.renew_epoch_txn(c, "e-brought-back", epoch, node.now_ms()))
    await node.epoch_watch.look()  # every 5 s in a served node
    headers = {"Authorization": f"Bearer {alice.api_key}"}
    async with asyncio.timeout(30):
        while worker.index.stamp != index_mod.stamp_for("e-brought-back") or worker.position.position < max(ids):
            await asyncio.sleep(0.05)
    assert worker.repairs == repairs + 1
    resp = await client.get("/v1/search", params={"q": "ledger", "fresh": "true"}, headers=headers)
    assert resp.status == 200, await resp.text()
    assert sorted(e["id"] for e in (await resp.json())["entries"]) == sorted(ids)
    assert worker.index.state()[1] == index_mod.stamp_for("e-brought-back")
