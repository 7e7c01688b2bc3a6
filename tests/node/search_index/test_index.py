"""node.search_index.index: stamping, idempotent indexing by address, filters, ties and the writer lock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from node.search_index.index import Filters, Hits, Row, SearchIndex, remove, stamp_for
from node.search_index.query import Clause


def row(seq: int, content: str, address: str | None = None, **kw: object) -> Row:
    fields: dict[str, object] = {
        "tags": "[]", "entry_type": "finding", "performative": "inform", "author_id": "did:key:a",
        "truth_state": "fact", "confidence": 0.5, "created_ms": 1000 * seq,
    } | kw  # fmt: skip
    return Row(seq, address or f"h{seq}", content, **fields)  # type: ignore[arg-type]


@pytest.fixture
def index(tmp_path: Path) -> Iterator[SearchIndex]:
    ix = SearchIndex(tmp_path / "search-index", "epoch-1")
    yield ix
    ix.close()


def test_a_new_index_is_stamped_and_covers_nothing(index: SearchIndex) -> None:
    assert index.state() == (0, stamp_for("epoch-1"))
    assert index.documents() == 0


def test_apply_records_its_position_and_an_address_shows_one_document(index: SearchIndex) -> None:
    index.apply([row(1, "alpha beta"), row(2, "alpha")], 2)
    assert index.state()[0] == 2
    index.apply([row(5, "gamma", address="h1")], 5)  # a new winner for h1's address replaces its document
    assert index.documents() == 2
    assert index.search(["alpha"], Filters(), 10, 0).ids == [2]
    assert index.search(["gamma"], Filters(), 10, 0).ids == [5]
    index.apply([row(5, "gamma", address="h1")], 5)  # applying again changes nothing
    assert index.documents() == 2


def test_search_answers_at_the_position_the_index_covers(index: SearchIndex) -> None:
    assert index.search(["alpha"], Filters(), 10, 0) == Hits([], 0)
    index.apply([row(1, "alpha")], 1)
    assert index.search(["alpha"], Filters(), 10, 0) == Hits([1], 1)
    index.apply([row(2, "beta")], 7)  # the position is the log's, past the last entry indexed
    assert index.search(["alpha"], Filters(), 10, 0) == Hits([1], 7)
    assert not index.few_matches([Clause(("beta",))], 0)  # each commit is seen by the next search and look-up
    index.reset()
    assert index.search(["alpha"], Filters(), 10, 0) == Hits([], 0)
    assert index.few_matches([Clause(("beta",))], 0)


def test_filters(index: SearchIndex) -> None:
    index.apply(
        [
            row(1, "w", tags='["Café"]', confidence=0.9),
            row(2, "w", truth_state="simulation"),
            row(3, "w", entry_type="question", author_id="did:key:b"),
        ],
        3,
    )
    assert index.search(["w"], Filters(), 10, 0).ids == [3, 1]
    assert index.search(["w"], Filters(include_synthetic=True), 10, 0).ids == [3, 2, 1]
    assert index.search(["w"], Filters(tags=["Café"]), 10, 0).ids == [1]
    assert index.search(["cafe"], Filters(), 10, 0).ids == [1]  # tags' text is searched too
    assert index.search(["w"], Filters(min_confidence=0.9), 10, 0).ids == [1]
    assert index.search(["w"], Filters(author=["did:key:b"], entry_type=["question"]), 10, 0).ids == [3]
    assert index.search(["w"], Filters(since_ms=2000, include_synthetic=True), 10, 0).ids == [3, 2]


def test_tied_scores_page_by_newest_first_without_skips(index: SearchIndex) -> None:
    index.apply([row(i, "same words") for i in range(1, 26)], 25)
    pages = [index.search(["same"], Filters(), 4, offset).ids for offset in range(0, 28, 4)]
    assert [seq for page in pages for seq in page] == list(range(25, 0, -1))


def test_a_changed_stamp_empties_the_index(tmp_path: Path) -> None:
    ix = SearchIndex(tmp_path / "ix", "epoch-1")
    ix.apply([row(1, "alpha")], 1)
    ix.close()
    again = SearchIndex(tmp_path / "ix", "epoch-2")  # a restore: same seqs, another store
    assert again.state() == (0, stamp_for("epoch-2"))
    assert again.documents() == 0
    again.close()


def test_one_writer_per_folder(index: SearchIndex) -> None:
    with pytest.raises(ValueError):
        SearchIndex(index.path, "epoch-1")
    reader = SearchIndex(index.path, "epoch-1", writable=False)
    assert reader.documents() == 0


def test_remove(tmp_path: Path) -> None:
    (tmp_path / "search-index").mkdir()
    remove(tmp_path)
    assert not (tmp_path / "search-index").exists()


def test_few_matches_looks_at_each_clauses_rarest_token(index: SearchIndex) -> None:
    index.apply([row(1, "alpha beta"), row(2, "alpha gamma"), row(3, "alpha beta")], 3)
    assert index.few_matches([Clause(("gamma",))], 1)
    assert not index.few_matches([Clause(("alpha",))], 2)
    assert index.few_matches([Clause(("alpha",)), Clause(("gamma",))], 1)  # an AND is bounded by its rarest
    assert index.few_matches([Clause(("alpha", "gamma"))], 1)  # a phrase by its rarest token
    assert not index.few_matches([Clause(("gam",), prefix=True)], 10)  # a prefix is never counted as few
    assert index.bound([Clause(("alpha",)), Clause(("beta",))]) == 2
    assert index.bound([Clause(("gam",), prefix=True)]) is None and index.bound([]) is None
