"""Hostile peers: adversarial reconciliation input, unsolicited pushes, floods, far-dated records and a peer
that stalls mid-reply. Each is refused, bounded or timed out, and the node keeps syncing with honest peers.

The honest nodes are real (node, app, puller, store); hostile peers are small aiohttp servers or a
configured peer key sending crafted, correctly signed requests.
"""

from __future__ import annotations

import asyncio
import datetime
import os
from typing import Any

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from identity import canonical, keys
from sync import client as sync_client
from sync.auth import sign_headers
from sync.client import SyncError
from sync.negentropy import PROTOCOL_VERSION, encode_varint
from sync.store import PeerConfig
from tests.sync.conftest import PeerNode, signed_entry
from tests.sync.test_attacks import EvilPeer

pytestmark = pytest.mark.usefixtures("make_peer")


async def _hostile_key_on(node: PeerNode) -> keys.SigningKey:
    """A key the node accepts as a configured peer (its URL listens nowhere)."""
    key = keys.SigningKey.generate()
    async with node.session.post(
        node.url + "/v1/peers", json={"url": "http://127.0.0.1:9", "node_id": key.did}, headers=node.admin
    ) as resp:
        assert resp.status == 201
    return key


async def _signed(node: PeerNode, key: keys.SigningKey, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    raw = None if body is None else (body if isinstance(body, bytes) else msgspec.json.encode(body))
    headers = sign_headers(key, method, node.url + path, raw)
    if raw is not None:
        headers["Content-Type"] = "application/json"
    async with node.session.request(method, node.url + path, data=raw, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


def _bound(ts: int, id_prefix: bytes = b"") -> bytes:
    return encode_varint(ts) + encode_varint(len(id_prefix)) + id_prefix


def _fingerprint_ranges(n: int, fingerprint: bytes) -> bytes:
    """n ranges in Fingerprint mode (1), each claiming `fingerprint`."""
    out = bytearray([PROTOCOL_VERSION])
    for i in range(n):
        out += _bound(1 + i) + encode_varint(1) + fingerprint
    return bytes(out)


async def test_adversarial_reconcile_input_is_refused_or_bounded(make_peer: Any) -> None:
    node = await make_peer("honest")
    writer = await node.agent()
    for i in range(300):
        await node.post(writer, f"honest record {i}")
    key = await _hostile_key_on(node)
    path = "/v1/sync/reconcile"
    refused = [
        b"",  # no version byte
        bytes([PROTOCOL_VERSION]) + b"\xff" * 20,  # a varint that never ends
        bytes([PROTOCOL_VERSION]) + _bound(5) + encode_varint(9),  # an unknown range mode
        bytes([PROTOCOL_VERSION]) + _bound(5) + encode_varint(2) + encode_varint(10**6),  # id list longer than sent
        bytes([PROTOCOL_VERSION]) + _bound(9) + encode_varint(1) + b"\0" * 16 + _bound(3),  # bounds going back
        bytes([PROTOCOL_VERSION]) + encode_varint(1) + encode_varint(200) + b"\0" * 200,  # id longer than 32 bytes
    ]
    for message in refused:
        status, body = await _signed(node, key, "POST", path, {"type": "reconcile", "message": message.hex()})
        assert status in (400, 422), (message.hex()[:40], status, body)
        if status == 422:
            assert body["code"] in ("bad_negentropy_message", "validation_error"), body
    # crafted fingerprints (all zeros, all ones: collisions claimed for ranges of every size) and huge counts
    # of ranges are answered, but never with more than a frame of reply
    for message in (
        bytes([0x62]),  # an unknown protocol version: answered with the version this node speaks
        _fingerprint_ranges(1, b"\0" * 16),
        _fingerprint_ranges(1, b"\xff" * 16),
        _fingerprint_ranges(20_000, b"\0" * 16),
        bytes([PROTOCOL_VERSION]) + _bound(2**62) + encode_varint(1) + os.urandom(16),
    ):
        status, body = await _signed(node, key, "POST", path, {"type": "reconcile", "message": message.hex()})
        assert status in (200, 422), (status, body)
        if status == 200 and body["message"] is not None:
            assert len(body["message"]) // 2 <= 60_000
    # a message above the size cap (64 KiB: an initiator's frame is at most 60,000 bytes) never reaches the
    # decoder; 512 KiB of skip ranges used to hold the responder's event loop for half a second
    for size in (70_000, 600_000):
        status, body = await _signed(node, key, "POST", path, {"type": "reconcile", "message": "00" * size})
        assert status in (413, 422)
    # the node still reconciles with an honest peer afterwards
    other = await make_peer("other")
    await other.add_peer(node)
    await node.add_peer(other)
    report = await other.puller().reconcile(node.config)
    assert report.need >= 300  # the records and the writer's identity
    assert await other.digest() == await node.digest()


async def test_unsolicited_pushes_and_floods_are_refused_cheaply(make_peer: Any) -> None:
    node = await make_peer("honest")
    key = await _hostile_key_on(node)
    record = signed_entry(key, "pushed without being asked")
    # there is no push endpoint: a peer signature is not a bearer credential, and the feed is read-only
    status, body = await _signed(node, key, "POST", "/v1/entries", {"record": record})
    assert status == 401
    status, _ = await _signed(node, key, "POST", "/v1/sync/changes", {"items": [record]})
    assert status == 405
    # a flood of unsigned, unknown-key and replayed requests: all refused, nothing stored
    stranger = keys.SigningKey.generate()
    url = node.url + "/v1/sync/changes?v=2"
    replay = sign_headers(key, "GET", url)

    async def one(i: int) -> int:
        headers = {} if i % 3 == 0 else sign_headers(stranger, "GET", url) if i % 3 == 1 else replay
        async with node.session.get(url, headers=headers) as resp:
            await resp.read()
            return resp.status

    statuses = await asyncio.gather(*(one(i) for i in range(300)))
    assert statuses.count(200) <= 1  # the replayed signature is good exactly once
    assert set(statuses) <= {200, 401, 403}
    assert await node.hashes() == await node.hashes()  # readable
    assert record["content"] not in str(
        await node.node.db.read(lambda c: c.execute("SELECT body FROM records").fetchall())
    )
    # bounded fetch: more than 256 hashes is refused before any lookup
    status, body = await _signed(node, key, "POST", "/v1/sync/fetch", {"type": "fetch", "hashes": ["a" * 64] * 257})
    assert status == 422 and body["code"] == "validation_error"


async def test_far_dated_records_from_a_peer(make_peer: Any, evil: EvilPeer) -> None:
    node = await make_peer("victim")
    async with node.session.post(
        node.url + "/v1/peers", json={"url": evil.config.url, "node_id": evil.config.node_id}, headers=node.admin
    ) as resp:
        assert resp.status == 201
    author = keys.SigningKey.generate()
    ahead = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=10)
    future = signed_entry(author, "ten days ahead", created_at=canonical.format_created_at(ahead))
    far = signed_entry(author, "from the year 2999", created_at="2999-01-01T00:00:00Z")
    past = signed_entry(author, "from 1971", created_at="1971-01-01T00:00:00Z")
    now = signed_entry(author, "from today")
    # before 1970 a record's time is negative milliseconds: ten of them made every node that reconciled them
    # loop forever encoding a negentropy varint, and sync spread them
    before = [signed_entry(author, f"from 1969, {i}", created_at=f"1969-12-31T23:59:{i:02d}Z") for i in range(10)]
    from tests.sync.conftest import body_of, hash_of

    evil.page([(hash_of(r), body_of(r)) for r in (future, far, past, now, *before)])
    report = await node.puller().pull_once(evil.config)
    outcomes = {o.hash: (o.outcome, o.reason) for o in report.outcomes}
    assert outcomes[hash_of(future)] == ("invalid", "future_dated")
    assert outcomes[hash_of(far)] == ("invalid", "future_dated")
    assert outcomes[hash_of(past)] == ("saved", None)  # old records are legitimate (imports, archives)
    assert outcomes[hash_of(now)] == ("saved", None)
    assert all(outcomes[hash_of(r)][0] == "invalid" for r in before)
    assert not {hash_of(future), hash_of(far), *(hash_of(r) for r in before)} & await node.hashes()
    _, _, items = await node.sync.store.reconcile_items()
    assert all(ms >= 0 for ms, _ in items)
    assert await node.sync.store.cursor(evil.key.did) is not None  # the batch moved the cursor on


@pytest.fixture
async def evil() -> Any:
    peer = EvilPeer()
    await peer.start()
    yield peer
    assert peer.server is not None
    await peer.server.close()


async def test_a_peer_that_stalls_mid_reply_is_cut_off_and_honest_sync_continues(
    make_peer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    released = asyncio.Event()

    async def stalling(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        await resp.write(b'{"type":"changes","v":1,"items":[')  # ... and then nothing
        await released.wait()
        return resp

    app = web.Application()
    app.router.add_get("/v1/sync/changes", stalling)
    app.router.add_post("/v1/sync/reconcile", stalling)
    staller = TestServer(app, host="127.0.0.1")
    await staller.start_server()
    stall_key = keys.SigningKey.generate()
    stall_cfg = PeerConfig(stall_key.did, str(staller.make_url("")).rstrip("/"))
    try:
        honest = await make_peer("honest")
        node = await make_peer("victim", scheduler=True)
        async with node.session.post(
            node.url + "/v1/peers", json={"url": stall_cfg.url, "node_id": stall_cfg.node_id}, headers=node.admin
        ) as resp:
            assert resp.status == 201
        await node.add_peer(honest)
        await honest.add_peer(node)
        writer = await honest.agent()
        wanted = {await honest.post(writer, f"while the other stalls {i}") for i in range(5)}
        for _ in range(400):  # the scheduler pulls the honest peer while the stalled pull hangs
            if wanted <= await node.hashes():
                break
            await asyncio.sleep(0.05)
        assert wanted <= await node.hashes()
        # and the stalled pull itself is bounded: with a short reply timeout it fails instead of hanging
        monkeypatch.setattr(sync_client, "REPLY_TIMEOUT_S", 0.5)
        with pytest.raises(SyncError, match="Timeout"):
            await asyncio.wait_for(node.puller().pull_once(stall_cfg), timeout=20)
    finally:
        released.set()
        await staller.close()
