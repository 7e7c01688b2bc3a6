"""node.entries.queries: reading entries by id or hash, walking the link graph, and full-text search."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest

from identity import keys
from node.entries import queries, reads
from node.search_index.indexer import Indexer
from node.service import Node
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import entry_record, hash_of, ingest
from wire.api import EntryOut, PostEntry, PostLink, SearchQuery

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def post(node: Node, who: AgentCreds, content: str, **fields: Any) -> tuple[int, str]:
    body = msgspec.convert({"entry_type": "finding", "performative": "inform", "content": content, **fields}, PostEntry)
    entry, _ = await node.entries.post(who.agent_id, body, None)
    return entry.id, entry.record_hash


async def link(node: Node, who: AgentCreds, source: int, target: int, link_type: str) -> None:
    body = msgspec.convert({"source": str(source), "target": str(target), "link_type": link_type}, PostLink)
    await node.links.create(who.agent_id, body, None)


async def search(node: Node, since_ms: int | None = None, **params: Any) -> list[Any]:
    """queries.search for a search by filters; with words, the node's search on its caught-up index."""
    q = msgspec.convert(params, SearchQuery)
    if not q.q:
        return await node.db.read(lambda c: queries.search(c, q, since_ms))
    assert node.search_index is not None
    await Indexer(node.db, node.search_index).catch_up()
    return (await node.db.read(lambda c: reads.search(c, q, since_ms, node.search_index))).entries


async def test_resolve_ref_by_local_id_or_hash(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    eid, h = await post(node, alice, "findable")
    refs = [str(eid), h, "e" * 64, "999999", str(2**63), "²", "١", "E" * 64, "abc", ""]

    def resolve_all(conn: sqlite3.Connection) -> dict[str, tuple[str | None, int | None]]:
        return {ref: queries.resolve_ref(conn, ref) for ref in refs}

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
    by_ids = await node.db.read(lambda c: queries.entries_by_ids(c, [b, a, 12345]))
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
    assert await node.db.read(lambda c: queries.entries_by_ids(c, [])) == []
    plain = await node.db.read(lambda c: queries.entries_by_hashes(c, [hb, ha, "0" * 64], False))
    assert [e.id for e in plain] == [a]
    every = await node.db.read(lambda c: queries.entries_by_hashes(c, [hb, ha], True))
    assert [e.id for e in every] == [a, b]  # oldest first
    assert sorted(by_ids, key=lambda e: e.id) == every  # rows as JSON (by ids) and as columns render alike


def test_entry_out_fills_entry_out_in_its_field_order() -> None:
    """entry_out builds EntryOut positionally (it is rendered for every entry of a page)."""
    assert EntryOut.__struct_fields__ == (
        *("id", "record_hash", "content_fingerprint", "author_id", "created_at", "entry_type", "performative"),
        *("content", "confidence", "tags", "directed_to", "metadata", "truth_state", "authority", "scope"),
        *("signature", "retracted", "superseded", "community_confidence", "superseded_claims", "equivocated"),
        "versions",
    )


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
        args = {"hops": 1, "link_types": [], "direction": "both", "include_links": True, **kw}
        return node.db.read(lambda conn: queries.traverse(conn, seeds, **args))

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
    monkeypatch.setattr(queries, "MAX_WALKED_LINKS", 3)
    _, links, truncated = await node.db.read(
        lambda c: queries.traverse(c, [hub_hash], hops=1, link_types=[], direction="both", include_links=True)
    )
    assert truncated and len(links) == 3
    monkeypatch.setattr(queries, "MAX_WALKED_LINKS", 100)
    monkeypatch.setattr(queries, "MAX_NEIGHBOURHOOD", 3)
    reached, _, truncated = await node.db.read(
        lambda c: queries.traverse(c, [hub_hash], hops=1, link_types=[], direction="both", include_links=True)
    )
    assert truncated and len(reached) == 3


def test_tagged_any_binds_each_tag_once_in_nfc() -> None:
    params: dict[str, Any] = {}
    condition = queries.tagged_any(["cafe\u0301", "café", "a\u0000b"], params)
    assert params == {"tag0": "café", "tag1": "a\u0000b"}
    assert condition == "e.id IN (SELECT entry_id FROM entry_tags WHERE tag IN (:tag0, :tag1))"


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
