"""What each peer listed to this node is never listed back to it (sync/listed.py; docs/decisions.md record 70): the
memory bound, and three real nodes on loopback, where B lists C's record to A until A's feed lists it to B, and
then no more."""

from __future__ import annotations

from typing import Any

from sync import messages as m
from sync.listed import Listed


def item(version: str) -> m.ChangeItem:
    return m.ChangeItem(seq=1, version=version, size=10)


def test_the_last_versions_a_peer_listed_are_kept_and_only_for_that_peer() -> None:
    listed = Listed(kept=3)
    listed.note("peer", ["v1", "v2", "v3"])
    listed.note("peer", ["v1", "v4"])  # v1 listed again: the newest; v2, the oldest, goes
    items = [item(v) for v in ("v1", "v2", "v3", "v4", "v5")]
    assert [i.version for i in listed.unlisted("peer", items)] == ["v2", "v5"]
    assert listed.unlisted("other", items) == items and listed.unlisted(None, items) == items


async def test_a_record_a_peer_listed_is_not_listed_back_to_it(make_peer: Any) -> None:
    a, b, c = await make_peer("a"), await make_peer("b"), await make_peer("c")
    for one in (a, b, c):
        for other in (a, b, c):
            if one is not other:
                await one.add_peer(other)
    await c.post(await c.agent(), "from c")
    for peer in (a, b):
        await peer.puller(listed=peer.sync.server.listed).pull_once(c.config)
    sql = "SELECT version FROM records WHERE kind = 'entry'"
    (version,) = await c.node.db.read(lambda conn: [r[0] for r in conn.execute(sql)])

    async def listed_to(asker: Any, source: Any) -> set[str]:
        page = await asker.puller().client(source.config).changes(0, None, 1000, 0, ids=True)
        assert isinstance(page, m.Changes)
        return {i.version for i in page.items}

    assert version in await listed_to(a, b)  # B has not learned that A holds it yet
    await b.puller(listed=b.sync.server.listed).pull_once(a.config)  # A lists it to B: A holds it
    assert version not in await listed_to(a, b)  # so B never lists it back to A
    assert b.sync.server.listed.peers[a.node_id]


def test_a_version_is_kept_by_the_prefix_a_compact_page_announces() -> None:
    """Decision 74: a compact page names a version by its first 32 hex digits; what it listed is left out whole."""
    listed = Listed()
    whole = "5d1e" * 16
    listed.note("p", [whole[:32]])  # from a compact page
    listed.note("q", [whole])  # from a JSON page
    item = m.ChangeItem(seq=1, version=whole, size=10)
    other = m.ChangeItem(seq=2, version="6" * 64, size=10)
    assert listed.unlisted("p", [item, other]) == listed.unlisted("q", [item, other]) == [other]
    assert listed.peers["q"] == {whole[:32]: None}
