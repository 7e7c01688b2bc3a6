"""node.entries.store: reading entries by id or hash, walking the link graph, searching by filters, and the
statements of posting and linking."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from identity import keys, records
from node.entries import reads, store
from node.errors import NotFound
from node.features import LOG
from node.search_index.indexer import Indexer
from node.service import Node
from node.spaces.sight import OPERATOR, PUBLIC, Sight
from node.store import db, pg_conn, projections
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import entry_record, hash_of, ingest, link_record
from wire.api import PostEntry, PostLink, SearchQuery, SubscriptionIn

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def post(node: Node, who: AgentCreds, content: str, **fields: Any) -> tuple[int, str]:
    body = msgspec.convert({"entry_type": "finding", "performative": "inform", "content": content, **fields}, PostEntry)
    entry, _ = await node.entries.post(who.agent_id, body, None)
    return entry.id, entry.record_hash


async def link(node: Node, who: AgentCreds, source: int, target: int, link_type: str) -> None:
    body = msgspec.convert({"source": str(source), "target": str(target), "link_type": link_type}, PostLink)
    await node.links.create(who.agent_id, body, None)


async def search(node: Node, since_ms: int | None = None, **params: Any) -> list[Any]:
    """store.search for a search by filters; with words, the node's search on its caught-up index."""
    q = msgspec.convert(params, SearchQuery)
    if not q.q:
        return await node.db.read(lambda c: store.search(c, q, since_ms, sight=OPERATOR))
    assert node.search_index is not None
    await Indexer(node.db, node.search_index).catch_up()
    return (await node.db.read(lambda c: reads.search(c, q, since_ms, node.search_index, sight=OPERATOR))).entries


async def test_resolve_ref_by_local_id_or_hash(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    eid, h = await post(node, alice, "findable")
    refs = [str(eid), h, "e" * 64, "999999", str(2**63), "²", "١", "E" * 64, "abc", ""]

    def resolve_all(conn: sqlite3.Connection) -> dict[str, tuple[str | None, int | None]]:
        return {ref: store.resolve_ref(conn, ref, sight=OPERATOR) for ref in refs}

    result = await node.db.read(resolve_all)
    assert result[str(eid)] == (h, eid) and result[h] == (h, eid)
    assert result["e" * 64] == ("e" * 64, None)  # well formed: it may still arrive
    for unknown in refs[3:]:  # no such id, beyond SQLite's integers, non-ASCII digits, upper-case hex, words
        assert result[unknown] == (None, None), unknown


async def test_entries_by_ids_and_by_hashes(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    # a NUL may not be submitted (node/store/submission.py), but a peer may bring one: this entry comes by ingest
    first_record = entry_record(
        keys.SigningKey.generate(),
        "first",
        created_ms=node.now_ms(),
        tags=["x", '\u00e9"\\'],
        directed_to=[keys.SigningKey.generate().did],
        metadata={"k": [1, "\u0000"]},
        confidence=0.25,
    )
    assert await ingest(node, first_record) == "saved"
    ha = hash_of(first_record)
    a = await node.db.read(lambda c: c.execute("SELECT id FROM entries WHERE record_hash = ?", (ha,)).fetchone()[0])
    b, hb = await post(node, alice, "second, simulated", truth_state="simulation")
    by_ids = await node.db.read(lambda c: store.entries_by_ids(c, [b, a, 12345], sight=OPERATOR))
    assert sorted(e.id for e in by_ids) == [a, b]
    first = next(e for e in by_ids if e.id == a)
    assert (first.tags, first.metadata, first.confidence, first.retracted) == (
        ["x", '\u00e9"\\'],
        {"k": [1, "\u0000"]},
        0.25,
        False,
    )
    assert first.directed_to == first_record["directed_to"]
    assert first.community_confidence == 0.5  # neutral without trust signals
    assert await node.db.read(lambda c: store.entries_by_ids(c, [], sight=OPERATOR)) == []
    plain = await node.db.read(lambda c: store.entries_by_hashes(c, [hb, ha, "0" * 64], False, sight=OPERATOR))
    assert [e.id for e in plain] == [a]
    every = await node.db.read(lambda c: store.entries_by_hashes(c, [hb, ha], True, sight=OPERATOR))
    assert [e.id for e in every] == [a, b]  # oldest first
    assert sorted(by_ids, key=lambda e: e.id) == every  # rows as JSON (by ids) and as columns render alike


async def test_traverse_by_hops_direction_and_type(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    a, ha = await post(node, alice, "a")
    b, hb = await post(node, alice, "b")
    c, hc = await post(node, alice, "c")
    d, hd = await post(node, alice, "d")
    assert len({a, b, c, d}) == 4
    await link(node, alice, a, b, "supports")  # a -> b -> c, d -> a
    await link(node, alice, b, c, "contradicts")
    await link(node, alice, d, a, "supports")

    def walk(seeds: list[str], **kw: Any) -> Awaitable[tuple[list[str], list[Any], bool]]:
        args = {"hops": 1, "link_types": [], "direction": "both", "include_links": True, "sight": OPERATOR, **kw}
        return node.db.read(lambda conn: store.traverse(conn, seeds, **args))

    reached, links, truncated = await walk([ha], hops=0)
    assert reached == [ha] and len(links) == 2 and not truncated  # incident links, not walked
    assert (await walk([ha], hops=0, include_links=False))[1] == []
    reached, links, _ = await walk([ha], hops=1)
    assert set(reached) == {ha, hb, hd} and len(links) == 2
    reached, _, _ = await walk([ha], hops=2)
    assert set(reached) == {ha, hb, hc, hd}
    reached, links, _ = await walk([ha], hops=3, direction="outbound")
    assert reached == [ha, hb, hc] and [link.link_type for link in links] == ["supports", "contradicts"]
    reached, _, _ = await walk([ha], hops=3, direction="inbound")
    assert reached == [ha, hd]
    reached, links, _ = await walk([ha], hops=3, link_types=["supports"])
    assert set(reached) == {ha, hb, hd} and {link.link_type for link in links} == {"supports"}
    reached, links, _ = await walk([ha], hops=3, include_links=False)
    assert len(reached) == 4 and links == []


async def test_traverse_stops_at_its_limits_and_says_so(
    node: Node, make_agent: MakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = await make_agent("alice")
    hub, hub_hash = await post(node, alice, "hub")
    for i in range(5):
        spoke, _ = await post(node, alice, f"spoke {i}")
        await link(node, alice, spoke, hub, "supports")
    monkeypatch.setattr(store, "MAX_WALKED_LINKS", 3)
    _, links, truncated = await node.db.read(
        lambda c: store.traverse(
            c, [hub_hash], hops=1, link_types=[], direction="both", include_links=True, sight=OPERATOR
        )
    )
    assert truncated and len(links) == 3
    monkeypatch.setattr(store, "MAX_WALKED_LINKS", 100)
    monkeypatch.setattr(store, "MAX_NEIGHBOURHOOD", 3)
    reached, _, truncated = await node.db.read(
        lambda c: store.traverse(
            c, [hub_hash], hops=1, link_types=[], direction="both", include_links=True, sight=OPERATOR
        )
    )
    assert truncated and len(reached) == 3


async def test_search_filters_and_orders(node: Node, make_agent: MakeAgent, clock: FakeClock) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    old, _ = await post(node, alice, "the kettle is descaled", tags=["home"], confidence=0.9)
    clock.advance(60)
    cut = node.now_ms()
    q, _ = await post(node, bob, "is the kettle broken?", entry_type="question", performative="query", tags=["home"])
    sim, _ = await post(node, bob, "a simulated kettle", truth_state="simulation")
    other, _ = await post(node, alice, "the garden needs water", confidence=0.2)

    def ids(entries: list[Any]) -> list[int]:
        return [e.id for e in entries]

    assert ids(await search(node)) == [other, q, old]  # newest first, simulations hidden
    assert ids(await search(node, include_synthetic=True)) == [other, sim, q, old]
    assert set(ids(await search(node, q="kettle"))) == {old, q}
    assert ids(await search(node, q="kettle", include_synthetic=True, entry_type=["finding"])) in (
        [old, sim],
        [sim, old],
    )
    assert ids(await search(node, q="kettle broken")) == [q]  # every word must match
    assert ids(await search(node, tags=["home"], author=[alice.agent_id])) == [old]
    assert ids(await search(node, performative=["query"])) == [q]
    assert ids(await search(node, min_confidence=0.5)) == [q, old]  # inclusive
    assert ids(await search(node, min_confidence=0.6)) == [old]
    assert ids(await search(node, since_ms=cut)) == [other, q]
    assert ids(await search(node, truth_state=["simulation"], include_synthetic=True)) == [sim]
    assert ids(await search(node, limit=1, offset=1)) == [q]
    assert ids(await search(node, q="nothing matches this")) == []
    assert ids(await search(node, min_trust=0.5)) == [other, q, old]  # neutral 0.5 without trust signals
    assert len(await search(node, sort="trust")) == 3
    assert len(await search(node, q="kettle", sort="community_confidence")) == 2


# ---- the statements of posting and linking --------------------------------------------------------------------


async def test_entry_reads_by_hash(node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    eid, h = await post(node, alice, "by hash")
    bid, bh = await post(node, bob, "another")

    def read(conn: sqlite3.Connection) -> Any:
        return (
            store.entry_by_hash(conn, h),
            store.entry_id_txn(conn, h),
            store.entry_id_txn(conn, bh),
            store.author_of(conn, h),
            store.author_of(conn, bh),
            store.author_of(conn, "e" * 64),
            store.entry_stored_txn(conn, h),
            store.entry_stored_txn(conn, "e" * 64),
        )

    entry, id_a, id_b, author_a, author_b, nobody, stored, absent = await node.db.read(read)
    assert (entry.id, entry.record_hash, entry.content, entry.author_id) == (eid, h, "by hash", alice.agent_id)
    assert entry == (await node.db.read(lambda c: store.entries_by_ids(c, [eid], sight=OPERATOR)))[0]
    assert (id_a, id_b) == (eid, bid)
    assert (author_a, author_b, nobody) == (alice.agent_id, bob.agent_id, None)
    assert (stored, absent) == (True, False)


async def test_stored_body_is_the_records_canonical_bytes(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    _, h = await post(node, alice, "its bytes")
    body = await node.db.read(lambda c: store.stored_body(c, h))
    record = await node.db.read(
        lambda c: bytes(c.execute("SELECT body FROM records WHERE hash = ?", (h,)).fetchone()[0])
    )
    assert body == record and b'"content":"its bytes"' in body


async def test_link_reads_by_origin_id_and_sameness(node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    a, ha = await post(node, alice, "source")
    b, hb = await post(node, alice, "target")
    await link(node, alice, a, b, "supports")
    await link(node, bob, a, b, "supports")
    await link(node, alice, a, b, "derived_from")
    rows = await node.db.read(
        lambda c: c.execute("SELECT id, origin_hash, author_id, link_type FROM links ORDER BY id").fetchall()
    )
    (id1, origin1, _, _), (id2, origin2, _, _), (id3, _, _, _) = rows

    def read(conn: sqlite3.Connection) -> Any:
        return (
            store.link_id_of_txn(conn, origin1),
            store.link_id_of_txn(conn, origin2),
            store.link_by_origin(conn, origin2),
            store.link_by_id(conn, id1),
            store.same_link_txn(conn, ha, hb, "supports", alice.agent_id),
            store.same_link_txn(conn, ha, hb, "supports", bob.agent_id),
            store.same_link_txn(conn, hb, ha, "supports", alice.agent_id),
            store.same_link_txn(conn, ha, hb, "contradicts", alice.agent_id),
            store.derived_link_held_txn(conn, ha, hb, alice.agent_id),
            store.derived_link_held_txn(conn, ha, hb, bob.agent_id),
            store.derived_link_held_txn(conn, hb, ha, alice.agent_id),
        )

    got = await node.db.read(read)
    assert got[0:2] == (id1, id2)
    by_origin, by_id = got[2], got[3]
    assert (by_origin.id, by_origin.author_id, by_origin.source, by_origin.target) == (id2, bob.agent_id, ha, hb)
    assert (by_id.id, by_id.origin_hash, by_id.link_type, by_id.resolved, by_id.derived) == (
        id1,
        origin1,
        "supports",
        True,
        False,
    )
    assert got[4] == (id1, origin1, "link") and got[5] == (id2, origin2, "link")
    assert got[6] is None and got[7] is None  # another direction, another type
    assert got[8:] == (True, False, False)
    assert id3 > id2


async def test_same_link_names_an_entrys_own_link_by_its_entry_record(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    _, ht = await post(node, alice, "target")
    _, hs = await post(node, alice, "responding", links=[{"target": ht, "link_type": "responds_to"}])
    same = await node.db.read(lambda c: store.same_link_txn(c, hs, ht, "responds_to", alice.agent_id))
    assert same is not None and same[1:] == (hs, "entry")  # asserted by the entry itself, not by a link record


async def test_entry_states_and_held_refs(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    a, ha = await post(node, alice, "old")
    b, hb = await post(node, alice, "new", links=[{"target": ha, "link_type": "supersedes"}])
    c, hc = await post(node, alice, "pretend", truth_state="simulation")
    states = await node.db.read(lambda conn: store.entry_states(conn, [a, b, c, 424242]))
    assert set(states) == {a, b, c}
    assert states[a].superseded and not states[a].retracted and states[a].superseded_claims == []
    assert not states[b].superseded and not states[b].equivocated
    assert states[a].community_confidence == 0.5  # neither computed nor trusted: neutral
    refs = [ha, str(b), hc, str(c), "e" * 64, "424242", str(2**63), "²", "E" * 64, ""]
    held = await node.db.read(lambda conn: store.held_refs(conn, refs, OPERATOR))
    assert held == {
        ha: store.Held(ha, a, False),
        str(b): store.Held(hb, b, False),
        hc: store.Held(hc, c, True),
        str(c): store.Held(hc, c, True),
    }  # the rest name nothing held: not held, beyond SQLite's integers, non-ASCII digits, upper-case hex, empty
    assert await node.db.read(lambda conn: store.held_refs(conn, ["abc", "E" * 64], OPERATOR)) == {}


async def test_require_ref_names_its_field_and_code(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    eid, h = await post(node, alice, "here")
    assert await node.db.read(lambda c: store.require_ref(c, str(eid), "x", field="$.f", code="c", sight=OPERATOR)) == h
    assert (
        await node.db.read(lambda c: store.require_ref(c, "e" * 64, "x", field="$.f", code="c", sight=OPERATOR))
        == "e" * 64
    )
    with pytest.raises(NotFound) as not_stored:
        await node.db.read(
            lambda c: store.require_ref(c, "e" * 64, "source", field="$.s", code="gone", stored=True, sight=OPERATOR)
        )
    assert (not_stored.value.field, not_stored.value.code) == ("$.s", "gone")
    with pytest.raises(NotFound) as unknown:
        await node.db.read(
            lambda c: store.require_ref(c, "nonsense", "target", field="$.t", code="nope", sight=OPERATOR)
        )
    assert (unknown.value.field, unknown.value.code) == ("$.t", "nope")


async def test_look_ahead_reads_held_versions_named_links_and_confidence(node: Node, make_agent: MakeAgent) -> None:
    """One statement before a run's append: what is held of its addresses, what stored links say of them, and the
    community confidence each would show (its computed value, else its author's trust, else 0.5)."""
    alice, bob = await make_agent("alice"), await make_agent("bob")
    _, held_hash = await post(node, alice, "stored already")
    fresh, superseded, contradicted, rated = "a" * 64, "b" * 64, "c" * 64, "d" * 64
    await post(node, bob, "supersedes one to come", links=[{"target": superseded, "link_type": "supersedes"}])
    await post(node, bob, "contradicts one to come", links=[{"target": contradicted, "link_type": "contradicts"}])

    def setup(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO trust_scores VALUES (?, 3, 1, 0.66, 0.7071, 3.0, 1.0)", (bob.agent_id,))
        conn.execute("INSERT INTO entry_confidence VALUES (?, 0.25, 1, 3)", (rated,))

    await node.db.write(setup)

    async def look(pairs: list[tuple[str, str]]) -> store.LookAhead:
        return await node.db.write(lambda c: store.look_ahead_txn(c, pairs))

    plain = await look([(fresh, alice.agent_id), (rated, alice.agent_id), (fresh.replace("a", "e"), bob.agent_id)])
    assert plain.held == {}
    assert plain.named == (False, False, False)
    assert plain.confidence == {fresh: 0.5, rated: 0.25, "e" * 64: 0.7071}
    assert (await look([(superseded, alice.agent_id)])).named.superseded
    named = (await look([(contradicted, alice.agent_id)])).named
    assert named.contradicted and not named.superseded
    again = await look([(held_hash, alice.agent_id)])
    assert list(again.held) == [held_hash] and len(again.held[held_hash]) == 1
    await node.inbox.subscribe(alice.agent_id, msgspec.convert({"tags": ["x"]}, SubscriptionIn))
    assert (await look([(fresh, alice.agent_id)])).named.subscribed


# ---- the reads by hash and the posting path's look-ups on both engines ----------------------------------------


def _reads_story(conn: Any) -> list[Any]:
    """Append one log (entries, a link record, a simulation, a retraction) and ask every read ported to both
    engines the same questions; their answers, in order."""
    alice, bob = _STORY_KEYS
    target = entry_record(bob, "the target", created_ms=_T0, tags=["b"])
    claim = entry_record(alice, "a claim", created_ms=_T0 + 1, tags=["a", "b"])
    imagined = entry_record(alice, IMAGINED, created_ms=_T0 + 2, truth_state="simulation", tags=["\x00", "b\x01"])
    retract = entry_record(
        alice,
        "I retract it",
        created_ms=_T0 + 3,
        performative="retract",
        links=[{"target": hash_of(claim), "link_type": "supersedes", "annotation": ""}],
    )
    link = link_record(bob, hash_of(claim), hash_of(target), "contradicts", created_ms=_T0 + 4)
    story = [target, claim, imagined, retract, link]
    conn.execute("BEGIN")
    projections.append_many(
        conn, [projections.Incoming(r, *records.check(r)) for r in story], origin="local", now_ms=_T0
    )
    conn.execute("COMMIT")
    hashes = [hash_of(r) for r in (target, claim, imagined, retract)]
    link_hash = hash_of(link)
    return [
        [store.entry_by_hash(conn, h) for h in hashes],
        store.entries_by_hashes(conn, [*hashes, "0" * 64], False, OPERATOR),
        store.entries_by_hashes(conn, hashes, True, PUBLIC),
        store.held_refs(conn, [*hashes, "0" * 64], OPERATOR),
        [store.author_of(conn, h) for h in [*hashes, "0" * 64]],
        [store.stored_body(conn, h) for h in hashes],
        [store.entry_stored_txn(conn, h) for h in (hashes[0], "0" * 64)],
        store.link_by_origin(conn, link_hash),
        store.link_by_id(conn, store.link_id_of_txn(conn, link_hash)),
        store.same_link_txn(conn, hash_of(claim), hash_of(target), "contradicts", bob.did),
        store.same_link_txn(conn, hash_of(claim), hash_of(target), "contradicts", bob.did, "f" * 64),
        store.derived_link_held_txn(conn, hash_of(claim), hash_of(target), bob.did),
        store.look_ahead_txn(conn, [(hashes[0], bob.did), (hashes[1], alice.did), ("0" * 64, alice.did)]),
        store.look_ahead_txn(conn, []),
        *(store.search(conn, SearchQuery(**q), since, sight) for q, since, sight in _searches(alice.did)),
        sorted(store.entries_by_ids(conn, [1, 2, 3, 4, 99], OPERATOR), key=lambda e: e.id),
        store.entries_by_ids(conn, [], PUBLIC),
        store.entry_states(conn, [1, 2, 3, 4]),
        *(
            store.traverse(
                conn,
                [hash_of(claim)],
                hops=2,
                link_types=types,
                direction=way,
                include_links=True,
                sight=PUBLIC,
                include_synthetic=False,
            )
            for types in ([], ["contradicts"])
            for way in ("outbound", "inbound", "both")
        ),
    ]


def _searches(alice: str) -> list[tuple[dict[str, Any], int | None, Sight]]:
    """Searches by filters alone (no words), as `store.search` answers them."""
    return [
        ({}, None, OPERATOR),
        ({"include_synthetic": True, "sort": "community_confidence"}, None, PUBLIC),
        ({"tags": ["b"], "author": [alice]}, None, OPERATOR),
        ({"entry_type": ["finding"], "performative": ["retract", "inform"], "truth_state": ["fact"]}, _T0 + 1, PUBLIC),
        ({"min_confidence": 0.5, "min_trust": 0.5, "sort": "trust", "limit": 2, "offset": 1}, None, OPERATOR),
    ]


_STORY_KEYS = (keys.SigningKey.generate(), keys.SigningKey.generate())
# a peer's text with a NUL, the PostgreSQL connection's escape character and what its escapes look like inside JSON
# (docs/decisions.md record 84): read back as it was by every read, entries_by_ids' JSON built by the server included
IMAGINED = "imagined\x00, \x01\x02, \\u0001\\u0001 and \\\x01"
_T0 = 1_767_323_045_000


def test_the_reads_answer_alike_on_either_engine(tmp_path: Path, pg_migrated_url: str) -> None:
    answers = []
    for conn in (db.connect(tmp_path / "reads.db", log=LOG), pg_conn.connect(pg_migrated_url, log=LOG)):
        try:
            if isinstance(conn, sqlite3.Connection):
                db.migrate(conn)
            answers.append(_reads_story(conn))
        finally:
            conn.close()
    sqlite_answers, postgres_answers = answers
    assert postgres_answers == sqlite_answers
    by_hash, plain, public, held, authors, _, stored, by_origin, by_id, same, same_elsewhere, _, ahead, _ = (
        sqlite_answers[:14]
    )
    every, with_simulations, tagged, filtered, paged = sqlite_answers[14:19]
    by_ids, no_ids, states = sqlite_answers[19:22]
    assert [e.id for e in by_ids] == [1, 2, 3, 4] and no_ids == [] and states[2].retracted
    walks = sqlite_answers[22:]
    # from the claim, two hops: out, its contradiction of the target and its derived retracted_by, then the
    # retraction's supersedes; in, that supersedes, then the retracted_by into the retraction; both, all three; only
    # contradicts links: the one out of the claim
    assert [len(links) for _, links, _ in walks] == [3, 2, 3, 1, 0, 1]
    assert [e.content for e in every] == ["I retract it", "a claim", "the target"]  # newest first
    assert len(with_simulations) == 4 and [e.content for e in tagged] == ["a claim"]
    assert [e.content for e in filtered] == ["I retract it", "a claim"] and len(paged) == 2
    assert [e.content for e in plain] == ["the target", "a claim", "I retract it"]  # no simulation, none absent
    assert [e.content for e in public][2] == IMAGINED and len(public) == 4
    assert {h for h, one in held.items() if one.synthetic} == {by_hash[2].record_hash} and held.keys() == {
        e.record_hash for e in by_hash
    }
    assert by_hash[1].retracted and authors[-1] is None
    assert stored == [True, False] and by_origin == by_id and by_origin.link_type == "contradicts"
    assert same is not None and same[2] == "link" and same_elsewhere is None
    assert sorted(ahead.held) == sorted(by_hash[i].record_hash for i in (0, 1)) and ahead.named.contradicted
    assert ahead.confidence == {by_hash[0].record_hash: 0.5, by_hash[1].record_hash: 0.5, "0" * 64: 0.5}
