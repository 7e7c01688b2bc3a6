"""A space's records go only to the nodes that host it (issue 38; docs/sync.md, "Spaces"): three real nodes on
loopback, a space on A hosted by A and B. C, peered with A for the public federation, gets no record, address or
count of the space through the changes feed, fetch by hash, reconciliation or the digest; B is served all of it.
A node named a host late finds the whole backlog by reconciliation; a node that stops hosting is served nothing new.

B does not store what it is served yet: this release takes no space record from a peer (sync/verify.py answers
`too_new`, which a later release reads again: docs/format-v3.md 8.4), so what B was served is read from its
`too_new` counter and from the reconciliation's `need`."""

from __future__ import annotations

from typing import Any

from node.spaces import store as space_store
from sync.verify import TOO_NEW, verify_record
from tests.sync.conftest import PeerNode
from wire.api import PostEntry


async def space_versions(peer: PeerNode, space: str) -> set[str]:
    sql = "SELECT version FROM records WHERE space = ?"
    return await peer.node.db.read(lambda c: {str(r[0]) for r in c.execute(sql, (space,))})


async def too_new_from(peer: PeerNode, source: PeerNode) -> int:
    statuses = await peer.sync.store.statuses()
    return next(s.counters.too_new for s in statuses if s.node_id == source.node_id)


async def post_in(peer: PeerNode, agent: str, content: str, space: str) -> str:
    entry, _ = await peer.node.entries.post(
        agent, PostEntry(entry_type="finding", performative="inform", content=content, space=space), None
    )
    return entry.record_hash


async def federation(make_peer: Any) -> tuple[PeerNode, PeerNode, PeerNode, str, str]:
    """A peered with B and C (each way); on A a space hosted by A and B, with a writer's posts, and a public post."""
    a, b, c = await make_peer("a"), await make_peer("b"), await make_peer("c")
    for one, other in ((a, b), (b, a), (a, c), (c, a)):
        await one.add_peer(other)
    owner, writer = await a.agent("owner"), await a.agent("writer")
    space = (await a.node.spaces.create(owner, "family", "")).space_id
    await a.node.spaces.set_host(owner, space, b.node_id, "host")
    await a.node.spaces.set_role(owner, space, writer, "writer")
    for n in range(3):
        await post_in(a, writer, f"family note {n}", space)
    await a.post(owner, "public news")
    return a, b, c, space, owner


async def test_a_space_goes_to_its_hosts_and_nowhere_else(make_peer: Any) -> None:
    a, b, c, space, _owner = await federation(make_peer)
    held = await space_versions(a, space)
    assert len(held) == 7  # the space, its two hosts, the writer's membership and three posts
    # the changes feed
    await c.puller().pull_once(a.config)
    await b.puller().pull_once(a.config)
    assert not held & await c.hashes()
    assert await too_new_from(c, a) == 0  # C was sent nothing of the space
    assert await too_new_from(b, a) == len(held)  # B was sent every record of it
    # fetch by address
    outcomes, missing = await c.puller().fetch_into_store(a.config, sorted(held))
    assert (outcomes, sorted(missing)) == ([], sorted(held))  # as records A does not hold
    outcomes, _ = await b.puller().fetch_into_store(a.config, sorted(held))
    assert [o.outcome for o in outcomes] == ["too_new"] * len(held)  # every one served to B (and refused there)
    # reconciliation: C's set and A's set as served to C are equal; B lacks exactly the space
    assert (await c.puller().reconcile(a.config)).need == 0
    assert (await b.puller().reconcile(a.config)).need == len(held)
    _epoch, _head, items = await a.sync.store.reconcile_items(peer_id=c.node_id)
    assert not {item.hex() for _, item in items} & held
    # the digest: the public federation's, the same on every node whatever spaces they host
    assert await a.digest() == await c.digest()
    assert await b.node.db.read(lambda conn: space_store.space(conn, space)) is None  # B stores none of it yet
    sql = "SELECT body FROM records WHERE space = ?"
    bodies = await a.node.db.read(lambda conn: [bytes(r[0]) for r in conn.execute(sql, (space,))])
    for body in bodies:  # a peer that sends one anyway is refused as a form this release does not take
        assert getattr(verify_record(body, None), "reason", None) == TOO_NEW


async def test_a_late_host_finds_the_backlog_and_a_former_host_gets_nothing_new(make_peer: Any) -> None:
    a, b, c, space, owner = await federation(make_peer)
    await c.puller().pull_once(a.config)  # C's cursor passes the space's records, which it was not served
    await b.puller().pull_once(a.config)
    backlog = await space_versions(a, space)
    await a.node.spaces.set_host(owner, space, c.node_id, "host")  # C hosts it from now on
    await a.node.spaces.set_host(owner, space, b.node_id, "none")  # and B no longer
    await post_in(a, owner, "after the change", space)
    sent_to_b = await too_new_from(b, a)
    await c.puller().pull_once(a.config)
    await b.puller().pull_once(a.config)
    assert await too_new_from(b, a) == sent_to_b  # B was sent nothing new: not the change, not the post
    # C's feed cursor was past the backlog: the feed brought only what came after it (two hosting records, a post)
    assert await too_new_from(c, a) == 3
    report = await c.puller().reconcile(a.config)  # reconciliation over the spaces both host finds all of it
    assert report.need == len(await space_versions(a, space)) == len(backlog) + 3
    assert (await b.puller().reconcile(a.config)).need == 0  # B's set as A serves it now: the public federation
