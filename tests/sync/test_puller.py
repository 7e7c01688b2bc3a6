"""sync.puller: pulling a real node's feed into a store, resets, link targets, the per-peer loop, the scheduler."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import unused_port

from identity import keys
from sync import puller as puller_module
from sync import workers
from sync.memory import MemoryStore
from sync.messages import PROTOCOL_VERSION
from sync.puller import Puller, PullReport, Scheduler, backoff, verify_many
from sync.store import Invalid, PeerConfig, StoreUnavailable, Verified
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
    items: list[tuple[bytes, str | None, str | None]] = [(body_of(r), hash_of(r), None) for r in good]
    items.append((b"{", None, None))
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


async def test_verify_many_splits_a_large_page_and_keeps_its_order() -> None:
    good = [signed_entry(AUTHOR, f"page {i}") for i in range(300)]
    items: list[tuple[bytes, str | None, str | None]] = [(body_of(r), hash_of(r), None) for r in good]
    items[150] = (b"[]", None, None)
    results = await verify_many(items)
    assert [r.hash for r in results[:150]] == [hash_of(r) for r in good[:150]]
    assert isinstance(results[150], Invalid) and results[150].reason == "malformed"
    assert [r.hash for r in results[151:]] == [hash_of(r) for r in good[151:]]


async def test_catch_up_stores_every_page_in_order_with_its_cursor(make_peer: Any) -> None:
    a = await make_peer("a")
    me = keys.SigningKey.generate()
    await served_to(a, me)
    writer = await a.agent()
    for i in range(7):
        await a.post(writer, f"entry {i}")
    store = MemoryStore(node_id=me.did)
    puller = Puller(store, me, a.session, limit=2)
    report = await puller.catch_up(a.config)
    assert not report.more and not report.reset
    page = await a.sync.store.changes(0, 100)
    assert [o.hash for o in report.outcomes] == [h for _, h, _, _ in page.items]  # in the feed's order
    assert {o.outcome for o in report.outcomes} == {"saved"}
    assert store.cursors[a.node_id] == (page.epoch, page.head)
    assert store.digest() == await a.digest()
    assert a.node_id in store.health and store.errors[a.node_id] is None  # the peer was noted as answering
    assert (await puller.catch_up(a.config)) == PullReport()  # caught up: one empty page, nothing stored


class FailingStore(MemoryStore):
    """A store whose disk fails on the n-th page it is asked to store (a fault of this node, not the peer)."""

    def __init__(self, node_id: str, fail_at: int) -> None:
        super().__init__(node_id=node_id)
        self.fail_at, self.pages = fail_at, 0

    async def ingest(
        self, peer_id: str, records: list[Verified], invalid: list[Invalid], cursor: Any, too_new_from: Any = None
    ) -> Any:
        self.pages += 1
        if self.pages == self.fail_at:
            raise OSError("disk I/O error")
        return await super().ingest(peer_id, records, invalid, cursor, too_new_from)


async def test_a_catch_up_that_fails_keeps_the_pages_stored_before_and_resumes_after_them(make_peer: Any) -> None:
    a = await make_peer("a")
    me = keys.SigningKey.generate()
    await served_to(a, me)
    writer = await a.agent()
    for i in range(9):
        await a.post(writer, f"entry {i}")
    store = FailingStore(me.did, fail_at=3)
    puller = Puller(store, me, a.session, limit=2)
    with pytest.raises(OSError, match="disk I/O error"):
        await puller.catch_up(a.config)
    page = await a.sync.store.changes(0, 100)
    held = [h for _, h, _, _ in page.items[:4]]
    assert sorted(store.addresses) == sorted(held)  # the two pages stored before the failure, nothing after
    assert store.cursors[a.node_id] == (page.epoch, page.items[3][0])  # their cursor: the next pull resumes there
    report = await puller.catch_up(a.config)
    assert [o.hash for o in report.outcomes] == [h for _, h, _, _ in page.items[4:]]
    assert store.digest() == await a.digest()


async def test_catch_up_from_another_epoch_resets_through_reconciliation(make_peer: Any) -> None:
    a = await make_peer("a")
    me = keys.SigningKey.generate()
    await served_to(a, me)
    await a.post(await a.agent(), "one")
    store = MemoryStore(node_id=me.did)
    puller = Puller(store, me, a.session)
    await puller.catch_up(a.config)
    store.cursors[a.node_id] = store.cursors[a.node_id]._replace(epoch="0" * 32)  # the peer's store was replaced
    report = await puller.catch_up(a.config)
    assert report.reset and report.more
    epoch, head = await a.sync.store.position()
    assert store.cursors[a.node_id] == (epoch, head)
    assert store.digest() == await a.digest()


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
        scheduler.halt()  # ends the loops without a cancel (one a poke could swallow on Python 3.11)
        await asyncio.wait_for(running, 5)
        assert not running.cancelled()
    assert {e[0] for e in store.log if e is not None} >= set((await a.hashes()) | (await b.hashes()))


async def until(condition: Any, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


# ---- a hostile or faulty peer cannot stall or spin the loop ----------------------------------------------


class Hostile:
    """A misbehaving peer: real aiohttp, answering the sync routes as the test says, recording each request."""

    def __init__(self) -> None:
        self.key = keys.SigningKey.generate()
        self.down = False  # answer every request with a 503
        self.fetch_extra: str | None = None  # a hash to add, unrequested, to every fetch reply
        self.changes_at: list[float] = []  # when each changes request arrived (monotonic)
        self.reconciles = 0
        self.fetches = 0
        self.url = ""

    def reply(self, payload: dict[str, Any]) -> web.Response:
        return web.json_response({"v": PROTOCOL_VERSION, "node_id": self.key.did, **payload})

    async def changes(self, request: web.Request) -> web.Response:
        self.changes_at.append(time.monotonic())
        if self.down:
            return web.json_response({"code": "unavailable"}, status=503)
        page = {"type": "changes", "epoch": "ab", "head": 0, "next": 0, "more": False, "items": []}
        return self.reply(page)  # a long-poll answered at once, empty

    async def fetch(self, request: web.Request) -> web.Response:
        self.fetches += 1
        asked = (await request.json())["hashes"]
        items = (
            [{"hash": self.fetch_extra, "version": self.fetch_extra, "record": {"x": 1}}] if self.fetch_extra else []
        )
        return self.reply({"type": "records", "items": items, "missing": asked})

    async def reconcile(self, request: web.Request) -> web.Response:
        self.reconciles += 1
        if self.down:
            return web.json_response({"code": "unavailable"}, status=503)
        return self.reply({"type": "reconcile_reply", "epoch": "ab", "head": 0, "message": None})

    @property
    def config(self) -> PeerConfig:
        return PeerConfig(self.key.did, self.url)


@pytest.fixture
async def hostile(aiohttp_server: Any) -> Hostile:
    peer = Hostile()
    app = web.Application()
    app.router.add_get("/v1/sync/changes", peer.changes)
    app.router.add_post("/v1/sync/fetch", peer.fetch)
    app.router.add_post("/v1/sync/reconcile", peer.reconcile)
    server = await aiohttp_server(app)
    peer.url = str(server.make_url("")).rstrip("/")
    return peer


async def running(puller: Puller, peer: PeerConfig, done: Any) -> None:
    """Run the peer's loop until `done()` holds (or give up), then stop it."""
    loop = asyncio.create_task(puller.run_peer(peer))
    try:
        await until(done)
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


async def test_a_fetch_with_unrequested_records_is_a_failure_that_backs_off(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(puller_module, "backoff", lambda failures: 0.01)
    me = keys.SigningKey.generate()
    store = MemoryStore(node_id=me.did)
    linking = signed_entry(AUTHOR, "links to a target the peer will not serve", links=("e" * 64,))
    await store.ingest(hostile.key.did, [verified(linking)], [], None)
    hostile.fetch_extra = "f" * 64
    async with aiohttp.ClientSession() as session:
        puller = Puller(store, me, session, wait_ms=50, min_poll_s=0.01)
        health = puller.health_of(hostile.key.did)
        await running(puller, hostile.config, lambda: hostile.reconciles >= 1)
    assert hostile.fetches >= 1 and health.fetch_failures >= 1 and health.failures >= 1
    assert store.wants["e" * 64].attempts >= 1  # the failed fetch was a try: it backs off, then is given up
    assert hostile.reconciles >= 1  # and the loop goes on to reconcile instead of retrying the fetch forever
    assert store.health[hostile.key.did].failures >= 1  # noted with the peer


async def test_a_peer_answering_long_polls_at_once_is_not_polled_in_a_spin(hostile: Hostile) -> None:
    me = keys.SigningKey.generate()
    store = MemoryStore(node_id=me.did)
    async with aiohttp.ClientSession() as session:
        puller = Puller(store, me, session, wait_ms=20_000, min_poll_s=0.1)
        health = puller.health_of(hostile.key.did)
        await running(puller, hostile.config, lambda: health.throttled_polls >= 4)
    gaps = [b - a for a, b in zip(hostile.changes_at[1:], hostile.changes_at[2:], strict=False)]
    # Each long-poll after an early empty one waited out the 0.1 s floor, counted from the client's start of the
    # empty one: the peer sees the starts shifted by each request's own delay on a loaded machine, so it may see
    # a gap some tens of milliseconds short of the floor; a spin would show gaps of a millisecond or two.
    assert gaps and min(gaps) >= 0.05


async def test_a_peer_reachable_again_is_reconciled_at_once(hostile: Hostile, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(puller_module, "backoff", lambda failures: 0.01)
    me = keys.SigningKey.generate()
    store = MemoryStore(node_id=me.did)
    async with aiohttp.ClientSession() as session:
        puller = Puller(store, me, session, wait_ms=50, min_poll_s=0.01, reconcile_every_s=3600)
        health = puller.health_of(hostile.key.did)
        loop = asyncio.create_task(puller.run_peer(hostile.config))
        try:
            await until(lambda: hostile.reconciles == 1)  # the first round reconciles
            hostile.down = True
            await until(lambda: health.consecutive_failures >= 2)
            assert hostile.reconciles == 1
            hostile.down = False
            await until(lambda: hostile.reconciles == 2)  # not an hour later
            # The peer counts the reconciliation when it answers; the puller clears its failures after the round.
            await until(lambda: health.consecutive_failures == 0)
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
    assert health.reconnect_reconciliations == 1 and health.consecutive_failures == 0


async def test_a_large_page_is_verified_in_worker_processes_as_on_threads() -> None:
    good = [signed_entry(AUTHOR, f"pooled {i}") for i in range(puller_module.POOL_MIN_ITEMS)]
    items: list[tuple[bytes, str | None, str | None]] = [(body_of(r), hash_of(r), None) for r in good]
    items[7] = (b"[]", None, None)
    items[8] = (body_of(good[8]), "0" * 64, None)
    items[9] = (body_of(good[9]).replace(b"pooled", b"forged"), None, None)
    pool = workers.VerifyPool(2)
    try:
        pooled = await pool.verify(items)
        assert not pool.failed
        assert pooled == [verify_record(*item) for item in items]  # the same results, Structs and all, in order
        assert [r.reason for r in pooled[7:10] if isinstance(r, Invalid)] == [
            "malformed",
            "hash_mismatch",
            "bad_signature",
        ]
        assert await verify_many(items, pool) == pooled
    finally:
        pool.close()


async def test_a_pool_that_cannot_start_leaves_verification_to_threads() -> None:
    good = [signed_entry(AUTHOR, f"unpooled {i}") for i in range(puller_module.POOL_MIN_ITEMS)]
    items: list[tuple[bytes, str | None, str | None]] = [(body_of(r), hash_of(r), None) for r in good]
    pool = workers.VerifyPool(1, start_method="no-such-method")  # as on a platform without it
    assert await pool.verify(items) is None and pool.failed
    results = await verify_many(items, pool)
    assert [r.hash for r in results] == [hash_of(r) for r in good]
    assert await pool.verify(items) is None  # given up for good: not tried again for every page


def test_the_worker_processes_end_when_their_node_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "pooled.py"
    script.write_text(
        "import asyncio, multiprocessing, sys, time\n"
        "from sync import puller, workers\n"
        "from tests.sync.conftest import body_of, hash_of, signed_entry\n"
        "from identity import keys\n"
        "if __name__ == '__main__':\n"
        "    key = keys.SigningKey.generate()\n"
        "    good = [signed_entry(key, f'r{i}') for i in range(puller.POOL_MIN_ITEMS)]\n"
        "    items = [(body_of(r), hash_of(r), None) for r in good]\n"
        "    assert asyncio.run(workers.VerifyPool(2).verify(items)) is not None\n"
        "    print(' '.join(str(p.pid) for p in multiprocessing.active_children()), flush=True)\n"
        "    time.sleep(60)\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, env=env, cwd=root)
    try:
        assert proc.stdout is not None
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) >= 2  # the two worker processes (and perhaps multiprocessing's resource tracker)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 15
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [pid for pid in pids if _running(pid)]
    assert alive == []


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting for init to reap it has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class UnreachableStore(MemoryStore):
    """A store whose database is out of reach while `down`: every ingest raises StoreUnavailable."""

    down = True

    async def ingest(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            raise StoreUnavailable("the database restarts")
        return await super().ingest(*args, **kwargs)


async def test_a_store_out_of_reach_is_a_failure_backed_off_not_a_crash(
    make_peer: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A PostgreSQL restart under a node (node/store/conn.py ConnectionLost is a StoreUnavailable): the pull is noted
    failed and tried again after its back-off, logged as a warning without a traceback, and succeeds once the
    database is back."""
    peer = await make_peer("p")
    me = keys.SigningKey.generate()
    await served_to(peer, me)
    await peer.post(await peer.agent(), "written while our database restarts")
    store = UnreachableStore(node_id=me.did)
    monkeypatch.setattr(puller_module, "backoff", lambda failures: 0.01)
    async with aiohttp.ClientSession() as session:
        loop = asyncio.create_task(Puller(store, me, session, wait_ms=200).run_peer(peer.config))
        await until(lambda: bool(store.errors.get(peer.node_id)))
        store.down = False
        await until(lambda: len(store.log) > 0)
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    failed = [r for r in caplog.records if r.name == "bbs.sync" and "failed" in r.getMessage()]
    assert failed and all(r.exc_info is None for r in failed)
    assert not [r for r in caplog.records if "crashed" in r.getMessage()]
