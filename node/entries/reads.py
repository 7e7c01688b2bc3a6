"""Reads: entries by id or hash with their neighbourhood, and search. The SQL lives in node/entries/store.py."""

from __future__ import annotations

import msgspec

from node.agents import refs as agent_refs
from node.entries import queries, store
from node.errors import InvalidInput, NotFound
from node.redaction import effects
from node.redaction import store as redaction_store
from node.search_index import freshness, indexer, query, snippets
from node.search_index.index import SearchIndex
from node.search_index.indexer import Indexer
from node.search_index.query import Clause
from node.spaces.sight import Sight, Viewer
from node.spaces.store import sight_of
from node.store.conn import Conn
from node.store.db import Database
from wire.api import LinkOut, ReadQuery, ReadResult, SearchQuery, SearchResult

# A search with words is tried on the event loop only when its page ends within INLINE_HITS hits and one of its
# words is in at most INLINE_MATCHES entries (a term-dictionary look-up): the index's top-k then takes well under
# a millisecond. Otherwise it goes to a reader thread at once (tantivy releases the GIL): a quick read that
# overruns the inline budget is run again on a thread, and the index's work would be done twice.
INLINE_HITS = 1_000
INLINE_MATCHES = 5_000


class Reads:
    """Reading one node's entries: on the event loop when quick (Database.read); searches with words from the index."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.index: SearchIndex | None = None  # the tantivy index, when the node opened one (node/search_index/)
        self.answered = {"index": 0, "sql": 0}  # searches since start: with words (index), by filters alone (sql)
        self.indexer: Indexer | None = None  # the task keeping the index caught up, while the node serves
        self.fresh_timeout_s = 2.0  # how long a search waits for the index at most (`search_fresh_timeout_ms`)
        self.fresh_waits = {"none": 0, "reached": 0, "timed_out": 0}  # searches that had to see newer entries

    async def read(self, refs: list[str], q: ReadQuery, viewer: Viewer) -> ReadResult:
        """Entries by id or hash with their neighbourhood, as `viewer` (an agent's did; None: the node's operator)
        may read them (`node.spaces.store.sight_of`): an entry of a space it may not read is missing."""
        return await self.db.read(lambda c: read(c, refs, q, sight_of(c, viewer)), quick=True)

    async def search(self, q: SearchQuery, agent: Viewer) -> SearchResult:
        """A page of entries matching the query that `agent` may read (`node.spaces.store.sight_of`; None: the
        node's operator), with their neighbourhood when `hops` asks for it.

        `agent` is the caller (None for the admin): a search with words waits for the index to cover its newest
        entry (and every entry when `q.fresh`), up to `fresh_timeout_s`. A search that needs no wait is one read:
        what it must see is looked up in the search's own read, and only a wait is followed by a second one."""
        since_ms = queries.parse_since(q.since, "$.since")
        if not agent_refs.all_dids(q.author):  # authors named by local name
            q = msgspec.structs.replace(
                q, author=await self.db.read(lambda c: agent_refs.resolve_all(c, q.author, "$.author"), quick=True)
            )
        clauses = query.parse(q.q) if q.q else []  # a bad prefix is a 422
        if q.q is not None and q.q.strip() and not clauses:
            raise InvalidInput("q has no searchable words", field="$.q", code="invalid_query")
        index = self.index
        if clauses and (index is None or not index.serving):  # refused at once while the index is built
            await self.db.read(lambda c: indexer.ensure_serving(c, index), quick=True)
        # On the event loop only a shallow page of a rare enough word (INLINE_HITS, INLINE_MATCHES above).
        quick = not clauses or (
            q.offset + q.limit <= INLINE_HITS and index is not None and index.few_matches(clauses, INLINE_MATCHES)
        )
        worker = self.indexer if clauses else None

        def attempt(c: Conn) -> tuple[int | None, int | None, SearchResult | None]:
            """(entry id to wait for, position the index covers, the result): the search as the index stands,
            unless it must first see newer entries (docs/api.md, "Search"): with `q.fresh`, or when `agent`'s
            newest entry is not yet indexed, the highest entry id of this read; then no result. Changes nothing:
            a read may run twice (Database.read)."""
            sight = sight_of(c, agent)
            if worker is None:  # no words, or no index task: no position to report
                return None, None, search(c, q, since_ms, index, sight, clauses)
            covered = worker.position.position  # read before the index is searched: it covers at least this
            if q.fresh or isinstance(agent, str):
                highest, own = freshness.targets(c, agent if isinstance(agent, str) else None)
                if (q.fresh or own > covered) and highest > covered:
                    return highest, covered, None
            return None, covered, search(c, q, since_ms, index, sight, clauses)

        target, covered, result = await self.db.read(attempt, quick=quick)
        stale = False
        if worker is not None and target is not None:  # the index must first cover `target`: wait, read again
            reached = await worker.reach(target, self.fresh_timeout_s)
            self.fresh_waits["reached" if reached else "timed_out"] += 1
            stale, covered = not reached, worker.position.position
            result = await self.db.read(
                lambda c: search(c, q, since_ms, index, sight_of(c, agent), clauses), quick=quick
            )
        elif worker is not None and q.fresh:
            self.fresh_waits["none"] += 1
        assert result is not None
        self.answered["index" if clauses else "sql"] += 1
        if covered is not None:
            result = msgspec.structs.replace(result, indexed_through=covered, stale=stale)
        return result


def read(conn: Conn, refs: list[str], q: ReadQuery, sight: Sight) -> ReadResult:
    """`Reads.read` on one connection, of what `sight` sees."""
    unique = list(dict.fromkeys(refs))  # a ref given twice is read (or missing) once
    held = store.held_refs(conn, unique, sight)
    missing = [ref for ref in unique if ref not in held]
    # a hidden simulation is no starting point: its links would show it
    seeds = [h.record_hash for h in held.values() if q.include_synthetic or not h.synthetic]
    hashes, links, truncated = store.traverse(
        conn,
        seeds,
        hops=q.hops,
        link_types=q.link_types,
        direction=q.direction,
        include_links=q.include_links,
        sight=sight,
        include_synthetic=q.include_synthetic,
    )
    entries = store.entries_by_hashes(conn, hashes, q.include_synthetic, sight)
    # a redacted address answers its tombstone, asked for or named by a link (docs/api.md, "Redaction")
    named = {*missing, *(e for link in links for e in (link.source, link.target))} - {e.record_hash for e in entries}
    redacted = [
        effects.tombstone_out(row)
        for row in (redaction_store.tombstones(conn, named) if named else [])
        if sight.sees(row.space)
    ]
    gone = {t.hash for t in redacted}
    return ReadResult(
        entries=entries,
        links=links,
        missing=[ref for ref in missing if ref not in gone],
        truncated=truncated,
        redacted=redacted,
    )


def search(
    conn: Conn,
    q: SearchQuery,
    since_ms: int | None,
    index: SearchIndex | None,
    sight: Sight,
    clauses: list[Clause] | None = None,
) -> SearchResult:
    """`Reads.search` on one connection: the page (from `index` when the query has words), then its neighbourhood,
    of what `sight` sees (404 `unknown_space` for a space of `q.space` it does not).

    `clauses` are `q.q` parsed (parsed here when not given). Raises SearchIndexBuilding when the query has words
    and the index cannot answer yet (indexer.page).
    """
    if clauses is None:
        clauses = query.parse(q.q) if q.q else []
    for i, space in enumerate(q.space):
        if not sight.sees(space):
            raise NotFound("no such space here", field=f"$.space[{i}]", code="unknown_space")
    if clauses:
        hits = indexer.page(conn, index, q, since_ms, sight, clauses)
        by_id = {e.id: e for e in store.entries_by_ids(conn, hits.ids, sight)}
        # An id the index still names may be gone from this (newer) read: an equivocated address's loser.
        page = [by_id[i] for i in hits.ids if i in by_id]
        full = len(hits.ids) == q.limit
    else:
        page = store.search(conn, q, since_ms, sight)
        full = len(page) == q.limit
    links: list[LinkOut] = []
    truncated = False
    entries = page
    if q.hops > 0:
        hashes, links, truncated = store.traverse(
            conn,
            [e.record_hash for e in page],
            hops=q.hops,
            link_types=q.link_types,
            direction=q.direction,
            include_links=True,
            sight=sight,
            include_synthetic=q.include_synthetic,
        )
        found = {e.record_hash for e in page}
        extra = [
            e for e in store.entries_by_hashes(conn, hashes, q.include_synthetic, sight) if e.record_hash not in found
        ]
        entries = page + extra
    return SearchResult(
        entries=entries,
        links=links,
        limit=q.limit,
        offset=q.offset,
        next_offset=q.offset + q.limit if full else None,
        truncated=truncated,
        snippets={e.record_hash: snippets.snippet(e.content, clauses) for e in page} if clauses else {},
    )
