"""What each segment of the search index holds, deleted documents included: what the redaction scrub reads to rewrite
only the segments that still hold a dropped entry's terms (node/redaction/scrub.py, docs/decisions.md record 71).

tantivy-py 0.27 has no call to list segments or to merge chosen ones, but its searcher reads any document by
address (segment ordinal, document id), deleted or not, and numbers segments in the order of the index's
`meta.json` (tantivy's own record of the committed segments: `max_doc` and `deletes.num_deleted_docs` of each). A
snapshot pairs a searcher with that file read before and after it was taken: both reads equal and the counts
agreeing, the searcher holds exactly those segments (a background merge that ends between them changes the file,
and the snapshot is tried again). An unexpected file is no snapshot (None): the caller rewrites every document.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import tantivy

META_FILE = "meta.json"
TRIES = 5  # snapshots attempted while background merges keep changing the segments


@dataclass(frozen=True)
class Segment:
    """One committed segment: its ordinal in the snapshot's searcher, its documents (deleted ones included) and
    how many of them are deleted."""

    ord: int
    max_doc: int
    deleted: int


@dataclass(frozen=True)
class Snapshot:
    """The index's segments and a searcher holding exactly them."""

    searcher: tantivy.Searcher
    segments: list[Segment]

    def ids(self, segment: Segment, start: int, stop: int) -> list[int | None]:
        """The `seq` (entry id) of the segment's documents `start` to `stop` (deleted ones included; None: the meta
        document, which has none)."""
        addresses = [tantivy.DocAddress(segment.ord, doc) for doc in range(start, min(stop, segment.max_doc))]
        return [None if v is None else int(v) for v in self.searcher.fast_field_values("seq", addresses)]


def committed(path: Path) -> list[tuple[int, int]] | None:
    """(max_doc, deleted documents) of each segment listed in the index folder's meta.json, in its order; None when
    the file cannot be read or is not shaped as expected."""
    try:
        meta = json.loads((path / META_FILE).read_text("utf-8"))
        out = []
        for segment in meta["segments"]:
            deletes = segment.get("deletes") or {}
            out.append((int(segment["max_doc"]), int(deletes.get("num_deleted_docs", 0))))
        return out
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def snapshot(index: tantivy.Index, path: Path) -> Snapshot | None:
    """A searcher of the index's committed segments with what each holds (`Snapshot`), or None when the segments
    could not be told (meta.json unreadable, or changing under every attempt)."""
    for _ in range(TRIES):
        before = committed(path)
        index.reload()
        searcher = index.searcher()
        after = committed(path)
        if before is None or after is None:
            return None
        if before != after or searcher.num_segments != len(before):
            continue
        if searcher.num_docs != sum(max_doc - deleted for max_doc, deleted in before):
            continue
        return Snapshot(searcher, [Segment(i, m, d) for i, (m, d) in enumerate(before)])
    return None
