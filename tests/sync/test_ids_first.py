"""Ids first (sync/ids_first.py; docs/decisions.md record 70; docs/sync.md, "Ids first"): a page of the changes feed
asked with `ids=1` names versions and sizes; the puller fetches only the bodies it lacks, once, and never moves its
cursor past a record it neither holds nor fetched. Memory stores behind the real server for the page logic; real
nodes on loopback for the wire, a triangle, purged and redacted records, bad values of the parameter, and a node of
the previous release (a real `bbs serve` of that commit) that refuses the parameter."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from identity import keys
from scenarios.space_sim import _entry
from sync import messages as m
from sync.auth import sign_headers
from sync.client import SyncError
from sync.ids_first import FeedModes, Policy, read_page, resolve
from sync.memory import MemoryStore
from sync.server import SyncServer
from sync.store import Cursor, PeerConfig, Verified
from tests.sync.conftest import PeerNode
from tests.sync.test_space_hosting import post_in, space_versions
from tests.sync.test_v2_upgrade import ENV, REPO, Proc

# the last commit of main before ids first: a node of the previous release, which does not know `ids`
PREVIOUS_RELEASE = "a03dc32a5468eee39429ca9627fee094e4261aa0"
MS = 1_700_000_000_000


def memory_pair(records: int, space: str | None = None) -> tuple[MemoryStore, SyncServer, MemoryStore, list[Verified]]:
    """A source holding `records` entries (of `space` when given, hosted by both) and an empty receiver."""
    author, receiver = keys.SigningKey.generate(), keys.SigningKey.generate()
    hosts = {} if space is None else {space: frozenset({author.did, receiver.did})}
    source = MemoryStore(node_id=author.did, hosts=dict(hosts))
    made = [_entry(author, f"note {n}", MS + n, space) for n in range(records)]
    for v in made:
        source.add(v)
    return source, SyncServer(source), MemoryStore(node_id=receiver.did, hosts=dict(hosts)), made


def ids_query(since: int = 0) -> m.ChangesQuery:
    return m.ChangesQuery(v=m.PROTOCOL_VERSION, since=since, ids=1)


async def test_an_ids_page_names_each_version_and_its_size_and_carries_no_body() -> None:
    _source, server, receiver, made = memory_pair(3)
    page = await server.changes(ids_query(), receiver.node_id)
    assert isinstance(page, m.Changes)
    assert [(i.version, i.size) for i in page.items] == [(v.version, len(v.body)) for v in made]
    assert all(i.record is msgspec.UNSET and i.hash == "" for i in page.items)
    raw = msgspec.json.encode(page)
    assert b'"record"' not in raw and b'"hash"' not in raw and not any(v.hash.encode() in raw for v in made)
    with pytest.raises(ValueError, match="carries no body"):
        page.items[0].body()


async def test_only_bodies_not_held_nor_refused_are_fetched_once_and_the_cursor_follows_the_page() -> None:
    source, server, receiver, made = memory_pair(5)
    receiver.add(made[1])  # held
    receiver.rejected.add(made[3].version)  # refused here (its address holds two better versions, say)
    asked: list[list[str]] = []

    async def fetch(versions: list[str]) -> m.Records:
        asked.append(versions)
        return await server.fetch(m.FetchRequest(hashes=versions), receiver.node_id)

    reply = await server.changes(ids_query(), receiver.node_id)
    assert isinstance(reply, m.Changes)
    resolved = await resolve(receiver, fetch, reply)
    assert asked == [[made[0].version, made[2].version, made[4].version]]  # one request, each body once
    assert [i.body() for i in resolved.page.items] == [made[n].body for n in (0, 2, 4)]
    assert [i.seq for i in resolved.page.items] == [1, 3, 5]  # at their seqs on the source
    assert (resolved.page.next, resolved.page.more) == (reply.next, reply.more) == (len(source.log), False)
    assert (resolved.announced, resolved.held, resolved.fetched, resolved.missed) == (5, 2, 3, 0)


async def test_a_page_of_bodies_from_a_peer_that_ignored_ids_is_taken_as_it_is() -> None:
    _source, server, receiver, made = memory_pair(2)
    bodies = await server.changes(m.ChangesQuery(v=m.PROTOCOL_VERSION), receiver.node_id)  # `ids` not honoured
    assert isinstance(bodies, m.Changes)
    asked: list[str] = []

    async def fetch(versions: list[str]) -> m.Records:
        asked.extend(versions)
        return await server.fetch(m.FetchRequest(hashes=versions), receiver.node_id)

    resolved = await resolve(receiver, fetch, bodies)
    assert asked == [] and resolved.page is bodies and [i.body() for i in bodies.items] == [v.body for v in made]


async def test_a_body_the_fetch_does_not_return_stops_the_cursor_before_it_and_the_feed_is_read_on_by_bodies() -> None:
    space = "ab" * 32
    source, server, receiver, made = memory_pair(4, space)
    feeds = FeedModes("ids")
    served = dict(source.hosts)

    async def ask(ids: int) -> m.ChangesReply:
        cursor = receiver.cursors.get(source.node_id)
        query = m.ChangesQuery(v=m.PROTOCOL_VERSION, since=cursor.seq if cursor else 0, ids=int(ids))
        reply = await server.changes(query, receiver.node_id)
        assert not isinstance(reply, m.IdsPage)  # read_page asks ids=2 only of a caller that gives `bodies`
        return reply

    async def fetch(versions: list[str]) -> m.Records:
        source.hosts = {}  # between the ids page and the fetch, the source stops serving the space to the receiver
        try:
            return await server.fetch(m.FetchRequest(hashes=versions), receiver.node_id)
        finally:
            source.hosts = dict(served)  # and serves it again before the next page

    page = await read_page(feeds, receiver, source.node_id, ask, fetch)
    assert isinstance(page, m.Changes)
    assert (page.items, page.next, page.more) == ([], 0, True)  # the first body missed: the cursor stays before it
    await receiver.ingest(source.node_id, [], [], Cursor(page.epoch, page.next))
    assert not feeds.ids_for(source.node_id)  # the next page by bodies: the feed itself says what is still served
    page = await read_page(feeds, receiver, source.node_id, ask, fetch)
    assert isinstance(page, m.Changes) and [i.body() for i in page.items] == [v.body for v in made]
    assert feeds.ids_for(source.node_id)  # once only


async def test_a_fetch_that_fails_stores_nothing_and_keeps_the_cursor(make_peer: Any) -> None:
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    writer = await a.agent()
    await a.post(writer, "one")
    puller = b.puller()
    client = puller.client(a.config)
    real_fetch, real_bodies = client.fetch, client.bodies

    async def fetch_after_a_stops(versions: list[str]) -> m.Records:
        await a.server.close()  # A goes away between its ids page and the fetch
        return await real_fetch(versions)

    async def bodies_after_a_stops(seqs: list[int]) -> list[bytes]:
        await a.server.close()  # the same, after a compact page (decision 74)
        return await real_bodies(seqs)

    client.fetch, client.bodies = fetch_after_a_stops, bodies_after_a_stops
    with pytest.raises(SyncError):
        await puller.page(a.config, client, None, 0)
    assert puller.health_of(a.node_id).fetch_failures == 1
    assert await b.sync.store.cursor(a.node_id) is None and await b.hashes() == set()


async def space_hashes(peer: PeerNode, space: str) -> set[str]:
    sql = "SELECT hash FROM records WHERE space = ?"
    return await peer.node.db.read(lambda c: {str(r[0]) for r in c.execute(sql, (space,))})


@pytest.mark.parametrize("policy", ["ids", "bodies"])
async def test_a_triangle_stores_each_record_once_and_fetches_each_body_once(make_peer: Any, policy: Policy) -> None:
    """Read ids first, no body comes twice; read by bodies (flooding, for contrast), some do."""
    a, b, c = await make_peer("a"), await make_peer("b"), await make_peer("c")
    for one in (a, b, c):
        for other in (a, b, c):
            if one is not other:
                await one.add_peer(other)
    owner, writer = await a.agent("owner"), await b.agent("writer")
    space = (await a.node.spaces.create(owner, "family", "")).space_id
    await a.node.spaces.set_host(owner, space, b.node_id, "host")
    await post_in(a, owner, "family note", space)
    for n in range(3):
        await a.post(owner, f"from a {n}")
        await b.post(writer, f"from b {n}")
    pullers = {p.name: p.puller(feed_policy=policy, listed=p.sync.server.listed) for p in (a, b, c)}
    nodes = {p.name: p for p in (a, b, c)}
    for _round in range(3):
        for me, puller in pullers.items():
            for other in nodes.values():
                if other is not nodes[me]:
                    await puller.pull_once(other.config)
    public = (await a.hashes()) - await space_hashes(a, space)
    assert (await b.hashes()) - await space_hashes(b, space) == public == await c.hashes()
    assert await space_versions(a, space) == await space_versions(b, space) != set()
    duplicates = 0  # bodies that came again
    for peer in (a, b, c):
        statuses = await peer.sync.store.statuses()
        duplicates += sum(s.counters.duplicate for s in statuses)
        received = await peer.node.db.read(
            lambda conn: conn.execute("SELECT count(*) FROM records WHERE origin != 'local'").fetchone()[0]
        )
        assert received > 0 and sum(s.counters.saved for s in statuses) == received  # each stored once
    assert duplicates == 0 if policy == "ids" else duplicates > 0
    # C never hosted the space: not even its ids were announced to it, by A or by B
    for source in (a, b):
        page = await c.puller().client(source.config).changes(0, None, 1000, 0, ids=True)
        assert isinstance(page, m.Changes) and page.items
        assert all(i.record is msgspec.UNSET for i in page.items)
        assert not {i.version for i in page.items} & await space_versions(source, space)


async def test_a_purged_or_redacted_record_in_an_ids_page_is_not_fetched(make_peer: Any) -> None:
    a, b, c = await make_peer("a"), await make_peer("b"), await make_peer("c")
    for one, other in ((a, b), (b, a), (a, c), (c, a), (b, c), (c, b)):
        await one.add_peer(other)
    author = await a.agent()
    secret, purged, kept = [await a.post(author, word) for word in ("secret", "purged", "kept")]
    await b.puller().pull_once(a.config)
    await c.puller().pull_once(a.config)
    await a.node.redactions.redact(author, secret, "leaked")
    await c.node.redactions.purge(purged, None, "not here")
    await c.puller().pull_once(a.config)  # C takes the redaction; B has not, and still serves the body
    assert secret not in await c.hashes() and purged not in await c.hashes()
    client = c.puller().client(b.config)
    asked: list[str] = []

    async def fetch(versions: list[str]) -> m.Records:
        asked.extend(versions)
        return await client.fetch(versions)

    reply = await client.changes(0, None, 1000, 0, ids=True)
    sql = "SELECT version FROM records WHERE hash = ?"
    versions = await a.node.db.read(lambda conn: [conn.execute(sql, (h,)).fetchone() for h in (purged, kept)])
    assert isinstance(reply, m.Changes) and {v[0] for v in versions} <= {i.version for i in reply.items}
    assert len(reply.items) == len(await b.hashes())  # the redacted one too: B has not taken the redaction
    resolved = await resolve(c.sync.store, fetch, reply)
    assert asked == [] and resolved.page.items == [] and resolved.held == len(reply.items)
    assert secret not in await c.hashes() and purged not in await c.hashes()


@pytest.mark.parametrize("query", ["ids=3", "ids=-1", "ids=yes", "ids=", "ids=1.5", "ids=true", "ids=1&ids=1"])
async def test_every_bad_value_of_ids_is_a_422_problem_naming_the_field(make_peer: Any, query: str) -> None:
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    url = f"{a.url}/v1/sync/changes?v=3&since=0&{query}"
    async with b.session.get(url, headers=sign_headers(b.node.key, "GET", url, None)) as resp:
        problem = await resp.json(content_type=None)
        assert resp.status == 422 and resp.content_type == "application/problem+json", problem
        assert (problem["code"], problem["field"]) == ("validation_error", "$.ids")
    async with b.session.get(url) as resp:
        assert resp.status == 401  # unsigned: refused before the query is read, as every sync request


@pytest.mark.slow
async def test_a_node_of_the_previous_release_refuses_ids_and_is_read_by_bodies(make_peer: Any, tmp_path: Path) -> None:
    """Wall time a few seconds (one real `bbs serve` of the previous release, from git)."""
    tree = release_tree(tmp_path)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("BBS_")}, **ENV, "PYTHONPATH": str(tree)}
    old = Proc("previous", tmp_path / "previous-data", [sys.executable, "-m", "node.cli"], tree, env)
    new = await make_peer("new")
    async with aiohttp.ClientSession() as session:
        try:
            old.init()
            await old.start(session)
            await old.call(session, "POST", "/v1/peers", {"url": new.url, "node_id": new.node_id})
            async with new.session.post(
                new.url + "/v1/peers", json={"url": old.url, "node_id": old.node_id}, headers=new.admin
            ) as resp:
                assert resp.status == 201
            agent = await old.call(session, "POST", "/v1/agents", {"name": "old-writer"})
            posted = await old.call(
                session,
                "POST",
                "/v1/entries",
                {"entry_type": "finding", "performative": "inform", "content": "from the previous release"},
                headers={"Authorization": f"Bearer {agent['api_key']}"},
            )
            puller = new.puller()
            config = PeerConfig(old.node_id, old.url)
            with pytest.raises(SyncError) as raised:  # what the previous release answers `ids`
                await puller.client(config).changes(0, None, 100, 0, ids=True)
            assert raised.value.code == "validation_error" and "ids" in (raised.value.detail or "")
            await puller.pull_once(config)  # asked ids first, refused, read by bodies: no failure
            assert posted["record_hash"] in await new.hashes()
            assert puller.feeds.peers[old.node_id].refused_at is not None
            assert not puller.feeds.ids_for(old.node_id)
            assert puller.health_of(old.node_id).failures == 0
        finally:
            old.stop()


def release_tree(tmp_path: Path, commit: str = PREVIOUS_RELEASE) -> Path:
    """The tree of `commit` (a previous release) from git (fails, never skips, without the history)."""
    import io
    import subprocess
    import tarfile

    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit],
                             capture_output=True, timeout=120)  # fmt: skip
    assert archive.returncode == 0, f"commit {commit} is not in the git history: {archive.stderr!r}"
    tree = tmp_path / "previous-release"
    tree.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree


@pytest.mark.parametrize("held_before", [0, 25])
async def test_a_backlog_of_new_records_is_read_by_bodies_after_its_first_page(held_before: int) -> None:
    """A fresh node's catch-up (pages that say `more`, mostly new here): ids for the first page, then bodies, and ids
    again once caught up; a node that holds most of the backlog already reads all of it ids first."""
    source, server, receiver, made = memory_pair(25)
    for v in made[:held_before]:
        receiver.add(v)
    feeds = FeedModes("ids")
    asked: list[int] = []

    async def ask(ids: int) -> m.ChangesReply:
        asked.append(ids)
        cursor = receiver.cursors.get(source.node_id)
        query = m.ChangesQuery(v=m.PROTOCOL_VERSION, since=cursor.seq if cursor else 0, limit=10, ids=int(ids))
        reply = await server.changes(query, receiver.node_id)
        assert not isinstance(reply, m.IdsPage)  # read_page asks ids=2 only of a caller that gives `bodies`
        return reply

    async def fetch(versions: list[str]) -> m.Records:
        return await server.fetch(m.FetchRequest(hashes=versions), receiver.node_id)

    more = True
    while more:
        page = await read_page(feeds, receiver, source.node_id, ask, fetch)
        assert isinstance(page, m.Changes)
        verified = [Verified(i.hash, i.body(), json.loads(i.body()), None) for i in page.items]
        await receiver.ingest(source.node_id, verified, [], Cursor(page.epoch, page.next))
        more = page.more
    assert {v.version for v in made} <= receiver.index.keys()
    assert asked == ([True, False, False] if held_before == 0 else [True, True, True])
    assert feeds.ids_for(source.node_id)  # caught up: ids first again
