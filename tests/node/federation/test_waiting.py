"""Records whose authority depends on key events, ingested from peers into a real node store (node/federation/waiting.py
with node/store/waiting.py and node/store/authority.py; docs/format-v3.md, section 7).

Every test runs the node's Database (its writer thread) and NodeSyncStore.ingest, with real Ed25519 keys.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from identity import key_history
from identity.keys import SigningKey
from identity.vouching import vouch
from node.features import LOG
from node.federation.store import NodeSyncStore, add_peer_txn, digest
from node.store import authority as authority_store
from node.store import db, void, waiting
from node.store.conn import Conn
from node.store.db import Database
from sync.puller import Wakeups
from sync.store import Outcome
from tests.node.federation import v3_story
from tests.node.federation.v3_story import A0, A1, A4, A5, B0, A, address, key_event, post, verified, version
from tests.node.migrated import database_before
from tests.pg_fixtures import examples
from tests.sync.conftest import (
    PeerNode,
    make_peer,  # noqa: F401  (a fixture: real nodes, registered by this import)
)

NOW = 1_800_000_000_000
PEERS = (SigningKey.from_seed(b"\x31" * 32).did, SigningKey.from_seed(b"\x32" * 32).did)


NodeStore = Callable[[], str | None]  # the `node_store` fixture (tests/pg_fixtures.py)


def new_database(node_store: NodeStore, folder: Path) -> Path | str:
    """Where a new node database goes: this pass's PostgreSQL database (`--store postgresql`), or a SQLite file in
    `folder`."""
    return node_store() or folder / "node.db"


@asynccontextmanager
async def sync_store(where: Path | str) -> AsyncIterator[NodeSyncStore]:
    """A node's database (`new_database`) with two peers configured, and its sync store."""
    database = Database(where, log=LOG)
    database.open()

    def peers(conn: Conn) -> None:
        for peer in PEERS:
            add_peer_txn(conn, "http://127.0.0.1:9", peer, NOW)

    await database.write(peers)
    await database.write(
        lambda c: c.execute("INSERT INTO node_meta (key, value) VALUES ('epoch', 'e') ON CONFLICT DO NOTHING")
    )
    try:
        yield NodeSyncStore(database, SigningKey.from_seed(b"\x30" * 32).did, lambda: NOW)
    finally:
        database.close()


async def ingest(store: NodeSyncStore, records: list[dict[str, Any]], peer: str = PEERS[0]) -> dict[str, str]:
    """Ingest one batch; each record's outcome by its address."""
    outcomes: list[Outcome] = await store.ingest(peer, [verified(r) for r in records], [], None)
    return {str(o.hash): o.outcome for o in outcomes}


def in_log(conn: Conn, versions: list[str]) -> set[str]:
    rows = conn.execute("SELECT version FROM records").fetchall()
    return {r[0] for r in rows} & set(versions)


def node_verdicts(conn: Conn, story: v3_story.Story) -> dict[str, str]:
    """Each story record's verdict on the node: a stored key event is valid, a refused one void; a stored record
    flagged void (it was stored before a later key event voided it: node/store/void.py) is void, and must be what
    the authority cache, rebuilt from the log as at a start, says of it, as must every stored record not flagged;
    a waiting one is undecided; one stored nowhere was refused (void). Every stored record is shown (an entry in
    `entries`, a version in the digest) exactly when it is valid."""
    cache = authority_store.Authority()
    cache.load_txn(conn)
    versions = [version(r) for r in story.records.values()]
    stored = in_log(conn, versions)
    held = waiting.held(conn, versions)
    flagged = void.flagged_versions(conn, versions)
    shown = {str(r[0]) for r in conn.execute("SELECT record_hash FROM entries").fetchall()}
    shown |= {str(r[0]) for r in conn.execute("SELECT origin_hash FROM links WHERE ordinal = 0").fetchall()}
    out: dict[str, str] = {}
    for name, record in story.records.items():
        v = version(record)
        if v in held:
            assert v not in stored, f"{name} is both in the log and waiting"
            out[name] = "undecided"
        elif v not in stored:
            out[name] = "void"
        elif v in flagged:
            assert cache.decide(record, v).verdict == "void", f"{name} is flagged void but valid"
            out[name] = "void"
        elif record["kind"] in ("key_event", "vouch_page") or not cache.needs(record):
            out[name] = "valid"
        else:
            out[name] = cache.decide(record, v).verdict
            assert out[name] != "void", f"{name} was stored and is void, but not flagged"
        if record["kind"] in ("entry", "link") and v in stored:
            assert (address(record) in shown) == (out[name] == "valid"), f"{name} is shown: {address(record) in shown}"
    assert digest(conn, "n").count == len(stored - flagged), "the digest counts valid versions only"
    assert waiting.running_counts(conn) == waiting.recounted(conn), "the caps' running counts drifted"
    return out


async def reconcile(store: NodeSyncStore, story: v3_story.Story) -> None:
    """What a reconciliation round with a peer holding every story record brings: each version this node neither
    holds nor waits for nor remembers as refused (docs/format-v3.md 7.5: no refusal of an undecided record, nor a
    void one whose author's chain changed since, keeps it out)."""
    versions = {version(r): r for r in story.records.values()}
    stored = await store.db.read(lambda c: in_log(c, list(versions)))
    refused = await store.refused(list(versions))
    missing = [r for v, r in versions.items() if v not in stored and v not in refused]
    if missing:
        await ingest(store, missing, PEERS[1])


async def run_story(
    node_store: NodeStore, order: list[str], cuts: list[int], peers: list[int], forks: bool = False
) -> tuple[dict[str, str], dict[str, str]]:
    """Ingest the story's records (the fork story's with `forks`) in `order`, cut into batches at `cuts`, each batch
    from the peer `peers` names. Returns each record's verdict on the node and by the reference over the whole set;
    checks the node holds no key event outside the reference's kept set (docs/format-v3.md 3.4)."""
    story = v3_story.fork_story() if forks else v3_story.story()
    author = v3_story.T if forks else v3_story.A
    bounds = sorted({c % (len(order) + 1) for c in cuts} | {0, len(order)})
    with tempfile.TemporaryDirectory() as folder:
        async with sync_store(new_database(node_store, Path(folder))) as store:
            for i, (start, end) in enumerate(itertools.pairwise(bounds)):
                batch = [story.records[n] for n in order[start:end]]
                await ingest(store, batch, PEERS[peers[i % len(peers)] if peers else 0])
            await reconcile(store, story)
            found = await store.db.read(lambda c: node_verdicts(c, story))
            held = await store.db.read(lambda c: {a for a, _ in authority_store.key_events_of(c, author)})
    assert held == key_history.resolve(author, story.events).kept
    return found, v3_story.whole_set_verdicts(story, author)


def arrivals(names: list[str]) -> dict[str, st.SearchStrategy[list[Any]]]:
    """Hypothesis strategies of one arrival of the records `names`: their order, the cuts into batches, and which of
    the two peers sends each batch (`run_story`'s arguments)."""
    return {
        "order": st.permutations(names),
        "cuts": st.lists(st.integers(min_value=0, max_value=len(names)), max_size=len(names)),
        "peers": st.lists(st.integers(min_value=0, max_value=1), max_size=len(names)),
    }


NAMES = sorted(v3_story.story().records)
# A2's honest post arrives after the revocation and before the recovery, one record a batch: void at first, then
# fetched again by reconciliation once the recovery (which vouches for it) changed the chain.
REVOKED_THEN_RECOVERED = ["e1", "e2", "e3", "p2b", *(n for n in NAMES if n not in ("e1", "e2", "e3", "p2b"))]

# Records stored while their key was valid, before the key events that void them: A0's backdated post before the
# first rotation, A1's link before the second, A2's posts before the revocation (A2's honest one vouched for again by
# the recovery, which comes last); one record a batch.
STORED_THEN_VOIDED = ["p0x", "e1", "g1", "p1", "l1x", "e2", "g2", "p2", "p2b", "e3"]
STORED_THEN_VOIDED += [n for n in NAMES if n not in STORED_THEN_VOIDED]


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(order=REVOKED_THEN_RECOVERED, cuts=list(range(len(NAMES) + 1)), peers=[0])
@example(order=STORED_THEN_VOIDED, cuts=list(range(len(NAMES) + 1)), peers=[0])
@given(**arrivals(NAMES))
def test_the_final_verdict_on_every_record_does_not_depend_on_the_arrival_order(
    node_store: NodeStore, order: list[str], cuts: list[int], peers: list[int]
) -> None:
    found, expected = asyncio.run(run_story(node_store, order, cuts, peers))
    assert found == expected


FORK_NAMES = sorted(v3_story.fork_story().records)
# the losing forks and their child stored while they won (f4, then c4 on it, then the better f3, f2, f1 in turn)
FORKS_STORED_THEN_DROPPED = ["f4", "c4", "qc4", "q4", "f3", "f2", "z", "f1", "c1", "d1"]
FORKS_STORED_THEN_DROPPED += [n for n in FORK_NAMES if n not in FORKS_STORED_THEN_DROPPED]


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(order=FORKS_STORED_THEN_DROPPED, cuts=list(range(len(FORK_NAMES) + 1)), peers=[0])
@example(order=list(reversed(FORKS_STORED_THEN_DROPPED)), cuts=list(range(len(FORK_NAMES) + 1)), peers=[1])
# c1 and qc1 released together from two peers: the record's peer sorts first, and the key event must still be
# stored before it (node/store/void.py reads a key's records from its event's seq on)
@example(order=["c4", "c1", "qc1", "f1", "f2", "f3", "f4", "q1", "q2", "q3", "q4", "d1", "qc4", "qd1", "qz", "z"],
         cuts=[1, 2, 7], peers=[0, 1])  # fmt: skip
@given(**arrivals(FORK_NAMES))
def test_forks_of_four_allowed_events_at_one_place_keep_two_whatever_the_arrival_order(
    node_store: NodeStore, order: list[str], cuts: list[int], peers: list[int]
) -> None:
    """docs/format-v3.md 3.4: a key holder forking at will. Every order ends with the reference's kept set in the log
    (the chain f1, c1, d1 and the runner-up f2) and the reference's verdict on every record: the dropped events'
    keys (f3, f4, and c4 built on f4) lose, whether their events were stored first and dropped or refused on
    arrival; z, never allowed, installs nothing."""
    found, expected = asyncio.run(run_story(node_store, order, cuts, peers, forks=True))
    assert found == expected
    assert {name: expected[name] for name in ("f3", "f4", "c4", "z", "q1", "qc1", "qd1", "q2", "qc4", "qz")} == {
        "f3": "void", "f4": "void", "c4": "void", "z": "void",  # not kept / never allowed: in no log
        "q1": "void", "qc1": "void",  # rotated out by the chain, vouched for by nothing
        "qd1": "valid", "q2": "void", "qc4": "void",  # the runner-up's and a dropped event's keys lose
        "qz": "undecided",  # no allowed event installs its key: it waits
    }  # fmt: skip


def test_one_by_one_in_the_worst_order_and_all_at_once_agree(node_store: NodeStore) -> None:
    reverse = list(reversed(v3_story.story().records))  # every record before what it depends on
    one_by_one, expected = asyncio.run(run_story(node_store, reverse, list(range(len(reverse) + 1)), [0, 1]))
    at_once, _ = asyncio.run(run_story(node_store, reverse, [], [0]))
    assert one_by_one == at_once == expected
    decided = {name: expected[name] for name in ("p0", "p0x", "p1", "p2", "p2b", "p4", "gx", "x2", "pu")}
    assert decided == {  # the story decides every kind of verdict
        "p0": "valid",  # vouched for by the rotation that removed its key, on its page
        "p0x": "void",  # not on that page
        "p1": "valid",  # vouched for by the recovery, which replaced the rotation to A2
        "p2": "void",  # by a key of the losing branch, and not among the records the recovery vouches for
        "p2b": "valid",  # among them (void after the revocation alone: fetched again once the chain changed)
        "p4": "valid",
        "gx": "void",  # a page whose proof does not verify
        "x2": "void",  # builds on a refused event
        "pu": "undecided",  # no held event installs its key: it waits
    }


def test_records_stored_before_the_key_events_that_void_them_are_flagged_and_a_recovery_unflags_them(
    node_store: NodeStore, tmp_path: Path
) -> None:
    story = v3_story.story()
    r = story.records

    async def flagged(store: NodeSyncStore) -> set[str]:
        rows = await store.db.read(lambda c: void.listing(c, 0, 100))
        return {name for name, record in r.items() if address(record) in {row.hash for row in rows}}

    async def run() -> None:
        async with sync_store(new_database(node_store, tmp_path)) as store:
            revoked = STORED_THEN_VOIDED.index("e3") + 1
            for name in STORED_THEN_VOIDED[:revoked]:
                await ingest(store, [r[name]])
            assert await flagged(store) == {"p0x", "l1x", "p2", "p2b"}  # each stored, then voided
            for name in STORED_THEN_VOIDED[revoked:]:
                await ingest(store, [r[name]])
            assert await flagged(store) == {"p0x", "l1x", "p2"}  # the recovery vouches for p2b
            found = await store.db.read(lambda c: node_verdicts(c, story))
            assert found == v3_story.whole_set_verdicts(story)

    asyncio.run(run())


def test_a_waiting_record_is_stored_in_the_transaction_that_stores_its_key_event(
    node_store: NodeStore, tmp_path: Path
) -> None:
    rotation = key_event(A0, "rotate", 1, installs=A1, vouches=[vouch(A0.did, [])])
    early = post(A, A1, "signed by A1 before the rotation arrived")

    async def run() -> None:
        async with sync_store(new_database(node_store, tmp_path)) as store:
            assert await ingest(store, [early], PEERS[1]) == {address(early): "waiting"}
            commits = store.db.stats.transactions
            outcomes = await ingest(store, [rotation], PEERS[0])
            assert outcomes == {address(rotation): "saved"}
            assert store.db.stats.transactions == commits + 1  # one write transaction stored both
            stored = await store.db.read(lambda c: in_log(c, [version(early), version(rotation)]))
            assert stored == {version(early), version(rotation)}
            counters = await store.db.read(waiting.counters)
            assert counters[PEERS[1]] == (1, 0, 0)
            statuses = {p.node_id: p.counters.saved for p in await store.statuses()}
            assert statuses == {PEERS[0]: 1, PEERS[1]: 1}  # the released record counts for the peer it came from
            assert await store.db.read(lambda c: waiting.held(c, [version(early)])) == set()

    asyncio.run(run())


def test_waiting_records_are_absent_from_feed_fetch_digest_and_reconciliation(
    node_store: NodeStore, tmp_path: Path
) -> None:
    plain = post(B0.did, B0, "an ordinary record")
    early = post(A, A4, "its key arrives later")

    async def run() -> None:
        async with sync_store(new_database(node_store, tmp_path)) as store:
            assert await ingest(store, [plain, early]) == {address(plain): "saved", address(early): "waiting"}
            page = await store.changes(0, 100)
            assert [item[1] for item in page.items] == [address(plain)]
            assert [r[0] for r in await store.fetch([address(early), version(early), address(plain)])] == [
                address(plain)
            ]
            _, _, items = await store.reconcile_items()
            assert [bytes.hex(v) for _, v in items] == [version(plain)]
            count = (await store.db.read(lambda c: digest(c, store.node_id))).count
            assert count == 1
            entries = await store.db.read(lambda c: c.execute("SELECT record_hash FROM entries").fetchall())
            assert [r[0] for r in entries] == [address(plain)]
            # reconciliation does not fetch it again while it waits (it is not remembered as refused either)
            assert await store.refused([version(early)]) == {version(early)}
            refused_rows = await store.db.read(lambda c: c.execute("SELECT count(*) FROM refused_versions").fetchone())
            assert refused_rows[0] == 0

    asyncio.run(run())


def test_a_woken_peer_is_reconciled_with_at_most_once_per_10_s(
    node_store: NodeStore, tmp_path: Path, monkeypatch: Any
) -> None:
    """docs/format-v3.md 7.3: the puller's `Wakeups` over the store's wake-ups, with a clock the test moves."""
    monkeypatch.setattr(waiting, "MAX_PER_AUTHOR", 1)
    now = [1000.0]
    b = B0.did
    rotate_a = key_event(A0, "rotate", 1, installs=A4, vouches=[vouch(A0.did, [])])
    rotate_b = key_event(B0, "rotate", 1, installs=A5, vouches=[vouch(B0.did, [])], author=b)

    async def run() -> None:
        async with sync_store(new_database(node_store, tmp_path)) as store:
            wakeups = Wakeups(store, lambda: now[0])
            assert await ingest(store, [post(A, A4, "a waits")]) == {address(post(A, A4, "a waits")): "waiting"}
            dropped = post(A, A4, "a dropped")
            assert await ingest(store, [dropped], PEERS[1]) == {address(dropped): "dropped_waiting"}
            assert not await wakeups.due(PEERS[1])  # its dependency is not stored yet
            assert await ingest(store, [rotate_a]) == {address(rotate_a): "saved"}
            assert not await wakeups.due(PEERS[0])  # its record waited and is stored: nothing to bring back
            assert await wakeups.due(PEERS[1]) and not await wakeups.due(PEERS[1])  # once
            await ingest(store, [post(b, A5, "b waits")])
            assert await ingest(store, [post(b, A5, "b dropped")], PEERS[1]) == {
                address(post(b, A5, "b dropped")): "dropped_waiting"
            }
            assert await ingest(store, [rotate_b]) == {address(rotate_b): "saved"}
            now[0] += 5
            assert not await wakeups.due(PEERS[1])  # 5 s after the last early reconciliation: kept for later
            now[0] += 5
            assert await wakeups.due(PEERS[1])

    asyncio.run(run())


def test_a_full_author_cap_drops_the_arriving_record_and_reconciliation_brings_it_back(
    node_store: NodeStore, tmp_path: Path
) -> None:
    early = [post(A, A4, f"waiting {i}") for i in range(waiting.MAX_PER_AUTHOR + 3)]
    rotation = key_event(A0, "rotate", 1, installs=A4, vouches=[vouch(A0.did, [])])
    other = post(A0.did, A0, "A0's own record, fine before the rotation")

    async def run() -> None:
        async with sync_store(new_database(node_store, tmp_path)) as store:
            first = await ingest(store, early[: waiting.MAX_PER_AUTHOR])
            assert set(first.values()) == {"waiting"}
            overflow = await ingest(store, early[waiting.MAX_PER_AUTHOR :], PEERS[1])
            assert set(overflow.values()) == {"dropped_waiting"}
            assert len(overflow) == 3
            counters = await store.db.read(waiting.counters)
            assert counters[PEERS[1]] == (0, 3, 0) and counters[PEERS[0]] == (waiting.MAX_PER_AUTHOR, 0, 0)
            sizes = await store.db.read(waiting.sizes)
            assert sizes[A][0] == waiting.MAX_PER_AUTHOR  # the older waiting records were kept, not pushed out
            # A0 has no key events yet: its own records are not held back
            assert await ingest(store, [other]) == {address(other): "saved"}
            assert await store.reconcile_wanted() == set()  # nothing they waited for is stored yet
            assert await ingest(store, [rotation]) == {address(rotation): "saved"}
            # the rotation is what the dropped records waited for: the peer that sent them is to be reconciled with
            # at once (the records that waited came from PEERS[0] and were stored: no wake-up for it)
            assert await store.reconcile_wanted() == {PEERS[1]}
            assert await store.reconcile_wanted() == set()  # taken once
            assert await store.db.read(waiting.sizes) == {}
            # reconciliation offers the dropped ones again: nothing remembered them, and now they are stored
            again = await ingest(store, early[waiting.MAX_PER_AUTHOR :], PEERS[1])
            assert set(again.values()) == {"saved"}
            stored = await store.db.read(lambda c: in_log(c, [version(r) for r in early]))
            assert len(stored) == len(early)

    asyncio.run(run())


def test_more_waiting_records_than_one_transaction_rechecks_are_stored_by_the_next_jobs(
    node_store: NodeStore, tmp_path: Path
) -> None:
    b = SigningKey.from_seed(b"\x40" * 32)
    b1 = SigningKey.from_seed(b"\x41" * 32)
    half = waiting.RECHECK_PER_TRANSACTION // 2 + 3
    many = [post(A, A1, f"early {i}") for i in range(half)] + [post(b.did, b1, f"early {i}") for i in range(half)]
    rotations = [
        key_event(A0, "rotate", 1, installs=A1, vouches=[vouch(A0.did, [])]),
        key_event(b, "rotate", 1, installs=b1, vouches=[vouch(b.did, [])], author=b.did),
    ]

    async def run() -> None:
        async with sync_store(new_database(node_store, tmp_path)) as store:
            for peer, part in ((PEERS[0], many[:half]), (PEERS[1], many[half:])):
                assert set((await ingest(store, part, peer)).values()) == {"waiting"}
            commits = store.db.stats.transactions
            await ingest(store, rotations)
            assert store.db.stats.transactions == commits + 2  # the rotations with 1,000 of them, then the rest
            stored = await store.db.read(lambda c: in_log(c, [version(r) for r in many]))
            assert len(stored) == len(many)
            assert not store.authority.pending

    asyncio.run(run())


def test_a_void_record_is_refused_and_remembered_until_its_authors_chain_changes(
    node_store: NodeStore, tmp_path: Path
) -> None:
    rotation = key_event(A0, "rotate", 1, installs=A1, vouches=[vouch(A0.did, [])])
    late = post(A, A0, "by A0 after a rotation that vouches for none of its records")
    next_rotation = key_event(A1, "rotate", 2, prior=rotation, installs=A4, vouches=[vouch(A1.did, [])])

    async def run() -> None:
        async with sync_store(new_database(node_store, tmp_path)) as store:
            assert await ingest(store, [rotation, late]) == {address(rotation): "saved", address(late): "void"}
            assert await store.db.read(lambda c: in_log(c, [version(late)])) == set()
            assert (await store.db.read(waiting.counters))[PEERS[0]] == (0, 0, 1)
            assert await store.db.read(lambda c: waiting.void(c, [version(late)])) == {version(late): "unvouched"}
            assert await store.refused([version(late)]) == {version(late)}  # reconciliation leaves it
            assert await ingest(store, [next_rotation]) == {address(next_rotation): "saved"}
            assert await store.refused([version(late)]) == set()  # the chain changed: fetched and decided again
            assert await ingest(store, [late]) == {address(late): "void"}

    asyncio.run(run())


def test_a_refused_key_event_refuses_the_events_that_build_on_it(node_store: NodeStore, tmp_path: Path) -> None:
    story = v3_story.story().records

    async def run() -> None:
        async with sync_store(new_database(node_store, tmp_path)) as store:
            assert await ingest(store, [story["x2"]]) == {address(story["x2"]): "waiting"}
            outcomes = await ingest(store, [story["e1"], story["x1"]])
            assert outcomes == {address(story["e1"]): "saved", address(story["x1"]): "invalid"}
            assert await store.db.read(lambda c: waiting.held(c, [version(story["x2"])])) == set()
            assert await store.refused([address(story["x1"]), address(story["x2"])]) == {
                address(story["x1"]),
                address(story["x2"]),
            }
            statuses = {p.node_id: p.counters.invalid_reasons for p in await store.statuses()}
            assert statuses[PEERS[0]] == {"unauthorized_key_event": 1}

    asyncio.run(run())


def test_records_of_identities_without_key_events_cost_no_sql_for_the_cache(
    node_store: NodeStore, tmp_path: Path
) -> None:
    """The writer-floor rule: once loaded (the first ingest after a start), the cache decides a record of an
    identity without key events and without signing_key with no statement: a batch of them runs exactly as many
    statements on a node that holds key histories as on one that holds none."""
    story = v3_story.story().records

    async def statements(folder: Path, history: list[dict[str, Any]]) -> int:
        async with sync_store(new_database(node_store, folder)) as store:
            await ingest(store, [post(B0.did, B0, "warm-up"), *history])
            assert store.authority.loaded
            before = store.db.stats.statements
            assert set((await ingest(store, [post(B0.did, B0, f"plain {i}") for i in range(3)])).values()) == {"saved"}
            return store.db.stats.statements - before

    async def run() -> None:
        (tmp_path / "none").mkdir()
        (tmp_path / "story").mkdir()
        without = await statements(tmp_path / "none", [])
        with_history = await statements(tmp_path / "story", [story[n] for n in ("e1", "g1", "e2", "e4", "p4")])
        assert with_history == without

    asyncio.run(run())


def test_a_restarted_node_rebuilds_its_cache_from_the_log(node_store: NodeStore, tmp_path: Path) -> None:
    rotation = key_event(A0, "rotate", 1, installs=A1, vouches=[vouch(A0.did, [])])
    late = post(A, A1, "after the restart")

    async def run() -> None:
        where = new_database(node_store, tmp_path)
        async with sync_store(where) as store:
            await ingest(store, [rotation])
        async with sync_store(where) as again:
            assert await ingest(again, [late]) == {address(late): "saved"}

    asyncio.run(run())


async def test_metrics_show_the_waiting_outcomes_per_peer(
    make_peer: Callable[..., Awaitable[PeerNode]],  # noqa: F811  (the fixture imported above)
) -> None:
    b = await make_peer("b")
    peer = PEERS[0]
    await b.node.db.write(lambda c: add_peer_txn(c, "http://127.0.0.1:9", peer, NOW))
    early = post(A, A4, "its key event is on its way")
    assert [o.outcome for o in await b.node.sync.ingest(peer, [verified(early)], [], None)] == ["waiting"]
    async with b.session.get(b.url + "/metrics", headers=b.admin) as resp:
        metrics = await resp.text()
    assert f'bbs_sync_records{{outcome="waiting",peer="{peer}"}} 1.0' in metrics
    assert f'bbs_sync_records{{outcome="dropped_waiting",peer="{peer}"}} 0.0' in metrics
    assert f'bbs_waiting_records{{peer="{peer}"}} 1.0' in metrics


async def test_a_node_pulls_key_events_pages_and_rotated_keys_records_from_a_peer_over_http(
    make_peer: Callable[..., Awaitable[PeerNode]],  # noqa: F811  (the fixture imported above)
) -> None:
    """The whole path: node a holds the story (from a peer of its own); node b pulls a's feed through the puller
    and the verify workers, and decides every record as a did."""
    a, b = await make_peer("a"), await make_peer("b")
    await a.node.db.write(lambda c: add_peer_txn(c, "http://127.0.0.1:9", PEERS[0], NOW))
    story = v3_story.story()
    await a.node.sync.ingest(PEERS[0], [verified(r) for r in story.records.values()], [], None)
    await a.add_peer(b)
    await b.add_peer(a)
    report = await b.puller().pull_once(a.config)
    assert {o.outcome for o in report.outcomes} == {"saved"}  # a serves only what it stored: nothing waits on b
    verdicts_a = await a.node.db.read(lambda c: node_verdicts(c, story))
    verdicts_b = await b.node.db.read(lambda c: node_verdicts(c, story))
    expected = v3_story.whole_set_verdicts(story)
    assert verdicts_a == expected
    # b never received what a refused or holds waiting: those are void (stored nowhere) on b
    assert verdicts_b == {n: "void" if v == "undecided" else v for n, v in expected.items()}
    assert await a.digest() == await b.digest()


def test_a_thief_forking_fifty_times_at_one_place_leaves_two_events_on_disk(
    node_store: NodeStore, tmp_path: Path
) -> None:
    """docs/format-v3.md 3.4: the holder of T0 signs 50 allowed rotations at one place, each better than the last
    (worst address first: each displaces the runner-up), then the same 50 in a random order on a second node. Each
    node's log holds the winner and the runner-up only; the other 48 cost a row of `dropped_key_events` and one of
    `refused_versions` each (no body), are absent from the changes feed, fetch, reconciliation and the digest, and a
    copy sent again is refused without being stored."""
    installed = [v3_story.key(0x50 + i) for i in range(50)]
    forks = [
        key_event(v3_story.T0, "rotate", 1, installs=k, vouches=[vouch(v3_story.T, [])], author=v3_story.T)
        for k in installed
    ]
    best_last = sorted(forks, key=address, reverse=True)
    shuffled = list(forks)
    random.Random(7).shuffle(shuffled)
    winner, runner_up = best_last[-1], best_last[-2]

    def on_disk(conn: Conn) -> tuple[set[str], int, int, int]:
        events = {str(r[0]) for r in conn.execute("SELECT hash FROM records WHERE kind = 'key_event'")}
        dropped = int(conn.execute("SELECT count(*) FROM dropped_key_events").fetchone()[0])
        refused = int(conn.execute("SELECT count(*) FROM refused_versions").fetchone()[0])
        bodies = int(conn.execute("SELECT count(*) FROM records").fetchone()[0])
        return events, dropped, refused, bodies

    async def run(folder: Path, order: list[dict[str, Any]], batch: int) -> None:
        folder.mkdir()
        async with sync_store(new_database(node_store, folder)) as store:
            for start in range(0, len(order), batch):
                await ingest(store, order[start : start + batch])
            events, dropped, refused, bodies = await store.db.read(on_disk)
            assert events == {address(winner), address(runner_up)}
            assert (dropped, refused, bodies) == (48, 48, 2)
            losers = [address(f) for f in forks if f not in (winner, runner_up)]
            page = await store.changes(0, 100)
            assert {item[1] for item in page.items} == {address(winner), address(runner_up)}
            assert {r[0] for r in await store.fetch([address(f) for f in forks])} == events
            _, _, items = await store.reconcile_items()
            assert {bytes.hex(v) for _, v in items} == events
            assert (await store.db.read(lambda c: digest(c, store.node_id))).count == 2
            assert await store.refused(losers) == set(losers)  # reconciliation never fetches them again
            again = await ingest(store, [best_last[0]], PEERS[1])
            assert again == {address(best_last[0]): "invalid"}
            assert await store.db.read(on_disk) == (events, 48, 48, 2)

    asyncio.run(run(tmp_path / "one_by_one", best_last, 1))
    asyncio.run(run(tmp_path / "shuffled_in_batches", shuffled, 7))


@pytest.mark.sqlite_only(reason="SQLite's migration 0028, which PostgreSQL's baseline never runs")
def test_migration_0028_counts_the_records_already_waiting_and_the_triggers_keep_the_counts(tmp_path: Path) -> None:
    """A database of the release before 0028 with records waiting: the migration counts them per author, per peer
    and in all; then offers, removals and expiry keep the counts equal to a count of the area."""
    conn = database_before(tmp_path / "old.db", 28)
    rows = [(f"v{i}", f"h{i}", "entry", A if i % 2 else B0.did, PEERS[i % 3 == 0], NOW, 10 + i, b"x") for i in range(7)]
    conn.executemany(
        "INSERT INTO waiting (version, hash, kind, author_id, peer_id, arrived_ms, size, body)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    assert db.migrate(conn) >= 28
    counted = waiting.running_counts(conn)
    assert counted == waiting.recounted(conn) and counted[("all", "")] == (7, sum(r[6] for r in rows))
    with db.transaction(conn, immediate=True):
        assert waiting.offer_txn(
            conn, record_hash="h9", version="v9", kind="entry", author_id=A, peer_id=PEERS[1], body=b"abc",
            deps=["key:x"], now_ms=NOW + 1,
        )  # fmt: skip
        waiting.remove_versions_txn(conn, ["v0", "v1"])
    assert waiting.running_counts(conn) == waiting.recounted(conn)
    with db.transaction(conn, immediate=True):
        waiting.expire_txn(conn, NOW + 10 * 24 * 3600 * 1000)  # every record is past the 24 h bound
    assert waiting.running_counts(conn) == waiting.recounted(conn) == {("all", ""): (0, 0)}
    conn.close()
