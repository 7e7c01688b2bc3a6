"""A space's records go to the nodes that host it and nowhere else (issue 38; docs/sync.md, "Spaces"): three real
nodes on loopback, a space on A hosted by A and B. B receives all of it through the feed, and its projection holds
the space; C, peered with A for the public federation, gets no record, address or count of it through the changes
feed, fetch by hash, reconciliation or the digest. A node named a host late gets the whole backlog by
reconciliation; a node that stops hosting is served nothing new but the record that removes it."""

from __future__ import annotations

from typing import Any

from node.spaces import store as space_store
from tests.sync.conftest import PeerNode
from wire.api import LinkSpec, PostEntry


async def space_versions(peer: PeerNode, space: str) -> set[str]:
    sql = "SELECT version FROM records WHERE space = ?"
    return await peer.node.db.read(lambda c: {str(r[0]) for r in c.execute(sql, (space,))})


async def post_in(peer: PeerNode, agent: str, content: str, space: str) -> str:
    entry, _ = await peer.node.entries.post(
        agent, PostEntry(entry_type="finding", performative="inform", content=content, space=space), None
    )
    return entry.record_hash


async def refusals(peer: PeerNode, source: PeerNode) -> dict[str, int]:
    statuses = await peer.sync.store.statuses()
    return next(s.counters.invalid_reasons for s in statuses if s.node_id == source.node_id)


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
    # the changes feed: B stores all of it and holds the space as A does; C gets nothing of it
    await c.puller().pull_once(a.config)
    await b.puller().pull_once(a.config)
    assert await space_versions(b, space) == held
    assert await b.node.db.read(lambda conn: space_store.hosts(conn, space)) == sorted([a.node_id, b.node_id])
    assert await b.node.db.read(lambda conn: space_store.space(conn, space)) is not None
    assert not held & await c.hashes() and await refusals(c, a) == {}  # not even refused: never sent
    # fetch by address: as records A does not hold
    outcomes, missing = await c.puller().fetch_into_store(a.config, sorted(held))
    assert (outcomes, sorted(missing)) == ([], sorted(held))
    # reconciliation: each side's set as served to the other is equal, so nothing is needed, either way
    assert (await c.puller().reconcile(a.config)).need == 0
    assert (await b.puller().reconcile(a.config)).need == 0
    _epoch, _head, items = await a.sync.store.reconcile_items(peer_id=c.node_id)
    assert not {item.hex() for _, item in items} & held
    _epoch, _head, items = await a.sync.store.reconcile_items(peer_id=b.node_id)
    assert held <= {item.hex() for _, item in items}
    # the digest is the public federation's: the same on every node whatever spaces it hosts; a space's digest is
    # the same on its hosts, and counts nothing elsewhere
    assert await a.digest() == await b.digest() == await c.digest()
    per_space = [await p.sync.store.digest(space=space) for p in (a, b, c)]
    assert (per_space[0].count, per_space[0].sha256) == (per_space[1].count, per_space[1].sha256)
    assert per_space[0].count == len(held) and per_space[2].count == 0
    async with a.session.get(a.url + "/v1/sync/digest", params={"space": space}, headers=a.admin) as resp:
        assert resp.status == 200 and (await resp.json())["sha256"] == per_space[0].sha256
    async with a.session.get(a.url + "/v1/sync/digest", params={"space": "family"}, headers=a.admin) as resp:
        problem = await resp.json()
        assert resp.status == 422 and (problem["code"], problem["field"]) == ("validation_error", "$.space")


async def test_a_late_host_gets_the_backlog_and_a_former_host_nothing_new(make_peer: Any) -> None:
    a, b, c, space, owner = await federation(make_peer)
    await c.puller().pull_once(a.config)  # C's cursor passes the space's records, which it was not served
    await b.puller().pull_once(a.config)
    await a.node.spaces.set_host(owner, space, c.node_id, "host")  # C hosts the space from now on
    await a.node.spaces.set_host(owner, space, b.node_id, "none")  # and B no longer
    late = await post_in(a, owner, "after the change", space)
    b_before = await space_versions(b, space)
    await b.puller().pull_once(a.config)
    await b.puller().reconcile(a.config)
    # B is served nothing new of the space but the hosting record that removes it, which it takes: it stops hosting
    (removal,) = await space_versions(b, space) - b_before
    assert late not in await b.hashes()
    assert await b.node.db.read(lambda conn: space_store.hosts(conn, space)) == [a.node_id]
    before = await b.node.db.read(lambda conn: space_store.hosts(conn, space))
    assert b.node_id not in before
    # so B serves the space to no one: A's reconciliation with B fetches nothing (B names only A's hosting record,
    # which A holds)
    report = await a.puller().reconcile(b.config)
    assert report.outcomes == [] and removal in await space_versions(a, space)
    # C's feed brings what came after its cursor, which C cannot decide alone (the creation is not held): refused,
    # never remembered; reconciliation over the spaces both host then brings the whole backlog at once
    await c.puller().pull_once(a.config)
    assert await refusals(c, a) == {"not_hosted": 3}
    # the hosting record naming C asks C's puller to reconcile with A at once (within WAKE_EVERY_S, not 300 s)
    assert await c.sync.store.reconcile_wanted() == {a.node_id}
    assert await b.sync.store.reconcile_wanted() == set()
    report = await c.puller().reconcile(a.config)
    assert report.need == len(await space_versions(a, space))
    assert await space_versions(c, space) == await space_versions(a, space)
    assert late in await c.hashes()
    assert await c.node.db.read(lambda conn: space_store.hosts(conn, space)) == sorted([a.node_id, c.node_id])


async def set_filter(peer: PeerNode, other: PeerNode, spaces: list[str] | None, status: int = 201) -> dict[str, Any]:
    body = {"url": other.url, "node_id": other.node_id, "spaces": spaces}
    async with peer.session.post(peer.url + "/v1/peers", json=body, headers=peer.admin) as resp:
        assert resp.status == status, await resp.text()
        out: dict[str, Any] = await resp.json()
        return out


async def test_an_operators_filter_limits_what_a_peer_is_served_and_what_is_taken_from_it(make_peer: Any) -> None:
    a, b, _c, space, _owner = await federation(make_peer)
    problem = await set_filter(a, b, ["family"], status=422)
    assert (problem["code"], problem["field"]) == ("validation_error", "$.spaces[0]")
    assert (await set_filter(a, b, []))["spaces"] == []  # A serves B the public federation only
    await b.puller().pull_once(a.config)
    assert await space_versions(b, space) == set() and await refusals(b, a) == {}  # never sent
    assert (await b.puller().reconcile(a.config)).need == 0
    assert (await set_filter(a, b, [space]))["spaces"] == [space]  # A serves it again
    await set_filter(b, a, [])  # but B's operator takes nothing of a space from A: B reconciles only the public
    report = await b.puller().reconcile(a.config)  # federation (A offers the space; B's filter leaves it out)
    assert (report.sets, report.need) == (1, 0)
    assert await space_versions(b, space) == set() and await refusals(b, a) == {}  # nothing fetched to refuse
    await set_filter(b, a, None)  # no filter: every space both host
    await b.puller().reconcile(a.config)
    assert await space_versions(b, space) == await space_versions(a, space)


async def test_running_nodes_deliver_a_space_to_a_late_host_without_waiting_for_the_reconciliation_round(
    make_peer: Any,
) -> None:
    """Three nodes with their schedulers running: the hosting record naming C wakes C's reconciliation with A at once,
    so C holds the space's backlog long before the 300 s reconciliation round; B keeps it; nothing reaches C before."""
    from tests.sync.test_federation import eventually

    a, b, c = [await make_peer(n, scheduler=True) for n in "abc"]
    for one, other in ((a, b), (b, a), (a, c), (c, a)):
        await one.add_peer(other)
    owner = await a.agent("owner")
    space = (await a.node.spaces.create(owner, "family", "")).space_id
    await a.node.spaces.set_host(owner, space, b.node_id, "host")
    for n in range(3):
        await post_in(a, owner, f"family note {n}", space)
    news = await a.post(owner, "public news")

    async def b_and_c_caught_up() -> bool:
        return news in await c.hashes() and await space_versions(b, space) == await space_versions(a, space)

    await eventually(b_and_c_caught_up)
    assert await space_versions(c, space) == set()
    await a.node.spaces.set_host(owner, space, c.node_id, "host")

    async def c_holds_the_space() -> bool:
        return await space_versions(c, space) == await space_versions(a, space)

    await eventually(c_holds_the_space)  # a bound for a broken build: the round is 300 s, this waits at most 20


async def test_a_peer_speaking_v2_is_served_nothing_of_a_space_even_as_its_host(make_peer: Any) -> None:
    """Mixed versions (docs/format-v3.md 8.2): a record of a space is no v2-compatible form, so a host speaking
    protocol v2 gets none of it through the feed, fetch or reconciliation (it could store none); at v3 it gets all."""
    from tests.sync.test_compat import reconcile_need, signed

    a, b, _c, space, _owner = await federation(make_peer)
    held = await space_versions(a, space)
    for v, expected in ((2, set()), (3, held)):
        status, page = await signed(b, a, "GET", f"/v1/sync/changes?since=0&v={v}&limit=1000")
        assert status == 200, page
        assert {item["version"] for item in page["items"]} & held == expected
        status, reply = await signed(b, a, "POST", "/v1/sync/fetch", {"type": "fetch", "v": v, "hashes": sorted(held)})
        assert status == 200 and {item["version"] for item in reply["items"]} == expected
        assert await reconcile_need(b, a, v) & held == expected


async def test_a_public_record_naming_a_spaces_entry_is_held_by_no_host_in_either_order(make_peer: Any) -> None:
    """A member who saw a space entry's address posts a public link to it on C, a node that does not host the space
    (C cannot know). A, which holds the entry, refuses the link when it comes (`link_across_spaces`); B takes it
    first, then flags it void when the entry comes. The hosts end with the same public and space digests, neither
    serves the link; C keeps it (docs/decisions.md record 75)."""
    a, b, c, space, _owner = await federation(make_peer)
    for one, other in ((b, c), (c, b)):
        await one.add_peer(other)
    named = sorted(await space_versions(a, space))
    entry = await a.node.db.read(
        lambda conn: str(conn.execute("SELECT hash FROM records WHERE kind = 'entry' AND space = ?", (space,))
                         .fetchone()[0])
    )  # fmt: skip
    mallory = await c.agent("mallory")
    link = await c.post(mallory, "look at this", links=[LinkSpec(target=entry, link_type="responds_to")])
    assert named and link not in named
    await b.puller().pull_once(c.config)  # B: the link first (its target not held: taken, as C took it)
    assert link in await b.hashes()
    await b.puller().pull_once(a.config)  # then the space: the link is flagged void
    await a.puller().pull_once(c.config)  # A: the entry first, then the link: refused
    assert link not in await a.hashes() and (await refusals(a, c)).get("link_across_spaces") == 1
    flagged = await b.node.db.read(lambda conn: conn.execute("SELECT hash, reason FROM void_records").fetchall())
    assert [tuple(r) for r in flagged] == [(link, "space_link_across_spaces")]
    assert await a.digest() == await b.digest() != await c.digest()
    hosts = [await p.sync.store.digest(space=space) for p in (a, b)]
    assert (hosts[0].count, hosts[0].sha256) == (hosts[1].count, hosts[1].sha256)
    for host in (a, b):  # neither serves the link to C's peers: fetch by address finds nothing
        outcomes, missing = await c.puller().fetch_into_store(host.config, [link])
        assert outcomes == [] and missing == [link]
