"""A hostile or broken peer: every bad record is refused and counted, the rest of its batch is stored.

The hostile peer is a small aiohttp server speaking the wire format with crafted content; the receiving
node, its puller, verifier and store are the real ones.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from identity import keys, records
from sync.client import SyncError
from sync.store import PeerConfig
from tests.sync.conftest import PeerNode, body_of, hash_of, signed_entry
from wire.api import SignedSubmission

EPOCH = "e" * 32


def version(record_hash: str, body: bytes) -> bytes:
    """The version a v2 peer claims for a record: an entry's SHA-256 of its body, another kind's hash."""
    return (hashlib.sha256(body).hexdigest() if b'"kind":"entry"' in body else record_hash).encode()


class EvilPeer:
    """Serves scripted feed pages and answers fetches with a chosen function."""

    def __init__(self) -> None:
        self.key = keys.SigningKey.generate()
        self.pages: list[bytes] = []
        self.fetch: Callable[[list[str]], bytes] = lambda hashes: self.records_reply([], hashes)
        self.fetched: list[list[str]] = []
        self.server: TestServer | None = None
        self.head = 0

    def page(self, items: list[tuple[str, bytes]], *, head: int | None = None, raw: bytes | None = None) -> None:
        if raw is not None:
            self.pages.append(raw)
            return
        parts = [
            b'{"seq":%d,"hash":"%s","version":"%s","record":%s}' % (i + 1, h.encode(), version(h, body), body)
            for i, (h, body) in enumerate(items)
        ]
        n = len(items) if head is None else head
        self.head = n
        self.pages.append(
            b'{"type":"changes","v":3,"node_id":"%s","epoch":"%s","head":%d,"next":%d,"more":false,"items":[%s]}'
            % (self.key.did.encode(), EPOCH.encode(), n, n, b",".join(parts))
        )

    def records_reply(self, items: list[tuple[str, bytes]], missing: list[str]) -> bytes:
        parts = [
            b'{"hash":"%s","version":"%s","record":%s}' % (h.encode(), version(h, body), body) for h, body in items
        ]
        return b'{"type":"records","v":3,"node_id":"%s","items":[%s],"missing":%s}' % (
            self.key.did.encode(),
            b",".join(parts),
            json.dumps(missing).encode(),
        )

    async def start(self) -> None:
        async def changes(request: web.Request) -> web.Response:
            body = self.pages.pop(0) if self.pages else self.pages_empty()
            return web.Response(body=body, content_type="application/json")

        async def fetch(request: web.Request) -> web.Response:
            hashes = (await request.json())["hashes"]
            self.fetched.append(hashes)
            return web.Response(body=self.fetch(hashes), content_type="application/json")

        app = web.Application()
        app.router.add_get("/v1/sync/changes", changes)
        app.router.add_post("/v1/sync/fetch", fetch)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()

    def pages_empty(self) -> bytes:
        return b'{"type":"changes","v":3,"node_id":"%s","epoch":"%s","head":%d,"next":%d,"more":false,"items":[]}' % (
            self.key.did.encode(),
            EPOCH.encode(),
            self.head,
            self.head,
        )

    @property
    def config(self) -> PeerConfig:
        assert self.server is not None
        return PeerConfig(self.key.did, str(self.server.make_url("")).rstrip("/"))


@pytest.fixture
async def evil() -> Any:
    peer = EvilPeer()
    await peer.start()
    yield peer
    assert peer.server is not None
    await peer.server.close()


async def victim(make_peer: Any, evil: EvilPeer) -> PeerNode:
    node = await make_peer("victim")
    async with node.session.post(
        node.url + "/v1/peers", json={"url": evil.config.url, "node_id": evil.config.node_id}, headers=node.admin
    ) as resp:
        assert resp.status == 201
    return node


def resign(record: dict[str, Any], key: keys.SigningKey) -> dict[str, Any]:
    body = records.unsigned(record)
    return {**body, "signature": key.sign(body_of(body))}


async def test_each_bad_record_is_refused_and_counted_the_rest_stored(make_peer: Any, evil: EvilPeer) -> None:
    node = await victim(make_peer, evil)
    author, other = keys.SigningKey.generate(), keys.SigningKey.generate()
    good1 = signed_entry(author, "good one")
    good2 = signed_entry(author, "good two")
    original = signed_entry(author, "the original")
    tampered = {**original, "content": "the forgery"}
    forged_author = resign({**signed_entry(author, "in your name")}, other)
    bad_sig = {**signed_entry(author, "garbled"), "signature": keys.b64u(bytes(64))}
    huge = signed_entry(author, "x" * 300_000)
    local = signed_entry(author, "private", scope="local")
    # wrong in every release (an unknown entry_type would be `too_new` instead: tests/sync/test_too_new.py)
    bad_schema = resign({**signed_entry(author, "typed"), "confidence": 2}, author)
    spaced = json.dumps(good1, sort_keys=True).encode()  # valid JSON, not canonical bytes
    batch = [
        (hash_of(good1), body_of(good1)),
        (hash_of(original), body_of(tampered)),  # tampered content under the original hash
        (hash_of(tampered), body_of(tampered)),  # tampered content, hash recomputed: signature fails
        ("0" * 64, body_of(good2)),  # hash mismatch
        (hash_of(bad_sig), body_of(bad_sig)),  # bad signature
        (hash_of(forged_author), body_of(forged_author)),  # signed by a different key than author_id
        (hash_of(huge), body_of(huge)),  # oversized
        (hash_of(good1), spaced),  # not canonical
        ("1" * 64, b"[1,2,3]"),  # not an object
        (hash_of(local), body_of(local)),  # scope:local must never travel
        (hash_of(bad_schema), body_of(bad_schema)),  # schema
        (hash_of(good2), body_of(good2)),
    ]
    evil.page(batch)
    report = await node.puller().pull_once(evil.config)
    words = [(o.outcome, o.reason) for o in report.outcomes]
    assert words.count(("saved", None)) == 2
    reasons = sorted(str(r) for w, r in words if w == "invalid")
    assert reasons == sorted(
        [
            "hash_mismatch",
            "bad_signature",
            "hash_mismatch",
            "bad_signature",
            "bad_signature",
            "too_large",
            "not_canonical",
            "malformed",
            "local_scope",
            "schema",
        ]
    )
    stored = await node.hashes()
    assert {hash_of(good1), hash_of(good2)} <= stored
    assert not stored & {hash_of(tampered), hash_of(original), hash_of(huge), hash_of(local), hash_of(bad_schema)}
    (status,) = await node.sync.store.statuses()
    assert status.counters.saved == 2 and status.counters.invalid == 10
    assert status.counters.invalid_reasons == {
        "bad_signature": 3,
        "hash_mismatch": 2,
        "local_scope": 1,
        "malformed": 1,
        "not_canonical": 1,
        "schema": 1,
        "too_large": 1,
    }
    assert await node.sync.store.cursor(evil.key.did) == (EPOCH, 12)  # the batch never blocked the cursor


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b'{"type":"changes","v":1}',
        b'{"type":"changes","v":9,"node_id":"x","epoch":"e","head":1,"next":1,"more":false,"items":[]}',
        b'{"type":"nonsense"}',
        b"[]",
    ],
)
async def test_malformed_batch_stores_nothing_and_keeps_cursor(make_peer: Any, evil: EvilPeer, raw: bytes) -> None:
    node = await victim(make_peer, evil)
    evil.page([], raw=raw)
    with pytest.raises(SyncError, match="malformed batch"):
        await node.puller().pull_once(evil.config)
    assert await node.sync.store.cursor(evil.key.did) is None
    assert await node.digest() == (0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")


async def test_cursor_outside_the_feed_is_a_malformed_batch(make_peer: Any, evil: EvilPeer) -> None:
    node = await victim(make_peer, evil)
    evil.page([], head=5)
    evil.pages[-1] = evil.pages[-1].replace(b'"next":5', b'"next":9')
    with pytest.raises(SyncError, match="malformed batch"):
        await node.puller().pull_once(evil.config)


async def test_a_peer_answering_as_another_node_is_refused(make_peer: Any, evil: EvilPeer) -> None:
    node = await victim(make_peer, evil)
    evil.page([])
    impostor = PeerConfig(keys.SigningKey.generate().did, evil.config.url)
    with pytest.raises(SyncError, match="answered as"):
        await node.puller().pull_once(impostor)


async def test_failures_are_recorded_and_retried_with_backoff(make_peer: Any, evil: EvilPeer) -> None:
    node = await victim(make_peer, evil)
    for _ in range(3):
        evil.page([], raw=b"garbage")
    task = asyncio.create_task(node.puller().run_peer(evil.config))
    try:
        for _ in range(100):
            (status,) = await node.sync.store.statuses()
            if status.last_error:
                break
            await asyncio.sleep(0.05)
        assert status.last_error is not None and "malformed batch" in status.last_error
    finally:
        task.cancel()


async def test_entry_before_its_link_target_is_pending_then_fetched(make_peer: Any, evil: EvilPeer) -> None:
    node = await victim(make_peer, evil)
    author = keys.SigningKey.generate()
    target = signed_entry(author, "the target")
    linker = signed_entry(author, "supports the target", links=(hash_of(target),))
    evil.fetch = lambda hashes: evil.records_reply([(hash_of(target), body_of(target))], [])
    evil.page([(hash_of(linker), body_of(linker))])
    report = await node.puller().pull_once(evil.config)
    assert [o.outcome for o in report.outcomes] == ["pending_link"]
    assert evil.fetched == [[hash_of(target)]]  # fetched by hash from the peer that sent the link
    assert hash_of(target) in await node.hashes()
    wanted = await node.node.db.read(lambda c: c.execute("SELECT count(*) FROM sync_wanted").fetchone()[0])
    assert wanted == 0
    (status,) = await node.sync.store.statuses()
    assert status.counters.pending_link == 1 and status.counters.saved == 1


async def test_a_peer_refusing_to_serve_a_target_backs_off(make_peer: Any, evil: EvilPeer) -> None:
    node = await victim(make_peer, evil)
    author = keys.SigningKey.generate()
    target = signed_entry(author, "never served")
    linker = signed_entry(author, "links to it", links=(hash_of(target),))
    evil.page([(hash_of(linker), body_of(linker))])
    puller = node.puller()
    await puller.pull_once(evil.config)
    assert evil.fetched == [[hash_of(target)]]
    row = await node.node.db.read(lambda c: tuple(c.execute("SELECT attempts, next_ms FROM sync_wanted").fetchone()))
    assert row[0] == 1 and row[1] > node.node.now_ms()
    await puller.pull_once(evil.config)  # not due yet: no new fetch, the cursor is not blocked
    assert len(evil.fetched) == 1
    assert await node.sync.store.cursor(evil.key.did) == (EPOCH, 1)
    # A forged answer (another record under the asked hash) is refused, not stored.
    await node.node.db.write(lambda c: c.execute("UPDATE sync_wanted SET next_ms = 0"))
    decoy = signed_entry(author, "decoy")
    evil.fetch = lambda hashes: evil.records_reply([(hash_of(target), body_of(decoy))], [])
    await puller.pull_once(evil.config)
    assert hash_of(decoy) not in await node.hashes()
    row = await node.node.db.read(lambda c: tuple(c.execute("SELECT attempts FROM sync_wanted").fetchone()))
    assert row[0] == 2
    # Bounded: after the last attempt the target is no longer asked for.
    await node.node.db.write(lambda c: c.execute("UPDATE sync_wanted SET attempts = 8, next_ms = 0"))
    await puller.pull_once(evil.config)
    assert len(evil.fetched) == 2


async def test_a_target_that_arrives_another_way_is_no_longer_fetched(make_peer: Any, evil: EvilPeer) -> None:
    node = await victim(make_peer, evil)
    author = keys.SigningKey.generate()
    target = signed_entry(author, "arrives by another route")
    linker = signed_entry(author, "points at it", links=(hash_of(target),))
    evil.page([(hash_of(linker), body_of(linker))])
    puller = node.puller()
    await puller.pull_once(evil.config)  # the fetch is refused: the target stays wanted
    assert len(evil.fetched) == 1
    # The author submits the record to this node directly: it arrives without the peer.
    await node.node.entries.post(author.did, SignedSubmission(record=target), None)
    await node.node.db.write(lambda c: c.execute("UPDATE sync_wanted SET next_ms = 0"))
    await puller.pull_once(evil.config)
    assert len(evil.fetched) == 1  # not asked for again


async def test_a_page_larger_than_asked_for_is_a_malformed_batch(make_peer: Any, evil: EvilPeer) -> None:
    """The page bounds are the puller's to enforce: more records than its `limit`, or more bytes than a page
    holds, is refused whole (one such page held the writer for seconds)."""
    node = await victim(make_peer, evil)
    author = keys.SigningKey.generate()
    records = [signed_entry(author, f"record {i}") for i in range(7)]
    evil.page([(hash_of(r), body_of(r)) for r in records])
    with pytest.raises(SyncError, match="records for a page of at most 5"):
        await node.puller(limit=5).pull_once(evil.config)
    huge = b'{"type":"changes","v":3,"items":[' + b'{"seq":1},' * 1_000_000 + b"]}"
    evil.page([], raw=huge)  # over 9 MiB: refused while it is read, before it is decoded
    with pytest.raises(SyncError, match="reply exceeds"):
        await node.puller().pull_once(evil.config)
    assert await node.sync.store.cursor(evil.key.did) is None
    assert await node.digest() == (0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")


async def test_records_that_were_not_asked_for_are_a_malformed_batch(make_peer: Any, evil: EvilPeer) -> None:
    node = await victim(make_peer, evil)
    author = keys.SigningKey.generate()
    extra = signed_entry(author, "not asked for")
    evil.fetch = lambda hashes: evil.records_reply([(hash_of(extra), body_of(extra))], [])
    with pytest.raises(SyncError, match="not asked for"):
        await node.puller().client(evil.config).fetch(["a" * 64])


def test_a_self_link_record_from_a_peer_is_refused() -> None:
    """The REST API refused it (`self_link`); now every node does, whoever relays it."""
    from identity import canonical
    from sync.verify import verify_record

    author = keys.SigningKey.generate()
    entry_hash = hash_of(signed_entry(author, "an entry"))
    link = records.sign(
        {
            "kind": "link",
            "schema_version": "v1",
            "author_id": author.did,
            "created_at": canonical.now_created_at(),
            "source": entry_hash,
            "target": entry_hash,
            "link_type": "supports",
            "annotation": "",
        },
        author,
    )
    verdict = verify_record(canonical.canonical_bytes(link), None)
    assert getattr(verdict, "reason", None) == "schema"
