"""The tantivy full-text index: a projection of the `entries` table in its own folder of the data directory.

Documents are entries, keyed by their address (`record_hash`, deleted by term before a version is added, so an
address shows the winner the node serves: node/store/equivocation.py) and carrying their local id (`seq`, a fast
field). Text is pre-tokenized by `analyzer.tokens` (FTS5 unicode61's rules) and indexed with tantivy's
whitespace tokenizer. One meta document records the highest entry id the index covers (`position`) and the
stamp (store epoch, analyzer and schema versions) it was built for; it is written in the same commit as the
documents it covers, so a crash never leaves the index claiming more than it holds.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tantivy

from node.search_index import segments
from node.search_index.analyzer import ANALYZER_VERSION, tokens
from node.search_index.query import Clause, as_clause, tantivy_clauses
from node.search_index.ranking import DEFAULT, Ranking, Span
from node.search_index.segments import Snapshot

SCHEMA_VERSION = 2  # 2: the `space` field (issue 37)
PUBLIC_SPACE = "public"  # the `space` term of a public entry (a space id is 64 hex: never this word)
FOLDER = "search-index"
DAMAGED_FOLDER = FOLDER + ".damaged"  # the last damaged index set aside (node/search_index/indexer.set_aside)
WRITER_HEAP_BYTES = 32_000_000  # tantivy's writer buffer: modest, for a small machine (docs/decisions.md)
_META = "position"  # the `meta` term of the one meta document
SHOULD = tantivy.Occur.Should


def is_panic(exc: BaseException) -> bool:
    """Whether `exc` is a panic inside tantivy (a damaged segment read through): pyo3's PanicException derives
    from BaseException, so `except Exception` lets it through."""
    return type(exc).__name__ == "PanicException"


def is_fault(exc: BaseException) -> bool:
    """Whether `exc` is an error of the index's work (an Exception, or a tantivy panic), not a cancellation or an
    exit, which are raised on."""
    return isinstance(exc, Exception) or is_panic(exc)


def stamp_for(epoch: str) -> str:
    """What an index must be stamped with to serve a store of this epoch."""
    return f"{epoch}/analyzer-{ANALYZER_VERSION}/schema-{SCHEMA_VERSION}"


def _schema() -> tantivy.Schema:
    b = tantivy.SchemaBuilder()
    b.add_integer_field("seq", stored=True, indexed=True, fast=True)
    b.add_text_field("address", tokenizer_name="raw", index_option="basic")
    b.add_text_field("content", tokenizer_name="whitespace", index_option="position")
    b.add_text_field("tags", tokenizer_name="whitespace", index_option="position")
    b.add_text_field("tag", tokenizer_name="raw", index_option="basic")
    for name in ("entry_type", "performative", "author", "truth_state"):
        b.add_text_field(name, tokenizer_name="raw", index_option="basic")
    b.add_integer_field("synthetic", indexed=True)
    b.add_text_field("space", tokenizer_name="raw", index_option="basic")
    b.add_float_field("confidence", indexed=True, fast=True)
    b.add_integer_field("created_ms", indexed=True, fast=True)
    b.add_text_field("meta", tokenizer_name="raw", index_option="basic")
    b.add_integer_field("position", stored=True)
    b.add_text_field("stamp", stored=True, tokenizer_name="raw", index_option="basic")
    return b.build()


SCHEMA = _schema()


@dataclass(frozen=True)
class Row:
    """What the index holds of one entry (a row of `entries`: node/search_index/store.py `ROW_COLUMNS`)."""

    seq: int
    record_hash: str
    content: str
    tags: str  # the JSON text of the tags column, as FTS5 indexes it
    entry_type: str
    performative: str
    author_id: str
    truth_state: str
    confidence: float
    created_ms: int
    space: str | None = None  # the space it was posted into; None: public


@dataclass(frozen=True)
class Filters:
    """A search's filters, as the index can apply them (the same meaning as node/entries/store.py search)."""

    entry_type: Sequence[str] = ()
    performative: Sequence[str] = ()
    author: Sequence[str] = ()
    truth_state: Sequence[str] = ()
    tags: Sequence[str] = ()  # NFC, as stored
    min_confidence: float | None = None
    since_ms: int | None = None
    include_synthetic: bool = False
    # The spaces whose entries may match (docs/spaces.md, the read rule: `node.spaces.sight.Sight`), public entries
    # as PUBLIC_SPACE; None: no such filter. `hidden_spaces`: spaces whose entries may not match. Filters of the
    # index itself, so pages stay full (indexer.space_filter picks the cheaper of the two for a reader).
    spaces: Sequence[str] | None = (PUBLIC_SPACE,)
    hidden_spaces: Sequence[str] = ()


@dataclass(frozen=True)
class Hits:
    """One page of a search: entry ids in rank order, and the highest entry id the index covered as it answered."""

    ids: list[int]
    position: int


def _document(row: Row) -> tantivy.Document:
    doc = tantivy.Document()
    doc.add_integer("seq", row.seq)
    doc.add_text("address", row.record_hash)
    doc.add_text("content", " ".join(tokens(row.content)))
    doc.add_text("tags", " ".join(tokens(row.tags)))
    for tag in json.loads(row.tags):
        doc.add_text("tag", tag)
    doc.add_text("entry_type", row.entry_type)
    doc.add_text("performative", row.performative)
    doc.add_text("author", row.author_id)
    doc.add_text("truth_state", row.truth_state)
    doc.add_integer("synthetic", 1 if row.truth_state == "simulation" else 0)
    doc.add_text("space", row.space or PUBLIC_SPACE)
    doc.add_float("confidence", float(row.confidence))
    doc.add_integer("created_ms", row.created_ms)
    return doc


def _meta_document(position: int, stamp: str) -> tantivy.Document:
    doc = tantivy.Document()
    doc.add_text("meta", _META)
    doc.add_integer("position", position)
    doc.add_text("stamp", stamp)
    return doc


def _filter_clauses(f: Filters) -> list[tantivy.Query]:
    out = []
    for field, values in (
        ("entry_type", f.entry_type),
        ("performative", f.performative),
        ("author", f.author),
        ("truth_state", f.truth_state),
        ("tag", f.tags),
    ):
        if values:
            out.append(tantivy.Query.term_set_query(SCHEMA, field, list(dict.fromkeys(values))))
    if f.min_confidence is not None:
        out.append(
            tantivy.Query.range_query(SCHEMA, "confidence", tantivy.FieldType.Float, lower_bound=f.min_confidence)
        )
    if f.since_ms is not None:
        out.append(tantivy.Query.range_query(SCHEMA, "created_ms", tantivy.FieldType.Integer, lower_bound=f.since_ms))
    if not f.include_synthetic:
        out.append(tantivy.Query.term_query(SCHEMA, "synthetic", 0))
    if f.spaces is not None:  # a union of term queries, evaluated lazily (a term set query visits every posting)
        terms = [tantivy.Query.term_query(SCHEMA, "space", space) for space in sorted(set(f.spaces))]
        out.append(terms[0] if len(terms) == 1 else tantivy.Query.boolean_query([(SHOULD, t) for t in terms]))
    return out


def _excluded(f: Filters) -> list[tuple[tantivy.Occur, tantivy.Query]]:
    """The MustNot clauses of `f.hidden_spaces`."""
    return [(tantivy.Occur.MustNot, tantivy.Query.term_query(SCHEMA, "space", s)) for s in sorted(set(f.hidden_spaces))]


class SearchIndex:
    """One data folder's index: the only writer of it in this process (tantivy's lock file keeps others out).

    Writes (`apply`) come from one indexing task at a time; searches may run on any thread.
    """

    def __init__(self, path: Path, epoch: str, writable: bool = True) -> None:
        self.path = path
        self.stamp = stamp_for(epoch)
        self._lock = threading.Lock()
        # Whether searches are answered: set once the index was seen near the log's head (indexer.page), cleared
        # by `reset`; a search while it is unset is answered 503 search_index_building.
        self.serving = False
        self.damaged = False  # a search or a scrape hit a panic reading it: the indexer rebuilds it (indexer.run)
        # Searches take the searcher of the last reload and the position it covers from `_view` (`_current`):
        # the meta document is read once per index commit, not once per search. Only this writer commits, and
        # it reloads after each commit, counted in `_generation`; an index opened read-only (another process
        # writes it) asks tantivy each time.
        self._generation = 0
        self._view: tuple[int, tantivy.Searcher, int] | None = None
        path.mkdir(parents=True, exist_ok=True)
        self.index = tantivy.Index(SCHEMA, path=str(path), reuse=True)
        self.writer: tantivy.IndexWriter | None = None
        if writable:
            self.writer = self.index.writer(heap_size=WRITER_HEAP_BYTES, num_threads=1)
            if self.state()[1] != self.stamp:  # new, or built for another store or analyzer: start again
                self.reset()

    def close(self) -> None:
        """Release the writer (and its lock file)."""
        with self._lock:
            writer, self.writer = self.writer, None  # dropped even when it fails to finish (a folder gone)
            if writer is not None:
                writer.wait_merging_threads()  # consumes the writer

    def state(self, searcher: tantivy.Searcher | None = None) -> tuple[int, str | None]:
        """(position covered, stamp) as `searcher` (a fresh one by default) sees the index; (0, None) if unset."""
        searcher = searcher or self.index.searcher()
        hits = searcher.search(tantivy.Query.term_query(SCHEMA, "meta", _META), limit=1, count=False).hits
        if not hits:
            return 0, None
        doc = searcher.doc(hits[0][1])
        position, stamp = doc.get_first("position"), doc.get_first("stamp")
        return (0 if position is None else int(position)), (None if stamp is None else str(stamp))

    def _current(self) -> tuple[tantivy.Searcher, int]:
        """A searcher of the index as it stands, and the position it covers (`state`), kept until the next reload
        by this writer. A pair read before a reload is still a consistent pair: a search never reports more than
        its searcher sees."""
        view = self._view
        if view is not None and view[0] == self._generation:
            return view[1], view[2]
        generation = self._generation  # read before the searcher: a reload meanwhile makes this view stale
        searcher = self.index.searcher()
        position = self.state(searcher)[0]
        if self.writer is not None:
            self._view = (generation, searcher, position)
        return searcher, position

    def few_matches(self, clauses: Sequence[Clause], limit: int) -> bool:
        """Whether the clauses' AND matches at most `limit` documents by the term dictionary's counts (`bound`):
        no search, yet it bounds how long the index's top-k takes."""
        bound = self.bound(clauses)
        return bound is not None and bound <= limit

    def bound(self, clauses: Sequence[Clause], searcher: tantivy.Searcher | None = None) -> int | None:
        """At most how many documents the clauses' AND matches: the count of the rarest token of its rarest clause
        (content and tags counted apart), a term-dictionary look-up per token; None when no clause can be
        counted (a prefix clause is not: its expansion walks terms). Deleted versions still count until merged."""
        searcher = searcher or self._current()[0]
        counts = [
            min(searcher.doc_freq("content", token) + searcher.doc_freq("tags", token) for token in clause.tokens)
            for clause in clauses
            if clause.tokens and not clause.prefix
        ]
        return min(counts) if counts else None

    def documents(self) -> int:
        """Entries in the index (the meta document not counted)."""
        searcher = self.index.searcher()
        return searcher.num_docs - (1 if self.state(searcher)[1] is not None else 0)

    def seq_of(self, address: str) -> int | None:
        """The entry id the index holds for an address, or None."""
        searcher = self.index.searcher()
        hits = searcher.search(tantivy.Query.term_query(SCHEMA, "address", address), limit=1, count=False).hits
        if not hits:
            return None
        value = searcher.fast_field_values("seq", [hits[0][1]])[0]
        return None if value is None else int(value)

    def reset(self) -> None:
        """Empty the index (stamped, covering nothing), as before a rebuild."""
        if self.writer is None:
            raise RuntimeError("the index was opened read-only")
        with self._lock:
            self.serving = False
            self.writer.delete_all_documents()
            self.writer.add_document(_meta_document(0, self.stamp))
            self.writer.commit()
            self.index.reload()
            self._generation += 1

    def apply(self, rows: Sequence[Row], position: int, removed: Sequence[str] = ()) -> None:
        """Index these entries (replacing any document of the same address), delete the documents of `removed`
        addresses, and record `position`, in one commit."""
        if self.writer is None:
            raise RuntimeError("the index was opened read-only")
        with self._lock:
            for address in removed:
                self.writer.delete_documents_by_term("address", address)
            for row in rows:
                self.writer.delete_documents_by_term("address", row.record_hash)
                self.writer.add_document(_document(row))
            self.writer.delete_documents_by_term("meta", _META)
            self.writer.add_document(_meta_document(position, self.stamp))
            self.writer.commit()
            self.index.reload()
            self._generation += 1

    def rewrite(self, rows: Sequence[Row], removed: Sequence[str] = ()) -> None:
        """Add these entries' documents again (each replacing its address's), keeping the position the index covers:
        a step of a rewrite of every document. Once every live document of a segment was added again the segment
        holds only deleted documents, and tantivy drops it at the commit, with the terms and stored values of the
        deleted documents it held (tantivy-py 0.27 has no call to merge chosen segments: node/redaction/scrub.py
        rewrites the documents of the segments that hold a dropped entry's, found by `segments`).
        The documents of `removed` addresses are deleted in the same commit."""
        if self.writer is None:
            raise RuntimeError("the index was opened read-only")
        with self._lock:
            position = self.state()[0]
            for address in removed:
                self.writer.delete_documents_by_term("address", address)
            for row in rows:
                self.writer.delete_documents_by_term("address", row.record_hash)
                self.writer.add_document(_document(row))
            self.writer.delete_documents_by_term("meta", _META)
            self.writer.add_document(_meta_document(position, self.stamp))
            self.writer.commit()
            self.index.reload()
            self._generation += 1
            self._view = None  # a searcher of the dropped segments keeps their files: let it go before collecting
            self.writer.garbage_collect_files()

    def segments(self) -> Snapshot | None:
        """The committed segments with a searcher of exactly them (node/search_index/segments.py), or None."""
        with self._lock:
            return segments.snapshot(self.index, self.path)

    def doc_freq(self, field_name: str, term: str) -> int:
        """Documents holding `term` in `field_name`, deleted documents still in a segment included."""
        return int(self.index.searcher().doc_freq(field_name, term))

    def search(
        self,
        words: Sequence[str | Clause],
        filters: Filters,
        limit: int,
        offset: int,
        ranking: Ranking = DEFAULT,
    ) -> Hits:
        """Entry ids of one page in `ranking`'s order (best BM25 first, ties newest first, by default), as the index
        stands (its position with them). Exact whatever the segments: node/search_index/ranking.py.

        `words` are the clauses of node/search_index/query.py (a plain string is a word: its tokens, no syntax).
        """
        searcher, position = self._current()
        clauses = tantivy_clauses(words, SCHEMA, searcher)
        if clauses is None:
            return Hits([], position)
        parts: list[tuple[tantivy.Occur, tantivy.Query]] = [(tantivy.Occur.Must, c) for c in clauses]
        parts += [(tantivy.Occur.Must, tantivy.Query.const_score_query(c, 0.0)) for c in _filter_clauses(filters)]
        parts += _excluded(filters)
        query = tantivy.Query.boolean_query(parts)
        bound = self.bound([as_clause(w) for w in words], searcher)
        span = Span(position + 1, bound) if position and bound is not None else None
        return Hits(ranking.page(searcher, SCHEMA, query, offset, limit, span), position)


def remove(data_root: Path) -> None:
    """Delete a data folder's index (it is rebuilt from the log when next opened)."""
    shutil.rmtree(data_root / FOLDER, ignore_errors=True)
