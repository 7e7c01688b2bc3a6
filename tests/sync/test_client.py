"""sync.client: PeerClient, the signed HTTP client of one peer's sync endpoints. Against real nodes: the changes
feed in pages and its resets, fetch by hash, reconciliation rounds, traffic counting, and each way an exchange
fails (not a peer, another node answering, unreachable, HTTP errors, malformed or oversized replies, stalls)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from identity import keys
from sync import client as client_module
from sync import messages as m
from sync.client import PeerClient, SyncError, Traffic
from sync.negentropy import Negentropy, VectorStorage
from tests.sync.conftest import PeerNode

MakePeer = Callable[..., Awaitable[PeerNode]]


@pytest.fixture
async def pair(make_peer: MakePeer) -> tuple[PeerNode, PeerNode]:
    """`a` asks, `b` serves: b has a as a peer, so it accepts a's signed requests."""
    a, b = await make_peer("a"), await make_peer("b")
    await b.add_peer(a)
    return a, b


def peer_client(asker: PeerNode, server: PeerNode, traffic: Traffic | None = None) -> PeerClient:
    return PeerClient(asker.session, asker.node.key, server.node_id, server.url + "/", traffic)


async def feed(client: PeerClient) -> list[str]:
    """Every hash of the peer's feed, page by page."""
    hashes: list[str] = []
    since, epoch = 0, None
    while True:
        page = await client.changes(since, epoch, 2, 0)
        assert isinstance(page, m.Changes)
        hashes += [item.hash for item in page.items]
        since, epoch = page.next, page.epoch
        if not page.more:
            return hashes


async def test_the_changes_feed_in_pages(pair: tuple[PeerNode, PeerNode]) -> None:
    a, b = pair
    writer = await b.agent()
    posted = [await b.post(writer, f"entry {i}") for i in range(3)]
    client = peer_client(a, b)
    first = await client.changes(0, None, 2, 0)
    assert isinstance(first, m.Changes)
    assert first.node_id == b.node_id and len(first.items) == 2 and first.more
    assert 0 < first.next <= first.head
    hashes = await feed(client)
    assert set(posted) <= set(hashes) and set(hashes) <= await b.hashes()
    stored = await b.node.db.read(
        lambda c: dict(c.execute("SELECT hash, body FROM records WHERE hash = ?", (posted[0],)).fetchall())
    )
    page = await client.changes(0, first.epoch, 1000, 0)
    assert isinstance(page, m.Changes) and not page.more and page.next == page.head
    item = next(i for i in page.items if i.hash == posted[0])
    assert item.body() == bytes(stored[posted[0]])  # the stored bytes, as they are


async def test_a_foreign_epoch_or_a_cursor_ahead_is_a_reset(pair: tuple[PeerNode, PeerNode]) -> None:
    a, b = pair
    await b.post(await b.agent(), "one")
    client = peer_client(a, b)
    page = await client.changes(0, None, 10, 0)
    assert isinstance(page, m.Changes)
    other_epoch = "0" if page.epoch != "0" else "1"
    reset = await client.changes(page.next, other_epoch, 10, 0)
    assert isinstance(reset, m.Reset) and reset.reason == "epoch_changed" and reset.epoch == page.epoch
    ahead = await client.changes(page.head + 5, page.epoch, 10, 0)
    assert isinstance(ahead, m.Reset) and ahead.reason == "cursor_ahead" and ahead.head == page.head


async def test_a_long_poll_returns_when_a_record_arrives(pair: tuple[PeerNode, PeerNode]) -> None:
    a, b = pair
    client = peer_client(a, b)
    writer = await b.agent()  # its own records are in the feed before the poll
    now = await client.changes(0, None, 1000, 0)
    assert isinstance(now, m.Changes) and not now.more
    waiting = asyncio.create_task(client.changes(now.next, now.epoch, 10, 30_000))
    posted = await b.post(writer, "wakes the poll")
    page = await waiting
    assert isinstance(page, m.Changes) and posted in [i.hash for i in page.items]


async def test_fetch_by_hash(pair: tuple[PeerNode, PeerNode]) -> None:
    a, b = pair
    known = await b.post(await b.agent(), "fetch me")
    unknown = "0" * 64
    reply = await peer_client(a, b).fetch([known, unknown])
    assert reply.node_id == b.node_id
    assert [item.hash for item in reply.items] == [known] and reply.missing == [unknown]


async def test_reconciliation_rounds_find_what_the_asker_lacks(pair: tuple[PeerNode, PeerNode]) -> None:
    a, b = pair
    writer = await b.agent()
    posted = {await b.post(writer, f"reconcile {i}") for i in range(3)}
    client = peer_client(a, b)
    _epoch, _head, items = await a.sync.store.reconcile_items()
    neg = Negentropy(VectorStorage(items))
    message: bytes | None = neg.initiate()
    have: list[bytes] = []
    need: list[bytes] = []
    rounds = 0
    while message is not None:
        reply = await client.reconcile(message)
        rounds += 1
        assert reply.node_id == b.node_id
        if reply.message is None:
            break
        message = neg.reconcile(bytes.fromhex(reply.message), have, need)
    assert rounds >= 1
    versions = {version for _, version, _ in await b.sync.store.fetch(list(posted))}  # ids are versions (v2)
    assert len(versions) == 3 and versions <= {h.hex() for h in need} and have == []


async def test_traffic_is_counted_per_client_and_shared(pair: tuple[PeerNode, PeerNode]) -> None:
    a, b = pair
    known = await b.post(await b.agent(), "counted")
    shared = Traffic()
    one, two = peer_client(a, b, shared), peer_client(a, b, shared)
    await one.changes(0, None, 10, 0)
    await two.fetch([known])
    assert (one.requests, two.requests, shared.requests) == (1, 1, 2)
    assert one.bytes_sent == 0 and two.bytes_sent > 0  # a GET has no body
    assert shared.bytes_sent == two.bytes_sent
    assert one.bytes_received > 0 and shared.bytes_received == one.bytes_received + two.bytes_received
    assert PeerClient(a.session, a.node.key, b.node_id, b.url).traffic is not shared  # its own when none given


async def test_a_node_that_does_not_know_the_asker_refuses(make_peer: MakePeer) -> None:
    a, b = await make_peer("a"), await make_peer("b")  # b has no peers
    client = peer_client(a, b)
    with pytest.raises(SyncError, match=r"GET /v1/sync/changes: HTTP 403: unknown_peer: "):
        await client.changes(0, None, 10, 0)
    with pytest.raises(SyncError, match=r"POST /v1/sync/fetch: HTTP 403: unknown_peer"):
        await client.fetch(["0" * 64])
    stranger = PeerClient(a.session, keys.SigningKey.generate(), b.node_id, b.url)
    with pytest.raises(SyncError, match="HTTP 403"):
        await stranger.reconcile(Negentropy(VectorStorage([])).initiate())


async def test_another_node_answering_is_refused(pair: tuple[PeerNode, PeerNode]) -> None:
    a, b = pair
    impostor_id = keys.SigningKey.generate().did
    client = PeerClient(a.session, a.node.key, impostor_id, b.url)
    with pytest.raises(SyncError, match=f"the peer answered as {b.node_id}, not {impostor_id}"):
        await client.changes(0, None, 10, 0)
    with pytest.raises(SyncError, match="answered as"):
        await client.fetch(["0" * 64])


async def test_an_unreachable_peer(make_peer: MakePeer) -> None:
    a = await make_peer("a")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once closed
    client = PeerClient(a.session, a.node.key, a.node_id, f"http://127.0.0.1:{port}")
    with pytest.raises(SyncError, match=r"GET /v1/sync/changes: ClientConnectorError"):
        await client.changes(0, None, 10, 0)
    assert client.requests == 1 and client.bytes_received == 0


# ---- hostile or broken peers: a real aiohttp server answering as told -----------------------------------


class Fake:
    """What the fake peer answers, and what it was sent."""

    def __init__(self) -> None:
        self.status = 200
        self.body = b""
        self.content_type = "application/json"
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.stall: asyncio.Event | None = None


@pytest.fixture
async def fake(
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> AsyncIterator[tuple[Fake, str]]:
    state = Fake()

    async def handler(request: web.Request) -> web.Response:
        state.requests.append((request.method, request.path_qs, dict(request.headers), await request.read()))
        if state.stall is not None:
            await state.stall.wait()
        return web.Response(status=state.status, body=state.body, content_type=state.content_type)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server = await aiohttp_server(app)
    yield state, str(server.make_url("")).rstrip("/")
    if state.stall is not None:
        state.stall.set()


NODE_ID = keys.SigningKey.generate().did


def fake_client(session: aiohttp.ClientSession, url: str) -> PeerClient:
    return PeerClient(session, keys.SigningKey.generate(), NODE_ID, url)


def changes_body(**fields: Any) -> bytes:
    page = {"type": "changes", "v": 3, "node_id": NODE_ID, "epoch": "ab", "head": 0, "next": 0, "more": False}
    return json.dumps({**page, "items": [], **fields}).encode()


async def test_requests_are_signed_with_the_query_and_body(fake: tuple[Fake, str]) -> None:
    state, url = fake
    state.body = changes_body(head=3, next=3)
    async with aiohttp.ClientSession() as session:
        client = fake_client(session, url)
        await client.changes(3, "ab", 7, 0)
        state.body = b'{"type":"records","v":3,"node_id":"%s","items":[],"missing":[]}' % NODE_ID.encode()
        await client.fetch(["0" * 64])
    asked_boot, *signed = state.requests  # the peer's boot id first (none here: a peer of the previous release)
    assert asked_boot[:2] == ("GET", "/v1/node") and "Signature" not in asked_boot[2]
    (get_method, get_path, get_headers, _), (post_method, post_path, post_headers, post_body) = signed
    assert (get_method, post_method) == ("GET", "POST")
    assert get_path.startswith("/v1/sync/changes?") and "since=3" in get_path and "epoch=ab" in get_path
    assert "limit=7" in get_path and "wait_ms=0" in get_path
    assert "Signature" in get_headers and "Signature-Input" in get_headers
    # a peer whose /v1/node has no boot_id is of the previous release: signed as it signs, without Bbs-Boot
    assert "Bbs-Boot" not in get_headers and "bbs-boot" not in get_headers["Signature-Input"]
    assert post_path == "/v1/sync/fetch" and post_headers["Content-Type"] == "application/json"
    assert "Content-Digest" in post_headers and "Signature" in post_headers
    assert json.loads(post_body) == {"type": "fetch", "v": 3, "hashes": ["0" * 64]}


async def test_an_http_error_names_its_problem_or_its_text(fake: tuple[Fake, str]) -> None:
    state, url = fake
    async with aiohttp.ClientSession() as session:
        client = fake_client(session, url)
        state.status, state.body = 429, b'{"code":"rate_limited","detail":"slow down"}'
        with pytest.raises(SyncError, match=r"^GET /v1/sync/changes: HTTP 429: rate_limited: slow down$"):
            await client.changes(0, None, 10, 0)
        state.status, state.body, state.content_type = 502, b"<html>bad gateway</html>", "text/html"
        with pytest.raises(SyncError, match=r"HTTP 502: <html>bad gateway</html>$"):
            await client.changes(0, None, 10, 0)
        state.body = b"[1, 2]"  # JSON, but not a problem object
        with pytest.raises(SyncError, match=r"HTTP 502: \[1, 2\]$"):
            await client.changes(0, None, 10, 0)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"not json", "malformed batch"),
        (b'{"type":"changes","v":1}', "malformed batch"),
        (b"[" * 100_000 + b"]" * 100_000, "malformed batch"),
        (changes_body(head=5, next=9), r"next cursor 9 outside \[0, 5\]"),
        (changes_body(head=5, next=-1), "malformed batch: Expected `int` >= 0"),
        (changes_body(head=-1, next=0), r"malformed batch: Expected `int` >= 0 - at `\$.head`"),
        (changes_body(head=2**63, next=0), r"malformed batch: Expected `int` <= 9223372036854775807 - at `\$.head`"),
        (changes_body(head=2**64, next=2**64), r"at `\$.head`"),
        (changes_body(head=0, next=2**63), r"at `\$.next`"),
        (changes_body(head=1, next=1, items=[{"seq": 2**63, "hash": "h", "record": {}}]), r"`\$.items\[0\].seq`"),
        (changes_body(head=1, next=1, items=[{"seq": -1, "hash": "h", "record": {}}]), r"`\$.items\[0\].seq`"),
        (
            json.dumps(
                {"type": "reset", "v": 1, "node_id": NODE_ID, "epoch": "ab", "head": 2**63, "reason": "cursor_ahead"}
            ).encode(),
            r"at `\$.head`",
        ),
        (
            changes_body(
                head=3, next=3, items=[{"seq": i, "hash": "h", "version": "v", "record": {}} for i in range(3)]
            ),
            "3 records for a page of at most 2",
        ),
    ],
)
async def test_a_malformed_changes_page_is_refused(fake: tuple[Fake, str], body: bytes, match: str) -> None:
    state, url = fake
    state.body = body
    async with aiohttp.ClientSession() as session:
        with pytest.raises(SyncError, match=match):
            await fake_client(session, url).changes(0, None, 2, 0)


async def test_a_page_that_stays_put_is_accepted(fake: tuple[Fake, str]) -> None:
    """`next == since`: a page with nothing new keeps the cursor where it is."""
    state, url = fake
    state.body = changes_body(head=9, next=7)
    async with aiohttp.ClientSession() as session:
        page = await fake_client(session, url).changes(7, "ab", 10, 0)
    assert isinstance(page, m.Changes) and page.next == 7


async def test_records_that_were_not_asked_for_are_refused(fake: tuple[Fake, str]) -> None:
    state, url = fake
    extra = {"hash": "1" * 64, "version": "2" * 64, "record": {}}
    asked = {"hash": "0" * 64, "version": "3" * 64, "record": {}}
    async with aiohttp.ClientSession() as session:
        client = fake_client(session, url)
        # an address brings at most its two versions
        for items in ([extra], [asked, asked, asked]):
            state.body = json.dumps(
                {"type": "records", "v": 3, "node_id": NODE_ID, "items": items, "missing": []}
            ).encode()
            with pytest.raises(SyncError, match="records that were not asked for"):
                await client.fetch(["0" * 64])


async def test_an_oversized_reply_is_cut_off_while_read(
    fake: tuple[Fake, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state, url = fake
    monkeypatch.setattr(client_module, "MAX_CHANGES_BYTES", 1000)
    state.body = changes_body(padding="x" * 200_000)
    async with aiohttp.ClientSession() as session:
        client = fake_client(session, url)
        with pytest.raises(SyncError, match="reply exceeds 1000 bytes"):
            await client.changes(0, None, 10, 0)
    assert client.bytes_received == 0


async def test_a_stalled_peer_is_cut_off(fake: tuple[Fake, str], monkeypatch: pytest.MonkeyPatch) -> None:
    state, url = fake
    state.stall = asyncio.Event()
    monkeypatch.setattr(client_module, "REPLY_TIMEOUT_S", 0.05)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(SyncError, match=r"GET /v1/sync/changes: TimeoutError"):
            await fake_client(session, url).changes(0, None, 10, 0)
