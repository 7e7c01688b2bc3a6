"""sync.replay: the fence that keeps replay protection across restarts, unit by unit and on a real `bbs serve`."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import generate_latest

from identity import keys
from node.ops.metrics import metrics_of
from sync import auth
from sync.client import PeerClient
from sync.memory import MemoryStore
from sync.puller import Puller
from sync.replay import FENCE_NAME, ReplayFence
from sync.store import PeerConfig
from tests.node.test_crash import Server, bbs, free_port
from tests.sync.conftest import make_peer  # noqa: F401  (fixture)

PEER = keys.SigningKey.generate()
URL = "http://node.example:8080/v1/sync/changes?since=0&v=2"
NOW = 1_767_323_045.0
# These poke one process's boot id and fence file; on PostgreSQL the node's processes share both in the database.
NODE_WIDE = (
    "on PostgreSQL the boot id and the nonces are the node's, in its database, and no fence file is read"
    " (tests/node/multiproc/test_replay.py)"
)


def test_a_new_fence_refuses_nothing_and_remembers_what_it_admits(tmp_path: Path) -> None:
    path = tmp_path / FENCE_NAME
    ReplayFence.create(path)
    fence = ReplayFence.load(path)
    assert fence.floor == 0 and not fence.refuses(1)
    fence.admit(int(NOW))
    fence.admit(int(NOW) - 5)  # older seconds do not lower it
    assert path.read_text() == f"{int(NOW)}\n"
    again = ReplayFence.load(path)  # the next process
    assert again.refuses(int(NOW)) and again.refuses(int(NOW) - 30) and not again.refuses(int(NOW) + 1)


@pytest.mark.parametrize("content", [None, "", "not a number\n", "\xff"])
def test_a_missing_or_unreadable_fence_starts_at_the_current_second(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / FENCE_NAME
    if content is not None:
        path.write_bytes(content.encode("latin-1"))
    fence = ReplayFence.load(path, clock=lambda: NOW + 0.7)
    assert fence.floor == int(NOW) and fence.refuses(int(NOW)) and not fence.refuses(int(NOW) + 1)
    assert path.read_text() == f"{int(NOW)}\n"  # written, so the next start knows


def test_the_verifier_refuses_a_request_signed_before_the_restart(tmp_path: Path) -> None:
    path = tmp_path / FENCE_NAME
    ReplayFence.create(path)
    before = auth.PeerVerifier(lambda: NOW, ReplayFence.load(path))
    captured = auth.sign_headers(PEER, "GET", URL, now=NOW)
    assert before.verify("GET", URL, captured, None, frozenset({PEER.did})) == PEER.did
    after = auth.PeerVerifier(lambda: NOW + 3, ReplayFence.load(path))  # a new process, fresh nonce memory
    with pytest.raises(auth.PeerAuthError) as info:
        after.verify("GET", URL, captured, None, frozenset({PEER.did}))
    assert info.value.code == "stale_request" and info.value.status == 401
    fresh = auth.sign_headers(PEER, "GET", URL, now=NOW + 3)
    assert after.verify("GET", URL, fresh, None, frozenset({PEER.did})) == PEER.did


def test_an_unwritable_fence_is_a_503_not_an_acceptance(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    ReplayFence.create(folder / FENCE_NAME)
    verifier = auth.PeerVerifier(lambda: NOW, ReplayFence.load(folder / FENCE_NAME))
    if os.geteuid() == 0:  # root (CI) writes through any mode: a folder where the new value is written stops it
        (folder / (FENCE_NAME + ".tmp")).mkdir()
    os.chmod(folder, 0o500)
    try:
        with pytest.raises(auth.PeerAuthError) as info:
            verifier.verify("GET", URL, auth.sign_headers(PEER, "GET", URL, now=NOW), None, frozenset({PEER.did}))
        assert info.value.status == 503 and info.value.code == "replay_fence_unwritable"
    finally:
        os.chmod(folder, 0o700)


@pytest.mark.sqlite_only(reason=NODE_WIDE)
async def test_a_client_of_the_previous_release_signs_again_once_when_the_peer_restarted_this_second(make_peer) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    fence = a.sync.verifier.fence
    assert fence is not None
    fence.floor = int(time.time())  # as if `a` had accepted a request this very second before restarting
    # signing without a boot id, as the previous release does: served under the fence
    client = PeerClient(b.session, b.node.key, a.node_id, a.url, boots=auth.PeerBoots({a.url: None}))
    reply = await client.changes(0, None, 10, 0)
    assert reply.node_id == a.node_id and client.resigned == 1 and client.requests == 2
    assert a.sync.verifier.legacy == 1


@pytest.mark.sqlite_only(reason=NODE_WIDE)
async def test_a_client_naming_the_boot_is_not_held_by_the_fence(make_peer) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """The fence holds a second far ahead of this node's clock (a peer signed while both clocks ran ahead, and
    NTP stepped them back since): a request naming the node's boot is accepted at once all the same."""
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    fence = a.sync.verifier.fence
    assert fence is not None
    floor = int(time.time()) + 600
    fence.floor = floor
    client = PeerClient(b.session, b.node.key, a.node_id, a.url)
    reply = await client.changes(0, None, 10, 0)
    assert reply.node_id == a.node_id and client.resigned == 0 and client.requests == 1
    assert a.sync.verifier.legacy == 0 and fence.floor == floor  # nothing admitted to it


@pytest.mark.sqlite_only(reason=NODE_WIDE)
async def test_a_request_for_another_boot_is_refused_and_the_client_reads_the_boot_again(make_peer) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    client = PeerClient(b.session, b.node.key, a.node_id, a.url)
    await client.changes(0, None, 10, 0)
    url = a.url + "/v1/sync/changes?since=0&v=2"
    old_boot = a.sync.verifier.boot_id
    captured = auth.sign_headers(b.node.key, "GET", url, boot=old_boot)
    a.sync.verifier.boot_id = "a-later-boot-of-a"  # what a restart draws (the real one: below, on bbs serve)
    async with b.session.get(url, headers=captured) as resp:
        problem = await resp.json()
        assert resp.status == 401 and problem["code"] == "stale_boot" and "GET /v1/node" in problem["detail"]
    async with b.session.get(a.url + "/v1/node") as resp:
        assert (await resp.json())["boot_id"] == "a-later-boot-of-a"
    reply = await client.changes(0, None, 10, 0)  # refused once for the old boot, read it again, accepted
    assert reply.node_id == a.node_id and client.resigned == 1 and client.requests == 3
    tampered = dict(captured, **{"Bbs-Boot": "a-later-boot-of-a"})  # the header is covered by the signature
    async with b.session.get(url, headers=tampered) as resp:
        assert resp.status == 401 and (await resp.json())["code"] == "bad_signature"


@pytest.mark.slow
@pytest.mark.parametrize(("how", "release"), [("stop", "current"), ("kill", "current"), ("kill", "previous")])
async def test_a_request_captured_before_a_restart_is_refused_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, release: str
) -> None:
    """A real `bbs serve` accepts a signed request, is stopped (SIGTERM) or killed (SIGKILL) and started again:
    the captured request, still fresh, is refused (`stale_boot` when it named the node's boot, `stale_request`
    by the fence when signed as the previous release does); the same peer's own puller, running all along, gets
    through again without an error loop and brings an entry written after the restart."""
    data = tmp_path / "a"
    token = bbs("init", "--data", str(data)).stdout.split("keep it safe): ")[1].split()[0]
    api_key = json.loads(bbs("agent", "create", "writer", "--data", str(data), "--json").stdout)["api_key"]
    peer = keys.SigningKey.generate()
    server = Server(data, free_port(), tmp_path / "serve.log")
    monkeypatch.setenv("BBS_SYNC", "off")  # the node serves its feed; it pulls from no one
    try:
        await server.start()
        async with aiohttp.ClientSession() as session:
            admin = {"Authorization": f"Bearer {token}"}
            async with session.post(
                server.url + "/v1/peers", json={"url": "http://127.0.0.1:9/", "node_id": peer.did}, headers=admin
            ) as resp:
                assert resp.status == 201, await resp.text()
            async with session.get(server.url + "/v1/node") as resp:
                node_id = (await resp.json())["node_id"]
            store = MemoryStore(node_id=peer.did)
            puller = Puller(store, peer, session, wait_ms=500, min_poll_s=0.05)
            loop = asyncio.create_task(puller.run_peer(PeerConfig(node_id, server.url)))
            await until(lambda: len(store.log) >= 1)  # the writer agent's identity document
            url = server.url + "/v1/sync/changes?since=0&v=2"
            async with session.get(server.url + "/v1/node") as resp:
                boot = (await resp.json())["boot_id"] if release == "current" else None
            captured = auth.sign_headers(peer, "GET", url, boot=boot)
            async with session.get(url, headers=captured) as resp:
                assert resp.status == 200
            server.kill() if how == "kill" else server.stop()
            await server.start()  # well within the 60 s a signature stays fresh
            # the puller's requests cut or refused while the node was down (more on a loaded machine, where the
            # restart takes longer), and at most one more on its way as the node came back
            restarted = puller.health_of(node_id).failures + 1
            async with session.get(url, headers=captured) as resp:
                refused = "stale_boot" if release == "current" else "stale_request"
                assert resp.status == 401 and (await resp.json())["code"] == refused
            boots = auth.PeerBoots({server.url: boot})  # the boot id read before the restart (None: previous)
            client = PeerClient(session, peer, node_id, server.url, boots=boots)  # the project's own client
            reply = await client.changes(0, None, 10, 0)
            assert reply.node_id == node_id and client.requests <= 2
            body = {"entry_type": "finding", "performative": "inform", "content": "written after the restart"}
            async with session.post(
                server.url + "/v1/entries", json=body, headers={"Authorization": f"Bearer {api_key}"}
            ) as resp:
                assert resp.status == 201, await resp.text()
                posted = (await resp.json())["record_hash"]
            await until(lambda: any(e is not None and e[0] == posted for e in store.log))  # by address
            # the failure count resets once the round that brought it has ended (sync/puller.py)
            await until(lambda: puller.health_of(node_id).consecutive_failures == 0)
            health = puller.health_of(node_id)
            assert not loop.done()
            assert health.failures <= restarted  # the requests cut by the restart itself, not a loop
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
    finally:
        server.kill()
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


async def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_fence_file_lives_beside_the_database(tmp_path: Path) -> None:
    bbs("init", "--data", str(tmp_path / "n"))
    assert (tmp_path / "n" / FENCE_NAME).read_text() == "0\n"


@pytest.mark.sqlite_only(reason=NODE_WIDE)
async def test_requests_of_the_previous_release_are_counted_in_metrics(make_peer) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    old = PeerClient(b.session, b.node.key, a.node_id, a.url, boots=auth.PeerBoots({a.url: None}))
    await old.changes(0, None, 10, 0)
    await PeerClient(b.session, b.node.key, a.node_id, a.url).changes(0, None, 10, 0)
    text = generate_latest(metrics_of(a.app).registry).decode()
    assert "bbs_sync_previous_release_requests_total 1.0" in text
