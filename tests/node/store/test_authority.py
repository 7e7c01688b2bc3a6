"""The writer's authority cache (node/store/authority.py): loaded from the log's key events, it agrees with the
reference (identity.key_history) on every record, and a record of an identity without key events needs none."""

from __future__ import annotations

from pathlib import Path

from identity import key_history
from node.features import LOG
from node.federation.store import add_peer_txn, ingest_txn
from node.store import db
from node.store.authority import Authority, author_deps, key_dep
from node.store.conn import Conn
from tests.node.federation import v3_story
from tests.node.federation.v3_story import A0, A1, B0, A, post, verified, version
from tests.pg_fixtures import OpenStore

NOW = 1_800_000_000_000
PEER = v3_story.key(0x33).did


def fresh(open_store: OpenStore) -> Conn:
    """A migrated store of this run's engine (`open_store`) knowing the peer."""
    conn = open_store(LOG)
    add_peer_txn(conn, "http://127.0.0.1:9", PEER, NOW)
    return conn


def test_a_loaded_cache_agrees_with_the_reference_on_every_record(open_store: OpenStore) -> None:
    conn = fresh(open_store)
    story = v3_story.story()
    with db.transaction(conn, immediate=True):  # type: ignore[arg-type]  # either engine (its engine_of)
        ingest_txn(conn, PEER, [verified(r) for r in story.records.values()], [], None, NOW)
    cache = Authority()
    cache.ensure_txn(conn)
    events = [(a, r) for a, r in story.events if a in cache.history(A).events]
    reference = key_history.resolve(A, events)
    assert cache.history(A).chain == reference.chain
    assert len(cache.history(A).chain) == 2  # e1, then the recovery
    for name, record in story.records.items():
        if record["kind"] not in ("key_event", "vouch_page") and record["author_id"] == A:
            expected = v3_story.whole_set_verdicts(story)
            assert cache.decide(record, version(record)).verdict == expected[name]


def test_records_without_key_history_need_no_cache(tmp_path: Path) -> None:
    cache = Authority()
    assert not cache.needs(post(B0.did, B0, "plain"))
    assert cache.needs(post(A, A1, "signed by a rotated key"))
    assert cache.needs(v3_story.story().records["e1"])
    assert not cache.loaded


def test_a_void_record_names_its_reason_and_an_undecided_one_its_dependencies(open_store: OpenStore) -> None:
    conn = fresh(open_store)
    story = v3_story.story().records
    with db.transaction(conn, immediate=True):  # type: ignore[arg-type]  # either engine (its engine_of)
        ingest_txn(conn, PEER, [verified(story[n]) for n in ("e1", "e2", "e3", "e4", "g1", "g4b")], [], None, NOW)
    cache = Authority()
    cache.ensure_txn(conn)
    assert cache.decide(story["p0"], version(story["p0"])).verdict == "valid"  # on e1's page
    assert cache.decide(story["p0x"], version(story["p0x"])).reason == "unvouched"  # not on it
    assert cache.decide(story["p2"], version(story["p2"])).reason == "unvouched"  # not on the recovery's page
    assert cache.decide(story["p2b"], version(story["p2b"])).verdict == "valid"  # on it
    unknown = cache.decide(story["pu"], version(story["pu"]))
    assert unknown.verdict == "undecided" and unknown.deps == (key_dep(A, v3_story.U.did),)
    paged = cache.decide(story["p1"], version(story["p1"]))  # vouched for by the recovery: its page is not held
    assert paged.verdict == "undecided" and paged.deps[0].startswith("pages:")
    low, high = author_deps(A)
    assert all(low <= d < high for d in paged.deps[1:])


def test_a_cache_ahead_of_the_log_is_loaded_again(open_store: OpenStore) -> None:
    conn = fresh(open_store)
    cache = Authority()
    cache.ensure_txn(conn)
    rotation = v3_story.key_event(A0, "rotate", 1, installs=A1, vouches=[v3_story.vouching.vouch(A0.did, [])])
    cache.add_event(v3_story.address(rotation), rotation)  # as if stored by a transaction that then rolled back
    assert cache.decide(post(A, A1, "x"), "00" * 32).verdict == "valid"
    cache.ensure_txn(conn)
    assert cache.decide(post(A, A1, "x"), "00" * 32).verdict == "undecided"
    assert not cache.needs(post(A, A0, "A has no key events in the log"))
