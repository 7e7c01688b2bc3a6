"""Reads: entries by id or hash with their neighbourhood, and search. The SQL lives in node/queries.py."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable

import msgspec

from node import agent_refs, queries
from node.db import Database
from node.errors import InvalidInput
from node.search_index import indexer
from node.search_index.index import SearchIndex
from node.wire.api import LinkOut, ReadQuery, ReadResult, SearchQuery, SearchResult

# A search with words whose page ends within this many hits runs on the event loop (the index's top-k, block-max
# WAND, costs about a millisecond even for a word in every fifth entry of a million); a deeper page (tantivy
# collects and the node sorts `offset + limit` hits) runs on a reader thread, where tantivy releases the GIL.
INLINE_HITS = 1_000


class Reads:
    """Reading one node's entries: on the event loop when quick (Database.read); searches with words from the index."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.index: SearchIndex | None = None  # the tantivy index, when the node opened one (node/search_index/)
        self.answered = {"index": 0, "sql": 0}  # searches since start: with words (index), by filters alone (sql)
        # Until the index covers a given entry id (bounded): set by the app's indexing task (node/background.py).
        self.wait_for_index: Callable[[int], Awaitable[None]] | None = None

    async def read(self, refs: list[str], q: ReadQuery) -> ReadResult:
        """Entries by id or hash with their neighbourhood."""
        return await self.db.read(lambda c: read(c, refs, q), quick=True)

    async def search(self, q: SearchQuery) -> SearchResult:
        """A page of entries matching the query, with their neighbourhood when `hops` asks for it."""
        since_ms = queries.parse_since(q.since, "$.since")
        if not agent_refs.all_dids(q.author):  # authors named by local name
            q = msgspec.structs.replace(
                q, author=await self.db.read(lambda c: agent_refs.resolve_all(c, q.author, "$.author"), quick=True)
            )
        words = queries.search_words(q.q) if q.q else []
        if q.q is not None and q.q.strip() and not words:
            raise InvalidInput("q has no searchable words", field="$.q", code="invalid_query")
        index = self.index
        if words:  # refused at once while the index is built, not after waiting for it
            await self.db.read(lambda c: indexer.ensure_serving(c, index), quick=True)
            if self.wait_for_index is not None:
                await self.wait_for_index(await self.db.read(indexer.highest_entry, quick=True))
        quick = q.offset + q.limit <= INLINE_HITS or not words
        result = await self.db.read(lambda c: search(c, q, since_ms, index), quick=quick)
        self.answered["index" if words else "sql"] += 1
        return result


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


def search(conn: sqlite3.Connection, q: SearchQuery, since_ms: int | None, index: SearchIndex | None) -> SearchResult:
    """`Reads.search` on one connection: the page (from `index` when the query has words), then its neighbourhood.

    Raises SearchIndexBuilding when the query has words and the index cannot answer yet (indexer.page).
    """
    if q.q and queries.search_words(q.q):
        hits = indexer.page(conn, index, q, since_ms)
        by_id = {e.id: e for e in queries.entries_by_ids(conn, hits.ids)}
        # An id the index still names may be gone from this (newer) read: an equivocated address's loser.
        page = [by_id[i] for i in hits.ids if i in by_id]
        full = len(hits.ids) == q.limit
    else:
        page = queries.search(conn, q, since_ms)
        full = len(page) == q.limit
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
        next_offset=q.offset + q.limit if full else None,
        truncated=truncated,
    )
