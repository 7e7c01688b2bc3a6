"""The waiting area's table (node/store/waiting.py): caps by count and bytes per author, per peer and in all, the
arriving record dropped and never an older one, expiry after 24 hours, selection by dependency keys; each on both
engines (the `open_store` fixture), the caps' running counts kept by each engine's triggers."""

from __future__ import annotations

import pytest

from node.federation.store import add_peer_txn
from node.store import waiting
from node.store.authority import author_deps, event_dep, key_dep
from node.store.conn import Conn
from tests.pg_fixtures import OpenStore

NOW = 1_800_000_000_000
AUTHOR = "did:key:z6MkAuthor"
PEER = "did:key:z6MkPeer"


@pytest.fixture
def conn(open_store: OpenStore) -> Conn:
    """A migrated store of each engine in turn."""
    return open_store(None)


def offer(
    conn: Conn,
    n: int,
    *,
    author: str = AUTHOR,
    peer: str = PEER,
    size: int = 10,
    deps: tuple[str, ...] = (),
    now_ms: int = NOW,
) -> bool:
    version = f"{n:064x}"
    return waiting.offer_txn(
        conn,
        record_hash=version,
        version=version,
        kind="entry",
        author_id=author,
        peer_id=peer,
        body=b"x" * size,
        deps=deps or (key_dep(author, "did:key:z6MkNew"),),
        now_ms=now_ms,
    )


def test_the_per_author_cap_drops_the_arriving_record_and_keeps_the_older_ones(conn: Conn) -> None:
    assert all(offer(conn, i) for i in range(waiting.MAX_PER_AUTHOR))
    assert not offer(conn, waiting.MAX_PER_AUTHOR)
    assert offer(conn, waiting.MAX_PER_AUTHOR + 1, author="did:key:z6MkOther")  # another author still has room
    assert waiting.sizes(conn)[AUTHOR] == (waiting.MAX_PER_AUTHOR, waiting.MAX_PER_AUTHOR * 10)
    assert waiting.held(conn, [f"{0:064x}", f"{waiting.MAX_PER_AUTHOR:064x}"]) == {f"{0:064x}"}


def test_an_already_waiting_version_waits_once(conn: Conn) -> None:
    assert offer(conn, 1) and offer(conn, 1)
    assert waiting.sizes(conn) == {AUTHOR: (1, 10)}


def test_the_byte_caps_count_sizes(conn: Conn) -> None:
    big = waiting.MAX_BYTES_PER_AUTHOR // 4
    assert all(offer(conn, i, size=big) for i in range(4))
    assert not offer(conn, 4, size=1)  # 16 MiB exactly is full
    peer_big = waiting.MAX_BYTES_PER_PEER // 8
    authors = [f"did:key:z6MkAuthor{i}" for i in range(8)]
    assert all(offer(conn, 10 + i, author=a, peer="did:key:z6MkP2", size=peer_big) for i, a in enumerate(authors))
    assert not offer(conn, 20, author="did:key:z6MkFresh", peer="did:key:z6MkP2", size=1)
    assert offer(conn, 21, author="did:key:z6MkFresh", peer="did:key:z6MkP3", size=1)


def test_the_caps_are_the_design_numbers() -> None:
    assert (waiting.MAX_PER_AUTHOR, waiting.MAX_PER_PEER, waiting.MAX_TOTAL) == (1_000, 10_000, 100_000)
    assert (waiting.MAX_BYTES_PER_AUTHOR, waiting.MAX_BYTES_PER_PEER, waiting.MAX_BYTES_TOTAL) == (
        16 * 2**20,
        64 * 2**20,
        512 * 2**20,
    )
    assert waiting.MAX_AGE_MS == 86_400_000 and waiting.RECHECK_PER_TRANSACTION == 1_000


def test_records_expire_after_24_hours_counted_by_peer(conn: Conn) -> None:
    offer(conn, 1, now_ms=NOW - waiting.MAX_AGE_MS)
    offer(conn, 2, now_ms=NOW - waiting.MAX_AGE_MS + 1, peer="did:key:z6MkP2")
    assert waiting.expire_txn(conn, NOW) == {PEER: 1}
    assert waiting.held(conn, [f"{1:064x}", f"{2:064x}"]) == {f"{2:064x}"}


def test_selection_by_exact_keys_and_an_authors_range(conn: Conn) -> None:
    offer(conn, 1, deps=(key_dep(AUTHOR, "did:key:z6MkK1"),))
    offer(conn, 2, deps=(key_dep(AUTHOR, "did:key:z6MkK2"),))
    offer(conn, 3, deps=(event_dep("ab" * 32),))
    offer(conn, 4, author=AUTHOR + "x", deps=(key_dep(AUTHOR + "x", "did:key:z6MkK1"),))  # a longer did: not AUTHOR's
    by_range = waiting.select_txn(conn, [author_deps(AUTHOR)], 0, 10)
    assert [w.version for w in by_range] == [f"{1:064x}", f"{2:064x}"]
    exact = waiting.select_txn(conn, [event_dep("ab" * 32), key_dep(AUTHOR, "did:key:z6MkK2")], 0, 10)
    assert [w.version for w in exact] == [f"{2:064x}", f"{3:064x}"]
    assert [w.version for w in waiting.select_txn(conn, [author_deps(AUTHOR)], by_range[0].id, 10)] == [f"{2:064x}"]
    assert len(waiting.select_txn(conn, [author_deps(AUTHOR)], 0, 1)) == 1


def test_removing_a_record_removes_its_dependency_keys(conn: Conn) -> None:
    offer(conn, 1)
    (row,) = waiting.select_txn(conn, [author_deps(AUTHOR)], 0, 10)
    waiting.set_deps_txn(conn, row.id, [event_dep("cd" * 32)])
    assert waiting.select_txn(conn, [author_deps(AUTHOR)], 0, 10) == []
    assert [w.id for w in waiting.select_txn(conn, [event_dep("cd" * 32)], 0, 10)] == [row.id]
    waiting.remove_versions_txn(conn, [row.version])
    assert conn.execute("SELECT count(*) FROM waiting_deps").fetchone()[0] == 0


def test_peer_counters(conn: Conn) -> None:
    add_peer_txn(conn, "http://127.0.0.1:9", "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp", NOW)
    peer = "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp"
    waiting.count_txn(conn, peer, waiting=2, void=1)
    waiting.count_txn(conn, peer, dropped_waiting=3)
    assert waiting.counters(conn) == {peer: (2, 3, 1)}


def test_void_refusals_are_remembered_and_forgotten_by_author(conn: Conn) -> None:
    waiting.remember_void_txn(conn, "aa" * 32, AUTHOR, "unvouched", NOW)
    waiting.remember_void_txn(conn, "bb" * 32, "did:key:z6MkOther", "losing_branch", NOW)
    waiting.remember_void_txn(conn, "aa" * 32, AUTHOR, "revoked_key", NOW)  # the first reason stays
    assert waiting.void(conn, ["aa" * 32, "bb" * 32, "cc" * 32]) == {"aa" * 32: "unvouched", "bb" * 32: "losing_branch"}
    waiting.forget_void_txn(conn, AUTHOR)
    assert waiting.void(conn, ["aa" * 32, "bb" * 32]) == {"bb" * 32: "losing_branch"}
