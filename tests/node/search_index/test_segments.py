"""node.search_index.segments: a snapshot names each committed segment with its documents, deleted ones included, in
the searcher's order; an unreadable meta.json is no snapshot."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.search_index import segments
from node.search_index.index import Row, SearchIndex


def row(seq: int, content: str) -> Row:
    return Row(seq, f"h{seq}", content, "[]", "finding", "inform", "did:key:a", "fact", 0.5, 1000 * seq)


@pytest.fixture
def index(tmp_path: Path) -> Iterator[SearchIndex]:
    ix = SearchIndex(tmp_path / "search-index", "epoch-1")
    yield ix
    ix.close()


def test_a_snapshot_lists_each_segment_with_its_documents_deleted_ones_included(index: SearchIndex) -> None:
    for first in (1, 11, 21):  # three commits of ten: three segments (tantivy merges eight at a time)
        index.apply([row(s, f"word{s} common") for s in range(first, first + 10)], first + 9)
    index.apply([], 30, removed=["h15"])  # deleted, still in its segment
    snap = index.segments()
    assert snap is not None
    assert snap.searcher.num_segments == len(snap.segments)
    held = {}
    for segment in snap.segments:
        ids = snap.ids(segment, 0, segment.max_doc)
        assert len(ids) == segment.max_doc
        held[frozenset(i for i in ids if i is not None)] = segment
    by_entries = {min(ids): (ids, seg) for ids, seg in held.items() if ids}
    assert sorted(by_entries) == [1, 11, 21]
    middle, seg = by_entries[11]
    assert middle == frozenset(range(11, 21))  # 15 is deleted, and still read
    assert seg.deleted >= 1  # h15, and the meta document the next commit replaced
    assert by_entries[1][1].deleted <= 1  # at most its replaced meta document
    assert sum(s.max_doc - s.deleted for s in snap.segments) == snap.searcher.num_docs == 30  # 29 + the meta doc


def test_ids_reads_a_window_of_a_segment(index: SearchIndex) -> None:
    index.apply([row(s, "x") for s in range(1, 6)], 5)
    snap = index.segments()
    assert snap is not None
    (segment,) = [s for s in snap.segments if s.max_doc > 1]
    every = snap.ids(segment, 0, segment.max_doc)
    assert snap.ids(segment, 1, 3) == every[1:3]
    assert snap.ids(segment, 4, 10_000) == every[4:]  # never past the segment's end


def test_an_unexpected_meta_file_is_no_snapshot(tmp_path: Path) -> None:
    folder = tmp_path / "copy"
    folder.mkdir()
    assert segments.committed(folder) is None  # no file
    (folder / segments.META_FILE).write_text("{not json", "utf-8")
    assert segments.committed(folder) is None
    (folder / segments.META_FILE).write_text(json.dumps({"segments": [{"max_doc": "x"}]}), "utf-8")
    assert segments.committed(folder) is None
    (folder / segments.META_FILE).write_text(
        json.dumps({"segments": [{"max_doc": 4, "deletes": None}, {"max_doc": 9, "deletes": {"num_deleted_docs": 2}}]}),
        "utf-8",
    )
    assert segments.committed(folder) == [(4, 0), (9, 2)]
