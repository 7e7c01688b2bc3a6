"""node/entries/reads.py: reading entries with their neighbourhood and searching, called directly (REST:
test_post_read.py,
test_search.py, test_traversal.py, test_quick_reads.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from node.entries import reads
from node.entries.queries import parse_since
from node.entries.reads import INLINE_HITS
from node.errors import InvalidInput, SearchIndexBuilding
from node.search_index.index import FOLDER
from node.search_index.indexer import Indexer
from node.service import Node
from node.spaces.sight import OPERATOR
from node.store import db
from tests.conftest import AgentCreds
from tests.node.test_crash import Server, bbs, free_port
from wire.api import LinkSpec, PostEntry, ReadQuery, SearchQuery

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def catch_up(node: Node) -> None:
    """Index what the node holds (no app runs the indexing task here)."""
    assert node.search_index is not None
    await Indexer(node.db, node.search_index).catch_up()


async def test_read_by_id_and_hash_with_neighbours_and_missing_refs(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    base, _ = await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "the base"), None)
    reply, _ = await node.entries.post(
        alice.agent_id,
        PostEntry("finding", "confirm", "agreed", links=[LinkSpec(target=base.record_hash, link_type="supports")]),
        None,
    )
    unknown = "c" * 64
    result = await node.reads.read(
        [str(base.id), base.record_hash, "nope", unknown, "nope"], ReadQuery(hops=1), viewer=None
    )
    assert [e.id for e in result.entries] == [base.id, reply.id]  # the base once, and its neighbour
    assert result.missing == ["nope", unknown]  # a ref given twice is missing once
    assert [(link.source, link.target) for link in result.links] == [(reply.record_hash, base.record_hash)]
    assert not result.truncated
    alone = await node.reads.read([str(base.id)], ReadQuery(include_links=False), viewer=None)
    assert [e.id for e in alone.entries] == [base.id] and alone.links == []


class Counting:
    """A connection that counts the statements run through it (each one a round trip on PostgreSQL)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.statements: list[str] = []
        self.engine = getattr(conn, "engine", None)  # what `engine_of` reads

    def execute(self, sql: str, params: Any = (), /) -> Any:
        self.statements.append(sql)
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, params: Any, /) -> Any:
        self.statements.append(sql)
        return self.conn.executemany(sql, params)


async def test_a_read_runs_the_same_statements_for_one_ref_or_many(node: Node, make_agent: MakeAgent) -> None:
    """Set-based: the refs are resolved in one statement whatever their number, a simulation is told apart in it,
    and the tombstones are looked up only for an address the read did not find (issue 34's round trips)."""
    alice = await make_agent("alice")
    first, _ = await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "one"), None)
    second, _ = await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "two"), None)

    async def statements(refs: list[str]) -> tuple[list[str], reads.ReadResult]:
        def run(conn: Any) -> tuple[list[str], reads.ReadResult]:
            counting = Counting(conn)
            return counting.statements, reads.read(counting, refs, ReadQuery(), OPERATOR)

        return await node.db.read(run)

    one, _ = await statements([first.record_hash])
    many, result = await statements([str(first.id), first.record_hash, second.record_hash, str(second.id)])
    assert len(one) == len(many) == 3  # the refs, the links, the entries
    assert [e.id for e in result.entries] == [first.id, second.id] and result.missing == []
    assert not any("tombstones" in sql for sql in one + many)
    missing, result = await statements([first.record_hash, "c" * 64])
    assert [sql for sql in missing if "tombstones" in sql] and result.missing == ["c" * 64]


async def test_search_pages_and_walks_from_its_page(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    posted = [
        (await node.entries.post(alice.agent_id, PostEntry("finding", "inform", f"zeppelin note {i}"), None))[0]
        for i in range(3)
    ]
    other, _ = await node.entries.post(
        alice.agent_id,
        PostEntry(
            "finding", "inform", "unrelated", links=[LinkSpec(target=posted[0].record_hash, link_type="responds_to")]
        ),
        None,
    )
    await catch_up(node)
    page = await node.reads.search(SearchQuery(q="zeppelin", limit=2), agent=None)
    assert len(page.entries) == 2 and page.next_offset == 2 and page.links == []
    rest = await node.reads.search(SearchQuery(q="zeppelin", limit=2, offset=2), agent=None)
    assert len(rest.entries) == 1 and rest.next_offset is None
    walked = await node.reads.search(SearchQuery(q="zeppelin", limit=10, hops=1), agent=None)
    assert {e.id for e in walked.entries} == {e.id for e in posted} | {other.id}
    assert [link.source for link in walked.links] == [other.record_hash]


async def test_search_refuses_bad_text_and_times(node: Node) -> None:
    with pytest.raises(InvalidInput) as no_words:
        await node.reads.search(SearchQuery(q="!!! ???"), agent=None)
    assert (no_words.value.code, no_words.value.field) == ("invalid_query", "$.q")
    with pytest.raises(InvalidInput) as bad_since:
        await node.reads.search(SearchQuery(since="yesterday"), agent=None)
    assert bad_since.value.field == "$.since"


def test_parse_since_takes_iso_times_with_a_timezone() -> None:
    assert parse_since(None, "$.since") is None
    assert parse_since("2026-01-31T12:00:00Z", "$.since") == 1_769_860_800_000
    assert parse_since("2026-01-31T13:00:00+01:00", "$.since") == 1_769_860_800_000
    with pytest.raises(InvalidInput, match="timezone") as naive:
        parse_since("2026-01-31T12:00:00", "$.after")
    assert naive.value.field == "$.after"
    with pytest.raises(InvalidInput, match="ISO 8601"):
        parse_since("last week", "$.since")


async def test_a_search_with_words_needs_the_index_and_one_by_filters_does_not(
    node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    posted, _ = await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "zeppelins float"), None)
    index, node.reads.index = node.reads.index, None  # as when the index could not be opened
    with pytest.raises(SearchIndexBuilding) as refused:
        await node.reads.search(SearchQuery(q="zeppelins"), agent=None)
    assert refused.value.status == 503 and "Retry-After" in refused.value.headers
    assert [e.id for e in (await node.reads.search(SearchQuery(q="  "), agent=None)).entries] == [posted.id]  # no words
    node.reads.index = index
    await catch_up(node)
    assert [e.id for e in (await node.reads.search(SearchQuery(q="Zeppelins"), agent=None)).entries] == [posted.id]
    assert node.reads.answered == {"index": 1, "sql": 1}


async def inline_reads(node: Node, q: SearchQuery) -> int:
    """How many reads of a search started on the event loop: those answered there, and those a busy database or a
    loaded machine moved to a thread mid-way (a quick read over its budget: not what these tests are about)."""
    stats = node.db.read_stats
    before = stats.inline + stats.moved
    await node.reads.search(q, agent=None)
    return stats.inline + stats.moved - before


async def test_a_deep_page_is_searched_on_a_reader_thread(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "zeppelins float"), None)
    await catch_up(node)

    assert await inline_reads(node, SearchQuery(q="zeppelins")) == 2  # the first: is the index serving? one read
    assert await inline_reads(node, SearchQuery(q="zeppelins")) == 1  # then in memory: the search is its one read
    assert await inline_reads(node, SearchQuery(q="zeppelins", limit=100, offset=INLINE_HITS)) == 0  # a thread's


async def test_a_search_of_common_words_is_searched_on_a_reader_thread(
    node: Node, make_agent: MakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A word in more than INLINE_MATCHES entries could hold the loop past its budget and be searched twice."""
    alice = await make_agent("alice")
    for content in ("zeppelins float", "zeppelins land", "airships float"):
        await node.entries.post(alice.agent_id, PostEntry("finding", "inform", content), None)
    await catch_up(node)
    monkeypatch.setattr(reads, "INLINE_MATCHES", 1)

    await node.reads.search(SearchQuery(q="airships"), agent=None)  # the index is seen serving once
    assert await inline_reads(node, SearchQuery(q="airships")) == 1
    assert await inline_reads(node, SearchQuery(q="zeppelins")) == 0  # two matches: straight to a thread
    assert await inline_reads(node, SearchQuery(q="zeppelins land")) == 1  # "land" is rare: the AND is cheap
    assert await inline_reads(node, SearchQuery(q="zep*")) == 0  # a prefix walks terms: a thread


async def search_until_served(server: Server, headers: dict[str, str], q: str) -> list[str]:
    """GET /v1/search?q= until the node stops answering 503 search_index_building and its answer is not `stale`
    (a search before the first catch-up since the start answers from the index as it is: docs/api.md,
    "Freshness"); the contents found."""
    async with aiohttp.ClientSession() as session:
        for _ in range(600):
            async with session.get(server.url + "/v1/search", params={"q": q}, headers=headers) as resp:
                body = await resp.json(content_type=None)
                if resp.status != 503:
                    assert resp.status == 200, body
                    if not body["stale"]:
                        return sorted(e["content"] for e in body["entries"])
                else:
                    assert body["code"] == "search_index_building" and int(resp.headers["Retry-After"]) >= 1
            await asyncio.sleep(0.05)
    raise AssertionError("the search index was never built")


_CREATED = re.compile(r"^CREATE (?:UNIQUE )?(TABLE|INDEX|TRIGGER) (\w+)", re.M)
_ADDED = re.compile(r"^ALTER TABLE (\w+) ADD COLUMN (\w+)", re.M)
_OTHER_SCHEMA_CHANGE = re.compile(r"^(?:CREATE|ALTER|DROP) ", re.M)
_REBUILT = re.compile(r"^ALTER TABLE (\w+)_new RENAME TO (\w+)", re.M)


def _rebuilds_only(sql: str) -> bool:
    """Whether a migration only rebuilds tables with the same columns (`X_new`, copied, renamed to `X`, its indexes
    and triggers made again: 0049's AUTOINCREMENT), which an older schema reads the same: nothing to take back."""
    rebuilt = {new for new, old in _REBUILT.findall(sql) if new == old}
    tables = {name for what, name in _CREATED.findall(sql) if what == "TABLE"}
    return bool(rebuilt) and tables == {f"{name}_new" for name in rebuilt}


def undo_migrations_after(conn: sqlite3.Connection, version: int) -> None:
    """Take back what the migrations numbered above `version` (after 0021) add: their tables, indexes, triggers and
    added columns, newest first. A migration that changes the schema in another way fails here loudly, so that whoever
    writes it teaches this helper how to take it back."""
    files = sorted(Path(db.__file__).parent.joinpath("migrations").glob("[0-9][0-9][0-9][0-9]_*.sql"))
    for path in reversed([f for f in files if int(f.name[:4]) > version]):
        sql = "\n".join(line.split("--", 1)[0] for line in path.read_text().splitlines())
        if _rebuilds_only(sql):
            continue
        created, added = _CREATED.findall(sql), _ADDED.findall(sql)
        assert len(_OTHER_SCHEMA_CHANGE.findall(sql)) == len(created) + len(added), f"cannot take back {path.name}"
        for what, name in reversed(created):  # first: an index on an added column must go before the column
            conn.execute(f'DROP {what} IF EXISTS "{name}"')
        for table, column in reversed(added):
            conn.execute(f'ALTER TABLE "{table}" DROP COLUMN "{column}"')


def as_before_fts5_left(data: Path) -> None:
    """Put a stopped node's store back as a node before migration 0021 left it: FTS5 table and trigger, schema 20,
    without what later migrations added, and no search index folder (a node upgraded from before the tantivy
    index)."""
    with contextlib.closing(sqlite3.connect(data / "bbs.db")) as conn:
        undo_migrations_after(conn, 21)
        conn.executescript(
            "CREATE VIRTUAL TABLE entries_fts USING fts5(content, tags, content='entries', content_rowid='id');"
            "CREATE TRIGGER entries_fts_insert AFTER INSERT ON entries BEGIN"
            " INSERT INTO entries_fts(rowid, content, tags) VALUES (new.id, new.content, new.tags); END;"
            "INSERT INTO entries_fts(entries_fts) VALUES('rebuild');"
            "PRAGMA user_version = 20;"
        )
    shutil.rmtree(data / FOLDER)


@pytest.mark.slow
async def test_a_served_node_answers_words_on_a_fresh_and_on_an_upgraded_store(tmp_path: Path) -> None:
    """A real `bbs serve`: on a new data folder, and again after an upgrade from a store with FTS5 (dropped at
    start, the index built from the entries); `bbs rebuild` and `bbs doctor` work on the upgraded store."""
    data = tmp_path / "node"
    bbs("init", "--data", str(data))
    agent = json.loads(bbs("agent", "create", "writer", "--data", str(data), "--json").stdout)
    headers = {"Authorization": f"Bearer {agent['api_key']}"}
    server = Server(data, free_port(), tmp_path / "serve.log")
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            for content in ("zeppelins float", "Zeppelin hangars", "kettles boil"):
                body = {"entry_type": "finding", "performative": "inform", "content": content}
                async with session.post(server.url + "/v1/entries", json=body, headers=headers) as resp:
                    assert resp.status == 201, await resp.text()
        assert await search_until_served(server, headers, "zeppelins") == ["zeppelins float"]
    finally:
        server.stop()
    as_before_fts5_left(data)
    await server.start()
    try:
        assert await search_until_served(server, headers, "zeppelin") == ["Zeppelin hangars"]
        assert await search_until_served(server, headers, "kettles") == ["kettles boil"]
    finally:
        server.stop()
    with contextlib.closing(sqlite3.connect(data / "bbs.db")) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] >= 21
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE 'entries_fts%'").fetchone()[0] == 0
    rebuilt = json.loads(bbs("rebuild", "--data", str(data)).stdout)
    assert rebuilt["projections_matched_log"] and rebuilt["search_index_entries"] == 3
    checks = {c["name"]: c["status"] for c in json.loads(bbs("doctor", "--data", str(data), "--json").stdout)}
    assert checks["search_index"] == "ok" and checks["projections"] == "ok" and "fts" not in checks
