"""sync.puller: pulling a real node's feed into a store, resets, link targets, the per-peer loop, the scheduler."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import unused_port

from identity import keys
from sync import puller as puller_module
from sync.memory import MemoryStore
from sync.puller import Puller, PullReport, Scheduler, backoff, verify_many
from sync.store import Invalid, PeerConfig, Verified
from sync.verify import verify_record
from tests.sync.conftest import PeerNode, body_of, hash_of, signed_entry

AUTHOR = keys.SigningKey.generate()


def verified(record: dict[str, Any]) -> Verified:
    result = verify_record(body_of(record), hash_of(record))
    assert isinstance(result, Verified)
    return result


async def served_to(peer: PeerNode, me: keys.SigningKey) -> None:
    """Let `me` pull from `peer` (it accepts signed requests from configured peers only)."""
    async with peer.session.post(
        peer.url + "/v1/peers", json={"url": "http://127.0.0.1:9", "node_id": me.did}, headers=peer.admin
    ) as resp:
        assert resp.status == 201


def test_backoff_is_jittered_and_capped() -> None:
    for failures in range(1, 12):
        for _ in range(50):
            delay = backoff(failures)
            assert 0.5 <= delay <= min(10.0, 0.5 * 2**failures)
    assert backoff(1, base=1, cap=1) == 1


async def test_verify_many_gives_the_same_answers_on_a_thread() -> None:
    good = [signed_entry(AUTHOR, f"r{i}") for i in range(10)]
    items: list[tuple[bytes, str | None]] = [(body_of(r), hash_of(r)) for r in good] + [(b"{", None)]
    few, many = await verify_many(items[:3]), await verify_many(items)
    assert [type(r) for r in few] == [Verified] * 3
    assert [type(r) for r in many] == [Verified] * 10 + [Invalid]
    assert [r.hash for r in many[:10]] == [hash_of(r) for r in good]


async def test_pull_once_stores_with_the_cursor(make_peer: Any) -> None:
    a = await make_peer("a")
    me = keys.SigningKey.generate()
    await served_to(a, me)
    writer = await a.agent()
    for i in range(3):
        await a.post(writer, f"entry {i}")
    store = MemoryStore(node_id=me.did)
    puller = Puller(store, me, a.session, limit=2)
    first = await puller.pull_once(a.config)
    assert first.more and not first.reset and [o.outcome for o in first.outcomes] == ["saved", "saved"]
    cursor = await store.cursor(a.node_id)
    assert cursor is not None and cursor.seq == 2
    second = await puller.pull_once(a.config)
    assert not second.more and len(second.outcomes) == 2
    assert (await puller.pull_once(a.config)) == PullReport()  # caught up: nothing stored, cursor unchanged
    assert store.digest() == await a.digest()
    assert puller.traffic.requests >= 3


async def test_a_feed_from_another_epoch_resets_through_reconciliation(make_peer: Any) -> None:
    a = await make_peer("a")
    me = keys.SigningKey.generate()
    await served_to(a, me)
    await a.post(await a.agent(), "one")
    store = MemoryStore(node_id=me.did)
    puller = Puller(store, me, a.session)
    await puller.pull_once(a.config)
    store.cursors[a.node_id] = store.cursors[a.node_id]._replace(epoch="0" * 32)  # the peer's store was replaced
    report = await puller.pull_once(a.config)
    assert report.reset and report.more
    epoch, head = await a.sync.store.position()
    assert store.cursors[a.node_id] == (epoch, head)  # restarted at the peer's head
    assert store.digest() == await a.digest()


async def test_missing_link_targets_are_fetched_or_backed_off(make_peer: Any) -> None:
    a = await make_peer("a")
    me = keys.SigningKey.generate()
    await served_to(a, me)
    target = signed_entry(AUTHOR, "the target")
    linking = signed_entry(AUTHOR, "links to it", links=(hash_of(target), "e" * 64))
    saved = await a.sync.store.ingest("elsewhere", [verified(target)], [], None)
    assert [o.outcome for o in saved] == ["saved"]
    store = MemoryStore(node_id=me.did)
    [outcome] = await store.ingest(a.node_id, [verified(linking)], [], None)
    assert outcome.outcome == "pending_link" and set(store.wants) == {hash_of(target), "e" * 64}
    fetched = await Puller(store, me, a.session).fetch_wanted(a.config)
    assert [(o.hash, o.outcome) for o in fetched] == [(hash_of(target), "saved")]
    assert set(store.wants) == {"e" * 64} and store.wants["e" * 64].attempts == 1  # the peer lacks it: back off
    assert await Puller(store, me, a.session).fetch_wanted(a.config) == []  # not due yet


async def test_a_failing_peer_is_noted_and_retried(make_peer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    me = keys.SigningKey.generate()
    store = MemoryStore(node_id=me.did)
    down = PeerConfig(keys.SigningKey.generate().did, f"http://127.0.0.1:{unused_port()}")
    monkeypatch.setattr(puller_module, "backoff", lambda failures: 0.01)
    async with aiohttp.ClientSession() as session:
        loop = asyncio.create_task(Puller(store, me, session).run_peer(down))
        for _ in range(200):
            if store.errors.get(down.node_id):
                break
            await asyncio.sleep(0.01)
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    assert store.errors[down.node_id] and loop.cancelled()


async def test_the_scheduler_runs_one_loop_per_configured_peer(make_peer: Any) -> None:
    a, b = await make_peer("a"), await make_peer("b")
    me = keys.SigningKey.generate()
    for peer in (a, b):
        await served_to(peer, me)
        await peer.post(await peer.agent(), f"written at {peer.name}")
    store = MemoryStore(node_id=me.did)
    async with aiohttp.ClientSession() as session:
        scheduler = Scheduler(Puller(store, me, session, wait_ms=200), refresh_s=60)
        running = asyncio.create_task(scheduler.run())
        store.peer_list.append(a.config)
        scheduler.poke()
        await until(lambda: len(store.log) == 2)
        store.peer_list.append(b.config)
        scheduler.poke()  # a peer added later is picked up without a restart
        await until(lambda: len(store.log) == 4)
        store.peer_list.remove(a.config)
        scheduler.poke()
        await asyncio.sleep(0.1)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert {hash_ for hash_, *_ in store.log} >= set((await a.hashes()) | (await b.hashes()))


async def until(condition: Any, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")
