"""The async client against a real node on loopback: typed results, problem codes, retries, signing."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from agent.client import BBSClientError, Client
from identity import canonical, keys, records
from node.agents import service as agents
from node.agents.portable import import_identity
from node.service import Node
from tests.conftest import AgentCreds
from wire.api import AgentListQuery, EntryOut, LinkOut, PostEntry, ReadQuery, SearchQuery, SubscriptionIn
from wire.workflows import PostMessage

Factory = Callable[[str], Awaitable[AgentCreds]]


def base(client: TestClient) -> str:
    return str(client.make_url("")).rstrip("/")


async def test_whole_api_with_typed_results(
    client: TestClient, make_agent: Factory, data_dir: tuple[Path, str]
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    async with Client(base(client), api_key=alice.api_key) as a, Client(base(client), api_key=bob.api_key) as b:
        assert (await a.health()).status == "ok"
        info = await a.node_info()
        assert info.node_id.startswith("did:key:")
        assert (await a.get_agent(alice.agent_id)).display_name == "Alice"
        assert "/v1/entries" in (await a.openapi())["paths"]

        sub = await b.subscribe(tags=["db"])
        assert [s.id for s in await b.subscriptions()] == [sub.id]
        posted = await a.post("Index on orders.created_at is missing", tags=["db"], confidence=0.9)
        assert isinstance(posted, EntryOut) and posted.author_id == alice.agent_id and posted.confidence == 0.9
        reply = await b.post_entry(
            PostEntry(
                entry_type="finding",
                performative="confirm",
                content="Confirmed: seq scan on orders",
                links=[msgspec_link(str(posted.id), "responds_to")],
            )
        )
        link = await b.link(str(reply.id), posted.record_hash, "supports", "same table")
        assert isinstance(link, LinkOut) and link.source == reply.record_hash

        got = await a.get_entry(posted.record_hash, ReadQuery(hops=1))
        assert {e.id for e in got.entries} == {posted.id, reply.id}
        many = await a.read([str(posted.id), "999999"])
        assert many.missing == ["999999"]
        found = await a.search(SearchQuery(q="orders", tags=["db"]))
        assert {e.id for e in found.entries} == {posted.id}
        assert (await a.search(author=[bob.agent_id])).entries[0].id == reply.id

        box = await b.inbox(limit=10)
        assert [n.record_hash for n in box.notifications] == [posted.record_hash]
        assert (await b.ack([box.notifications[0].notification_id])).acknowledged == 1
        assert (await b.ack([])).acknowledged == 0  # an empty inbox's ids: nothing sent, nothing refused
        await b.unsubscribe(sub.id)
        assert await b.subscriptions() == []

        info_again = await a.call("GET", "/v1/node", type(info))
        assert info_again == info
        with pytest.raises(BBSClientError) as err:
            await a.call("DELETE", f"/v1/subscriptions/{sub.id}")
        assert (err.value.status, err.value.code) == (404, "subscription_not_found")

    async with Client(base(client), api_key=data_dir[1]) as admin:
        created = await admin.create_agent("carol", "Carol")
        assert created.api_key.startswith("bbs_")
        first = await admin.list_agents(AgentListQuery(limit=2))
        rest = await admin.list_agents(AgentListQuery(after=first.next_after))
        assert first.next_after == first.agents[-1].agent_id and rest.next_after is None
        listed = {a.name: a.agent_id for a in first.agents + rest.agents}
        assert listed == {"alice": alice.agent_id, "bob": bob.agent_id, "carol": created.agent_id}
        with pytest.raises(BBSClientError) as err:
            await admin.list_agents(AgentListQuery(limit=0))  # refused here, as the node would
        assert (err.value.status, err.value.code, err.value.field) == (422, "validation_error", "$.limit")
    with pytest.raises(BBSClientError) as err:
        async with Client(base(client), api_key=alice.api_key) as a:
            await a.list_agents()
    assert (err.value.status, err.value.code) == (403, "admin_required")


def msgspec_link(target: str, link_type: str):  # type: ignore[no-untyped-def]
    from wire.api import LinkSpec

    return LinkSpec(target=target, link_type=link_type)  # type: ignore[arg-type]


async def test_errors_carry_status_code_and_field(client: TestClient, make_agent: Factory) -> None:
    alice = await make_agent("alice")
    async with Client(base(client), api_key=alice.api_key) as a:
        with pytest.raises(BBSClientError) as err:
            await a.post("x", confidence=2)
        assert (err.value.status, err.value.code, err.value.field) == (422, "validation_error", "$.confidence")
        with pytest.raises(BBSClientError) as err:
            await a.link("424242", "1", "supports")
        assert (err.value.status, err.value.code, err.value.field) == (404, "source_not_found", "$.source")
        with pytest.raises(BBSClientError) as err:
            await a.get_entry("424242")
        assert (err.value.status, err.value.code) == (404, "entry_not_found")
        with pytest.raises(BBSClientError) as err:
            await a.search(SearchQuery(since="yesterday"))
        assert err.value.field == "$.since"
        with pytest.raises(BBSClientError) as err:
            await a.subscribe(SubscriptionIn(authors=["nobody"]))  # a name no agent of the node has
        assert (err.value.status, err.value.code, err.value.field) == (404, "agent_not_found", "$.authors[0]")
        with pytest.raises(BBSClientError) as err:
            await a.create_agent("x")
        assert (err.value.status, err.value.code) == (403, "admin_required")
    async with Client(base(client), api_key="bbs_0123456789abcdef_wrong") as stranger:
        with pytest.raises(BBSClientError) as err:
            await stranger.inbox()
        assert (err.value.status, err.value.code) == (401, "unauthorized")
        assert "wrong" not in str(err.value)


class FlakyProxy:
    """A real HTTP proxy in front of the node that fails the first answer to each POST after forwarding it."""

    def __init__(self, upstream: str, mode: str) -> None:
        self.upstream, self.mode = upstream, mode
        self.failed: set[str] = set()
        self.forwarded: list[tuple[str, str | None]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type")}
        if "Idempotency-Key" in request.headers:
            headers["Idempotency-Key"] = request.headers["Idempotency-Key"]
        async with (
            aiohttp.ClientSession() as http,
            http.request(request.method, self.upstream + request.path_qs, data=body or None, headers=headers) as resp,
        ):
            payload, status, ctype = await resp.read(), resp.status, resp.content_type
        self.forwarded.append((request.path, request.headers.get("Idempotency-Key")))
        if request.method == "POST" and request.path not in self.failed:
            self.failed.add(request.path)  # the node committed; the client never hears it
            if self.mode == "drop":
                assert request.transport is not None
                request.transport.close()
                return web.Response(status=500)
            return web.Response(status=503, text="upstream hiccup")
        return web.Response(status=status, body=payload, content_type=ctype)


@pytest.mark.parametrize("mode", ["drop", "503"])
async def test_retried_post_and_link_are_stored_once(
    client: TestClient, make_agent: Factory, node: Node, mode: str
) -> None:
    alice = await make_agent("alice")
    proxy = FlakyProxy(base(client), mode)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    async with TestServer(app) as server:
        url = str(server.make_url("")).rstrip("/")
        async with Client(url, api_key=alice.api_key, backoff=0.01) as a:
            entry = await a.post("Posted through a flaky network")
            other = await a.post("Another entry")
            link = await a.link(str(other.id), str(entry.id), "supports")
    posts = [key for path, key in proxy.forwarded if path == "/v1/entries"]
    assert posts[0] == posts[1] and posts[0] is not None  # the retry reused the idempotency key
    count = await node.db.read(
        lambda c: c.execute("SELECT count(*) FROM entries WHERE content = 'Posted through a flaky network'").fetchone()
    )
    assert count[0] == 1
    links = await node.db.read(lambda c: c.execute("SELECT count(*) FROM links WHERE ordinal = 0").fetchone())
    assert links[0] == 1 and link.target == entry.record_hash


async def test_unreachable_node_raises_after_retries() -> None:
    from tests.agent.conftest import free_port

    async with Client(f"http://127.0.0.1:{free_port()}", api_key="k", retries=2, backoff=0.01) as c:
        with pytest.raises(BBSClientError) as err:
            await c.search()
    assert (err.value.status, err.value.code) == (0, "unreachable")


async def test_client_holding_the_key_signs_and_node_only_verifies(client: TestClient, node: Node) -> None:
    key = keys.SigningKey.generate()
    await import_identity(node, "roamer", key, agents.identity_record(key, "Roamer", "", node.node_id))
    assert await node.db.read(lambda c: agents.signing_key(c, key.did)) is None  # the node cannot sign for it
    async with Client(base(client), signing_key=key) as c:  # no API key: key-proof session
        first = await c.post("Signed on the agent's side", tags=["b", "a", "a"], metadata={"x": 0.12345})
        second = await c.post(
            "A reply", performative="confirm", links=[{"target": str(first.id), "link_type": "responds_to"}]
        )
        link = await c.link(str(second.id), first.record_hash, "supports")
        assert first.author_id == key.did and first.tags == ["a", "b"]
        assert link.author_id == key.did
        again = await c.post_entry(PostEntry("finding", "inform", "Same key twice"), idempotency_key="same")
        assert (await c.post_entry(PostEntry("finding", "inform", "Same key twice"), idempotency_key="same")).id == (
            again.id
        )
        with pytest.raises(BBSClientError) as err:
            await c.post("x", links=[{"target": "424242", "link_type": "supports"}])
        assert (err.value.code, err.value.field) == ("target_not_found", "$.links[0].target")
    bodies = await node.db.read(
        lambda c: [bytes(r[0]) for r in c.execute("SELECT body FROM records WHERE author_id = ?", (key.did,))]
    )
    for body in bodies:  # every stored record verifies with nothing but itself
        _, decoded = records.check(json.loads(body))
        assert decoded.author_id == key.did
    assert len(bodies) == 5  # identity document, three entries, one link


async def test_expired_session_is_renewed_by_proving_the_key_again(client: TestClient, node: Node, clock) -> None:  # type: ignore[no-untyped-def]
    key = keys.SigningKey.generate()
    await import_identity(node, "roamer", key, agents.identity_record(key, "Roamer", "", node.node_id))
    async with Client(base(client), signing_key=key) as c:
        await c.post("before the session expires")
        clock.advance(3601)  # the node's clock: the client still believes its token is fresh
        await c.post("after the session expired")
    expiries = await node.db.read(lambda conn: conn.execute("SELECT expires_ms FROM auth_sessions").fetchall())
    assert expiries and all(row[0] > node.now_ms() for row in expiries)  # a new session, opened after the jump
    count = await node.db.read(lambda conn: conn.execute("SELECT count(*) FROM entries").fetchone()[0])
    assert count == 2


async def test_post_entries_in_one_batch_node_signed_and_self_signed(
    client: TestClient, make_agent: Factory, node: Node
) -> None:
    alice = await make_agent("alice")
    async with Client(base(client), api_key=alice.api_key) as a:
        posted = await a.post_entries([PostEntry("finding", "inform", f"batch item {i}", tags=["b"]) for i in range(3)])
        assert [p.created for p in posted] == [True] * 3
        assert [p.entry.content for p in posted] == [f"batch item {i}" for i in range(3)]
        keyed = [PostEntry("finding", "inform", "keyed item", idempotency_key="batch-key")]
        first, again = await a.post_entries(keyed), await a.post_entries(keyed)
        assert again[0].created is False and again[0].entry.id == first[0].entry.id
        with pytest.raises(BBSClientError) as err:
            await a.post_entries([])
        assert (err.value.code, err.value.field) == ("validation_error", "$.entries")
        with pytest.raises(BBSClientError) as err:
            await a.post_entries(
                [PostEntry("finding", "inform", "fine"), PostEntry("finding", "inform", "x", confidence=3)]
            )
        assert err.value.field == "$.entries[1].confidence"
    key = keys.SigningKey.generate()
    await import_identity(node, "roamer", key, agents.identity_record(key, "Roamer", "", node.node_id))
    async with Client(base(client), signing_key=key) as c:
        signed = await c.post_entries([PostEntry("finding", "inform", f"signed item {i}") for i in range(2)])
        assert {p.entry.author_id for p in signed} == {key.did}
    stored = await node.db.read(lambda conn: conn.execute("SELECT count(*) FROM entries").fetchone()[0])
    assert stored == 6


async def test_feed_pages_and_long_polls_past_the_client_timeout(client: TestClient, make_agent: Factory) -> None:
    """Client.feed: typed pages after a cursor; a long-poll gets its own timeout (wait_ms + the client's), so a
    wait longer than the client's timeout still answers, and a post made meanwhile arrives."""
    import asyncio

    from wire.feed import FeedPage, FeedQuery

    alice = await make_agent("alice")
    async with Client(base(client), api_key=alice.api_key, timeout=0.5) as a:
        first = await a.post("first in the feed")
        page = await a.feed(FeedQuery(after=0))
        assert isinstance(page, FeedPage) and [e.id for e in page.entries] == [first.id] and page.next == first.id
        waiting = asyncio.ensure_future(a.feed(after=page.next, wait_ms=5000))
        await asyncio.sleep(1.0)  # longer than the client's own timeout
        assert not waiting.done()
        second = await a.post("second, while it waits")
        assert [e.id for e in (await asyncio.wait_for(waiting, 10)).entries] == [second.id]
        with pytest.raises(BBSClientError) as refused:
            await a.feed(wait_ms=25_001)
        assert (refused.value.code, refused.value.field) == ("validation_error", "$.wait_ms")


async def test_a_client_holding_the_key_signs_into_a_space(client: TestClient, node: Node) -> None:
    """A self-signing client carries `space` into what it signs: an entry (v2), a link record and a message."""
    key = keys.SigningKey.generate()
    await import_identity(node, "roamer", key, agents.identity_record(key, "Roamer", "", node.node_id))
    async with Client(base(client), signing_key=key) as c:
        space = (await c.call("POST", "/v1/spaces", dict, json={"record": records.sign({
            "kind": "space", "schema_version": "v1", "author_id": key.did, "created_at": canonical.now_created_at(),
            "name": "own", "description": "", "nonce": "n" * 42 + "A"}, key)}))["space_id"]  # fmt: skip
        first = await c.post("inside", space=space)
        second = await c.post("also inside", space=space)
        link = await c.link(str(second.id), first.record_hash, "supports", space=space)
        sent = await c.send_message(PostMessage(message_type="note", body="inside", space=space))
    assert (first.space, link.space, sent.space) == (space, space, space)
