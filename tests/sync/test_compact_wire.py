"""Compact ids pages and fetches by seq over the wire (decision 74; docs/sync.md, "Compact ids pages"): two real
nodes on loopback deliver a record over `ids=2` and `POST /v1/sync/bodies`; every malformed bodies request is a 422
problem naming `$.seqs`; a body of a space is served only to its hosts; a hostile peer's malformed compact page is
a failed pull and its unasked body is dropped and counted; a node of the previous release (a real `bbs serve` of that
commit, which knows `ids=1` only) is read with `ids=1`."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from identity import keys
from sync import compact
from sync import messages as m
from sync import puller as puller_module
from sync.auth import sign_headers
from sync.client import PeerClient, SyncError
from sync.ids_first import FeedModes, read_page
from sync.memory import MemoryStore
from sync.puller import Puller
from sync.store import PeerConfig
from tests.sync.conftest import PeerNode, body_of, signed_entry
from tests.sync.test_ids_first import memory_pair, release_tree
from tests.sync.test_space_hosting import post_in
from tests.sync.test_v2_upgrade import ENV, Proc

# the last commit of main before compact ids pages: a node that knows `ids=1` and refuses `ids=2`
PREVIOUS_RELEASE = "175b1eac796137cbd21bc5aa5219fb69ba3a4d04"


async def post_bodies(asker: PeerNode, served: PeerNode, payload: dict[str, Any]) -> tuple[int, Any]:
    url = served.url + "/v1/sync/bodies"
    raw = json.dumps(payload).encode()
    headers = {**sign_headers(asker.node.key, "POST", url, raw), "Content-Type": "application/json"}
    async with asker.session.post(url, data=raw, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_a_record_is_delivered_over_the_compact_path(make_peer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    writer = await a.agent()
    first = await a.post(writer, "one")
    asked: list[int] = []
    seqs_asked: list[list[int]] = []
    changes, bodies = PeerClient.changes, PeerClient.bodies

    async def seen_changes(
        self: PeerClient, since: int, epoch: str | None, limit: int, wait_ms: int, ids: int = 0
    ) -> m.ChangesReply:
        asked.append(ids)
        return await changes(self, since, epoch, limit, wait_ms, ids)

    async def seen_bodies(self: PeerClient, seqs: list[int]) -> list[bytes]:
        seqs_asked.append(seqs)
        return await bodies(self, seqs)

    monkeypatch.setattr(PeerClient, "changes", seen_changes)  # the real methods run; the test only watches
    monkeypatch.setattr(PeerClient, "bodies", seen_bodies)
    puller = b.puller()
    report = await puller.pull_once(a.config)
    # the entry and its author's identity document, each body fetched by its seq
    assert first in await b.hashes() and [o.outcome for o in report.outcomes] == ["saved", "saved"]
    assert asked == [m.IDS_COMPACT] and len(seqs_asked) == 1 and len(seqs_asked[0]) == 2
    assert puller.health_of(a.node_id).failures == 0 and puller.health_of(a.node_id).fetch_failures == 0
    second = await a.post(writer, "two")
    await puller.pull_once(a.config)  # the next page is compact too, from the cursor the first one left
    assert second in await b.hashes() and asked == [m.IDS_COMPACT] * 2 and len(seqs_asked) == 2
    # the page itself, raw: no node id, no JSON object per item, a version in base64 where JSON had 64 hex digits
    url = f"{a.url}/v1/sync/changes?v=3&since=0&ids=2"
    async with b.session.get(url, headers=sign_headers(b.node.key, "GET", url, None)) as resp:
        page = await resp.json()
    assert set(page) == {"type", "epoch", "head", "next", "items"} and page["type"] == "ids"
    versions = [v for _s, v, _n in compact.unpack_items(page["items"], 0, page["next"], 10)]
    assert len(versions) == len(set(versions)) >= 2
    url = f"{a.url}/v1/sync/changes?v=3&since={page['next']}&epoch={page['epoch']}&ids=2"
    async with b.session.get(url, headers=sign_headers(b.node.key, "GET", url, None)) as resp:
        named = await resp.json()
    assert named == {"type": "ids", "head": page["head"], "next": page["next"]}  # an empty poll: its epoch was asked
    sizes = {}
    for ids in (1, 2):  # the same items, as JSON and compact
        url = f"{a.url}/v1/sync/changes?v=3&since=0&ids={ids}"
        async with b.session.get(url, headers=sign_headers(b.node.key, "GET", url, None)) as resp:
            sizes[ids] = len(await resp.read())
    assert sizes[2] < sizes[1] / 2


@pytest.mark.parametrize(
    ("seqs", "code"),
    [
        ("not base64!", "bad_seqs"),
        (base64.b64encode(b"\x05\x00").decode(), "bad_seqs"),  # a delta of 0
        (base64.b64encode(b"\x05\x80").decode(), "bad_seqs"),  # truncated
        (base64.b64encode(b"\x01" * (m.MAX_FETCH_HASHES + 1)).decode(), "bad_seqs"),  # too many
        (base64.b64encode(b"\xff" * 9 + b"\x7f").decode(), "bad_seqs"),  # over 2^63 - 1
        (base64.b64encode(b"\xff\xff\x03").decode(), "unknown_seq"),  # beyond the head
        ("", "validation_error"),
        ("A" * (m.MAX_SEQS_CHARS + 4), "validation_error"),
    ],
)
async def test_every_malformed_bodies_request_is_a_422_naming_seqs(make_peer: Any, seqs: str, code: str) -> None:
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await a.post(await a.agent(), "held")
    status, problem = await post_bodies(b, a, {"type": "bodies_request", "v": 3, "seqs": seqs})
    assert status == 422 and (problem["code"], problem["field"]) == (code, "$.seqs"), problem
    status, problem = await post_bodies(b, a, {"type": "bodies_request", "v": 9, "seqs": "AQ=="})
    assert status == 422 and problem["code"] == "unsupported_sync_version"


async def test_bodies_are_served_as_the_feed_serves_them(make_peer: Any) -> None:
    """Asked every seq, a host of a space gets the space's record, a node that does not host it does not: each gets
    exactly the bodies the feed serves it, and a seq served to neither is left out, as one never held."""
    a, b, c = await make_peer("a"), await make_peer("b"), await make_peer("c")
    for other in (b, c):
        await a.add_peer(other)
    owner = await a.agent("owner")
    space = (await a.node.spaces.create(owner, "family", "")).space_id
    await a.node.spaces.set_host(owner, space, b.node_id, "host")
    await post_in(a, owner, "family note", space)
    await a.post(owner, "public note")
    rows = await a.node.db.read(lambda conn: list(conn.execute("SELECT seq, space FROM records ORDER BY seq")))
    every = compact.pack_seqs([seq for seq, _space in rows])
    got = {}
    for asker in (b, c):
        url = f"{a.url}/v1/sync/changes?v=3&since=0&limit=1000"
        async with asker.session.get(url, headers=sign_headers(asker.node.key, "GET", url, None)) as resp:
            feed = [item["record"] for item in (await resp.json())["items"]]
        status, reply = await post_bodies(asker, a, {"type": "bodies_request", "seqs": every})
        assert status == 200 and reply["type"] == "bodies" and reply["records"] == feed
        got[asker.name] = reply["records"]
    assert len(got["b"]) > len(got["c"]) >= 1
    assert any(r.get("space") == space for r in got["b"]) and not any(r.get("space") == space for r in got["c"])
    spaced = await a.node.db.read(lambda conn: [str(r[0]) for r in conn.execute(
        "SELECT version FROM records WHERE space = ?", (space,))])  # fmt: skip
    announced: dict[str, set[str]] = {}
    for asker in (b, c):  # a compact page to a node that does not host the space names none of it, not by prefix
        url = f"{a.url}/v1/sync/changes?v=3&since=0&limit=1000&ids=2"
        async with asker.session.get(url, headers=sign_headers(asker.node.key, "GET", url, None)) as resp:
            page = await resp.json()
        announced[asker.name] = {v for _s, v, _n in compact.unpack_items(page["items"], 0, page["next"], 1000)}
    prefixes = {v[: compact.PREFIX_HEX] for v in spaced}
    assert prefixes and prefixes <= announced["b"] and not prefixes & announced["c"]


class Hostile:
    """A peer that answers compact pages and bodies as the test says (real aiohttp, on loopback)."""

    def __init__(self) -> None:
        self.key = keys.SigningKey.generate()
        self.page: dict[str, Any] = {}
        self.bodies: list[dict[str, Any]] = []
        self.url = ""

    async def changes(self, request: web.Request) -> web.Response:
        return web.json_response({"v": 3, **self.page})

    async def post_bodies(self, request: web.Request) -> web.Response:
        return web.json_response({"type": "bodies", "v": 3, "records": self.bodies})


@pytest.fixture
async def hostile(aiohttp_server: Any) -> Hostile:
    peer = Hostile()
    app = web.Application()
    app.router.add_get("/v1/sync/changes", peer.changes)
    app.router.add_post("/v1/sync/bodies", peer.post_bodies)
    server = await aiohttp_server(app)
    peer.url = str(server.make_url("")).rstrip("/")
    return peer


@pytest.mark.parametrize(
    ("items", "why"),
    [
        ("@@@@", "not standard base64"),
        (base64.b64encode(b"\x01" + b"\xab" * 10).decode(), "truncated version"),
        (base64.b64encode(b"\x01" + b"\xab" * 16 + b"\xff\xff\xff\x7f").decode(), "over the record limit"),
        (compact.pack_items(0, [(9, "ab" * 32, 10)]), "beyond the page's next cursor"),
    ],
)
async def test_a_malformed_compact_page_is_a_failed_pull_that_stores_nothing(
    hostile: Hostile, make_peer: Any, monkeypatch: pytest.MonkeyPatch, items: str, why: str
) -> None:
    b = await make_peer("b")
    hostile.page = {"type": "ids", "epoch": "ab", "head": 5, "next": 5, "items": items}
    puller = b.puller()
    config = PeerConfig(hostile.key.did, hostile.url)
    with pytest.raises(SyncError, match=f"malformed batch: .*{why}"):
        await puller.pull_once(config)
    assert await b.sync.store.cursor(hostile.key.did) is None and await b.hashes() == set()
    monkeypatch.setattr(puller_module, "backoff", lambda failures: 0.01)
    loop = asyncio.create_task(puller.run_peer(config))  # the pulling loop counts it a failure and backs off
    try:
        for _ in range(500):
            if puller.health_of(hostile.key.did).failures >= 2:
                break
            await asyncio.sleep(0.01)
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    assert puller.health_of(hostile.key.did).failures >= 2 and await b.hashes() == set()


async def test_a_body_that_was_not_asked_for_is_dropped_and_counted(hostile: Hostile) -> None:
    me, author = keys.SigningKey.generate(), keys.SigningKey.generate()
    listed, other = signed_entry(author, "listed"), signed_entry(author, "sent instead")
    version = hashlib.sha256(body_of(listed)).hexdigest()
    hostile.page = {"type": "ids", "epoch": "ab", "head": 1, "next": 1,
                    "items": compact.pack_items(0, [(1, version, len(body_of(listed)))])}  # fmt: skip
    hostile.bodies = [other]
    store = MemoryStore(node_id=me.did)
    async with aiohttp.ClientSession() as session:
        puller = Puller(store, me, session)
        config = PeerConfig(hostile.key.did, hostile.url)
        page = await puller.page(config, puller.client(config), None, 0)
    assert isinstance(page, m.Changes) and page.items == [] and page.next == 0  # the cursor stays before it
    assert puller.health_of(hostile.key.did).fetch_failures == 1
    assert puller.feeds.ids_for(hostile.key.did, compact=True) == 0  # read on by bodies from there


@pytest.mark.slow
async def test_a_node_of_the_previous_release_refuses_ids_2_and_is_read_with_ids_1(
    make_peer: Any, tmp_path: Path
) -> None:
    """Wall time a few seconds (one real `bbs serve` of the previous release, from git)."""
    tree = release_tree(tmp_path, PREVIOUS_RELEASE)
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
            with pytest.raises(SyncError) as raised:  # what the previous release answers `ids=2`
                await puller.client(config).changes(0, None, 100, 0, ids=m.IDS_COMPACT)
            assert (raised.value.code, raised.value.field) == ("validation_error", "$.ids")
            await puller.pull_once(config)  # asked ids=2, refused, asked ids=1: no failure
            assert posted["record_hash"] in await new.hashes()
            peer = puller.feeds.peers[old.node_id]
            assert peer.compact_refused_at is not None and peer.refused_at is None
            assert puller.feeds.ids_for(old.node_id, compact=True) == m.IDS_JSON
            assert puller.health_of(old.node_id).failures == 0
        finally:
            old.stop()


async def test_a_json_page_in_reply_to_ids_2_is_fetched_by_version() -> None:
    """A peer that answers `ids=2` with a JSON ids page (whole versions) is read as if asked `ids=1`: its bodies come
    by version, never by seq, and each once."""
    source, server, receiver, made = memory_pair(3)
    asked: list[int] = []
    fetched: list[str] = []

    async def ask(ids: int) -> m.ChangesReply:
        asked.append(ids)
        query = m.ChangesQuery(v=m.PROTOCOL_VERSION, since=0, ids=min(ids, 1))
        reply = await server.changes(query, receiver.node_id)
        assert not isinstance(reply, m.IdsPage)
        return reply

    async def fetch(versions: list[str]) -> m.Records:
        fetched.extend(versions)
        return await server.fetch(m.FetchRequest(hashes=versions), receiver.node_id)

    async def bodies(seqs: list[int]) -> list[bytes]:
        raise AssertionError(f"fetched by seq: {seqs}")

    page = await read_page(FeedModes("ids"), receiver, source.node_id, ask, fetch, bodies)
    assert isinstance(page, m.Changes) and asked == [m.IDS_COMPACT]
    assert [i.body() for i in page.items] == [v.body for v in made] and fetched == [v.version for v in made]
