"""Reads: entries by id or hash with their neighbourhood, and search. The SQL lives in node/queries.py."""

from __future__ import annotations

import sqlite3
import time

import msgspec

from node import agent_refs, queries
from node.db import Database
from node.errors import InvalidInput
from node.search_index import freshness, indexer, query, snippets
from node.search_index.index import SearchIndex
from node.search_index.indexer import Indexer
from node.wire.api import EntryOut, LinkOut, ReadQuery, ReadResult, SearchQuery, SearchResult, Snippet


class Reads:
    """Reading one node's entries: on the event loop when quick (Database.read), searches by their words."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.heavy_words = queries.HeavyWords()  # search words whose searches run on a reader thread
        self.index: SearchIndex | None = None  # the tantivy index, when the node opened one (node/search_index/)
        self.answered = {"index": 0, "sql": 0}  # searches with words, by the path that answered them
        self.indexer: Indexer | None = None  # the task keeping the index caught up, while the node serves
        self.fresh_timeout_s = 2.0  # how long a search waits for the index at most (`search_fresh_timeout_ms`)
        self.fresh_waits = {"none": 0, "reached": 0, "timed_out": 0}  # searches that had to see newer entries

    async def read(self, refs: list[str], q: ReadQuery) -> ReadResult:
        """Entries by id or hash with their neighbourhood."""
        return await self.db.read(lambda c: read(c, refs, q), quick=True)

    async def search(self, q: SearchQuery, agent: str | None = None) -> SearchResult:
        """A page of entries matching the query, with their neighbourhood when `hops` asks for it.

        `agent` is the caller (None for the admin): a search with words waits for the index to cover its newest
        entry (and every entry when `q.fresh`), up to `fresh_timeout_s`."""
        since_ms = queries.parse_since(q.since, "$.since")
        if not agent_refs.all_dids(q.author):  # authors named by local name
            q = msgspec.structs.replace(
                q, author=await self.db.read(lambda c: agent_refs.resolve_all(c, q.author, "$.author"), quick=True)
            )
        if q.q is not None and q.q.strip() and queries.fts_query(q.q) is None:
            raise InvalidInput("q has no searchable words", field="$.q", code="invalid_query")
        clauses = query.parse(q.q) if q.q else []  # a bad prefix is a 422 whichever path answers
        # On the event loop unless its words made earlier searches hold the loop too long (queries.HeavyWords)
        # or it has a prefix (expanding one walks the index's term dictionary: docs/decisions.md).
        words = queries.search_words(q.q) if q.q else []
        quick = not self.heavy_words.any_of(words) and not any(c.prefix for c in clauses)
        covered = await self._freshen(q, agent) if words else None
        started = time.perf_counter()
        index = self.index
        paths: list[str] = []  # which path answered, per attempt (a quick read may run again on a reader thread)
        result = await self.db.read(lambda c: search(c, q, since_ms, index, paths), quick=quick)
        if paths:
            self.answered[paths[-1]] += 1
        if quick and words:
            self.heavy_words.observe(words, overran=time.perf_counter() - started > self.db.inline_budget_s)
        if covered is not None:
            result = msgspec.structs.replace(result, indexed_through=covered[0], stale=covered[1])
        return result

    async def _freshen(self, q: SearchQuery, agent: str | None) -> tuple[int, bool] | None:
        """Wait when the search must see newer entries than the index covers (docs/api.md, "Search"): with
        `q.fresh`, or when `agent`'s newest entry is not yet indexed, for the highest entry id at this moment.

        Returns (the entry id the index covers at least, whether a wait ran out), None without an index task.
        """
        worker = self.indexer
        if worker is None:
            return None
        if q.fresh or agent is not None:
            highest, own = await self.db.read(lambda c: freshness.targets(c, agent), quick=True)
            if q.fresh or own > worker.position.position:
                if highest <= worker.position.position:
                    self.fresh_waits["none"] += 1
                    return worker.position.position, False
                reached = await worker.reach(highest, self.fresh_timeout_s)
                self.fresh_waits["reached" if reached else "timed_out"] += 1
                return worker.position.position, not reached
        return worker.position.position, False


def read(conn: sqlite3.Connection, refs: list[str], q: ReadQuery) -> ReadResult:
    """`Reads.read` on one connection."""
    seeds: list[str] = []
    missing: list[str] = []
    for ref in dict.fromkeys(refs):  # a ref given twice is read (or missing) once
        record_hash, entry_id = queries.resolve_ref(conn, ref)
        if entry_id is None or record_hash is None:
            missing.append(ref)
        else:
            seeds.append(record_hash)
    if not q.include_synthetic:  # a hidden simulation is no starting point: its links would show it
        hidden = queries.synthetic_among(conn, seeds)
        seeds = [h for h in seeds if h not in hidden]
    hashes, links, truncated = queries.traverse(
        conn,
        seeds,
        hops=q.hops,
        link_types=q.link_types,
        direction=q.direction,
        include_links=q.include_links,
        include_synthetic=q.include_synthetic,
    )
    entries = queries.entries_by_hashes(conn, hashes, q.include_synthetic)
    return ReadResult(entries=entries, links=links, missing=missing, truncated=truncated)


def search(
    conn: sqlite3.Connection,
    q: SearchQuery,
    since_ms: int | None,
    index: SearchIndex | None = None,
    paths: list[str] | None = None,
) -> SearchResult:
    """`Reads.search` on one connection: the page (from `index` when it can answer), then its neighbourhood.

    `paths` hears which path answered a search with words: "index" or "sql".
    """
    page = _indexed_page(conn, index, q, since_ms)
    if paths is not None and q.q:
        paths.append("sql" if page is None else "index")
    if page is None:
        page = queries.search(conn, q, since_ms)
    links: list[LinkOut] = []
    truncated = False
    entries = page
    if q.hops > 0:
        hashes, links, truncated = queries.traverse(
            conn,
            [e.record_hash for e in page],
            hops=q.hops,
            link_types=q.link_types,
            direction=q.direction,
            include_links=True,
            include_synthetic=q.include_synthetic,
        )
        found = {e.record_hash for e in page}
        extra = [e for e in queries.entries_by_hashes(conn, hashes, q.include_synthetic) if e.record_hash not in found]
        entries = page + extra
    return SearchResult(
        entries=entries,
        links=links,
        limit=q.limit,
        offset=q.offset,
        next_offset=q.offset + q.limit if len(page) == q.limit else None,
        truncated=truncated,
        snippets=_snippets(page, q.q),
    )


def _snippets(page: list[EntryOut], q: str | None) -> dict[str, Snippet]:
    """Each hit's highlighted snippet, by record hash, when the search has words."""
    clauses = query.parse(q) if q else []
    if not clauses:
        return {}
    return {e.record_hash: snippets.snippet(e.content, clauses) for e in page}


def _indexed_page(
    conn: sqlite3.Connection, index: SearchIndex | None, q: SearchQuery, since_ms: int | None
) -> list[EntryOut] | None:
    """The page from the search index, in its order; None when the index cannot answer (the SQL path does)."""
    if index is None:
        return None
    ids = indexer.page(conn, index, q, since_ms)
    if ids is None:
        return None
    by_id = {e.id: e for e in queries.entries_by_ids(conn, ids)}
    if len(by_id) != len(ids):  # an entry the index names is gone from this read: let SQL answer
        return None
    return [by_id[i] for i in ids]
