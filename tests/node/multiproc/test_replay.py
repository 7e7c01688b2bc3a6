"""Replay protection of one node served by two processes (issue 41, docs/decisions.md record 86): one boot id for the
node, each captured peer request accepted once by the whole node, a new generation when the nonce memory is lost.

The processes sit behind one name, as behind a load balancer: every request carries `Host: node.example`, the
authority the peer signs, whichever process it reaches.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from aiohttp.test_utils import TestClient
from prometheus_client import generate_latest

from identity import keys
from node.app import create_app
from node.ops.metrics import metrics_of
from node.service import Node
from node.web.appkeys import SYNC
from scenarios import pg_cluster as cluster_mod
from sync import auth
from tests.conftest import FakeClock
from tests.node.multiproc.conftest import Process, TwoProcesses

HOST = "node.example"
PATH = "/v1/sync/changes?since=0&v=2"
URL = f"http://{HOST}{PATH}"


async def add_peer(two: TwoProcesses) -> keys.SigningKey:
    """A peer node's key, configured at process a (so of the node: b reads the same table)."""
    peer = keys.SigningKey.generate()
    resp = await two.a.client.post(
        "/v1/peers", json={"url": "http://127.0.0.1:9/", "node_id": peer.did}, headers=two.admin_headers
    )
    assert resp.status == 201, await resp.text()
    return peer


async def boot_of(process: Process) -> str:
    resp = await process.client.get("/v1/node")
    assert resp.status == 200
    boot = (await resp.json())["boot_id"]
    assert isinstance(boot, str) and boot
    return boot


async def send(process: Process, headers: dict[str, str], *, once: bool = False) -> tuple[int, dict[str, Any]]:
    """The signed GET to `process`, as the balancer forwards it: (status, body).

    After a crash of the server each connection of a process that finds itself lost (a reader, the quick reader, the
    side connection) answers its request 503 `database_unavailable` once (node/store/db.py reopens it for the next
    one): that request is sent again, for up to 30 s, unless `once`. Meant for requests refused by their signature:
    one refused that way was refused before anything read, and one answered 503 failed while reading the node's peers,
    before its nonce was taken. (A count of tries was not enough: which connection a request lands on is the pool's
    choice, and a loaded machine reopens them slower; the last CI's one failure.)"""
    deadline = time.monotonic() + 30
    while True:
        resp = await process.client.get(PATH, headers={**headers, "Host": HOST})
        body: dict[str, Any] = await resp.json()
        if once or resp.status != 503 or body.get("code") != "database_unavailable" or time.monotonic() > deadline:
            return resp.status, body
        await asyncio.sleep(0.05)


async def refused(process: Process, headers: dict[str, str], code: str, status: int = 401) -> None:
    got, body = await send(process, headers)
    assert (got, body.get("code")) == (status, code), body


async def restart(two: TwoProcesses, clock: FakeClock, aiohttp_client: Callable[..., Awaitable[TestClient]]) -> Process:
    """Process a stopped and started again on its folder (a new `Node`, a new server): two.a is the new one."""
    old = two.a
    await old.client.close()  # the app's cleanup closes the node and its own connection
    node = Node(old.folder, clock=clock)
    node.open()
    two.a = Process(old.folder, node, await aiohttp_client(create_app(node)))
    return two.a


def lose_the_nonce_memory(cluster: cluster_mod.Cluster) -> None:
    """A real crash of the PostgreSQL server: one backend killed, so the server ends every other one and recovers,
    emptying its UNLOGGED tables (the nonces and the boot row) as after any crash; back within seconds."""
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert pid is not None
        os.kill(int(pid[0]), signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        try:
            with psycopg.connect(cluster.url(), autocommit=True) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


async def test_every_process_serves_one_boot_id_and_a_request_signed_after_reading_it_at_a_passes_at_b(
    two_processes: TwoProcesses,
) -> None:
    a, b = two_processes.a, two_processes.b
    peer = await add_peer(two_processes)
    boot = await boot_of(a)
    assert await boot_of(b) == boot
    assert a.client.app[SYNC].verifier.boot_id == boot == b.client.app[SYNC].verifier.boot_id
    status, body = await send(b, auth.sign_headers(peer, "GET", URL, boot=boot))
    assert status == 200 and body["node_id"] == a.node.node_id
    # a's start drew the database's first generation, b's read it
    drawn = [generate_latest(metrics_of(p.client.app).registry).decode() for p in (a, b)]
    assert "bbs_sync_boot_generations_drawn_total 1.0" in drawn[0]
    assert "bbs_sync_boot_generations_drawn_total 0.0" in drawn[1]


@pytest.mark.parametrize("release", ["current", "previous"])
async def test_a_captured_request_passes_once_on_the_whole_node_even_after_a_restart(
    two_processes: TwoProcesses,
    clock: FakeClock,
    aiohttp_client: Callable[..., Awaitable[TestClient]],
    release: str,
) -> None:
    """Replayed to a, to b, and to a started again: refused each time (`replayed_request`). A peer of the previous
    release (no boot id) is held by the same nonces; its signature is dated after the generation's first second."""
    a, b = two_processes.a, two_processes.b
    peer = await add_peer(two_processes)
    boot = await boot_of(a) if release == "current" else None
    if boot is None:  # the generation was drawn at a's start: refused are signatures dated up to MAX_SKEW_S past it
        assert a.node.side is not None
        await a.node.side.fetch("UPDATE peer_boot SET since_s = since_s - 60")  # as if drawn a minute ago
    captured = auth.sign_headers(peer, "GET", URL, boot=boot, now=time.time() + 2)
    assert (await send(a, captured))[0] == 200
    await refused(a, captured, "replayed_request")
    await refused(b, captured, "replayed_request")
    restarted = await restart(two_processes, clock, aiohttp_client)
    await refused(restarted, captured, "replayed_request")  # the nonces outlive the process
    if boot is not None:
        assert await boot_of(restarted) == boot  # a process start does not change the generation: peers keep it
    fresh = auth.sign_headers(peer, "GET", URL, boot=boot, now=time.time() + 2)
    assert (await send(restarted, fresh))[0] == 200
    legacy = [p.client.app[SYNC].verifier.legacy for p in (restarted, b)]
    assert legacy == ([1, 0] if boot is None else [0, 0])


async def test_the_same_request_sent_to_both_at_once_passes_once(two_processes: TwoProcesses) -> None:
    a, b = two_processes.a, two_processes.b
    peer = await add_peer(two_processes)
    captured = auth.sign_headers(peer, "GET", URL, boot=await boot_of(a))
    answers = await asyncio.gather(*(send(p, captured) for p in (a, b, a, b)))
    assert sorted(status for status, _ in answers) == [200, 401, 401, 401]
    assert {body["code"] for status, body in answers if status == 401} == {"replayed_request"}


async def test_after_the_nonce_memory_is_lost_a_request_for_the_old_generation_is_stale_boot(
    two_processes: TwoProcesses, pg_cluster: cluster_mod.Cluster
) -> None:
    """The PostgreSQL server crashes (its UNLOGGED nonces and boot row are gone): the first process to find no
    generation draws a new one, both serve it, and nothing signed for the old one passes again anywhere."""
    a, b = two_processes.a, two_processes.b
    peer = await add_peer(two_processes)
    old = await boot_of(a)
    captured = auth.sign_headers(peer, "GET", URL, boot=old)
    assert (await send(a, captured))[0] == 200
    legacy = auth.sign_headers(peer, "GET", URL, now=time.time() + 4)  # a peer of the previous release
    assert a.node.side is not None
    await a.node.side.fetch("UPDATE peer_boot SET since_s = since_s - 60")  # as if drawn a minute ago
    assert (await send(a, legacy))[0] == 200  # dated 4 s ahead (within MAX_SKEW_S): refused after the loss all the same
    await asyncio.to_thread(lose_the_nonce_memory, pg_cluster)
    await refused(b, captured, "stale_boot")  # its nonce is forgotten, its generation with it
    await refused(a, captured, "stale_boot")
    await refused(b, legacy, "stale_request")  # created before the new generation's first second
    new = await boot_of(b)
    assert new != old and await boot_of(a) == new
    # the first generation was drawn at a's start (b read it), the second by whichever process met the loss first
    assert [p.client.app[SYNC].replay.drawn for p in (a, b)] in ([2, 0], [1, 1])
    for _ in range(8):  # signed anew each time: a 503 of a lost reader connection came after the nonce was taken
        status, _ = await send(a, auth.sign_headers(peer, "GET", URL, boot=new), once=True)
        if status != 503:
            break
    assert status == 200


async def test_bad_peer_requests_are_refused_at_either_process_as_before(two_processes: TwoProcesses) -> None:
    a, b = two_processes.a, two_processes.b
    peer = await add_peer(two_processes)
    boot = await boot_of(a)
    await refused(b, {}, "signature_required")
    stranger = keys.SigningKey.generate()
    await refused(b, auth.sign_headers(stranger, "GET", URL, boot=boot), "unknown_peer", 403)
    tampered = dict(auth.sign_headers(peer, "GET", URL, boot=boot), **{auth.BOOT_HEADER: "another-boot"})
    await refused(a, tampered, "bad_signature")
    await refused(b, auth.sign_headers(peer, "GET", URL, boot=boot, now=time.time() - 120), "stale_request")
    await refused(a, auth.sign_headers(peer, "GET", URL, boot="not-this-node's"), "stale_boot")
    assert (await send(b, auth.sign_headers(peer, "GET", URL, boot=boot)))[0] == 200


async def test_expired_nonces_are_swept_with_a_margin(two_processes: TwoProcesses) -> None:
    from node.federation import node_replay

    a = two_processes.a
    replay = a.client.app[SYNC].replay
    assert replay is not None
    side = a.node.side
    assert side is not None
    now = int(time.time())
    old, recent = now - node_replay.SWEEP_MARGIN_S - 1, now - 10  # expired long ago; expired, within the margin
    for nonce, expires in (("o" * 20, old), ("r" * 20, recent)):
        await side.fetch("INSERT INTO peer_nonces (peer, nonce, expires_s) VALUES (%s, %s, %s)", ("p", nonce, expires))
    replay._swept_at = 0.0
    peer = await add_peer(two_processes)
    assert (await send(a, auth.sign_headers(peer, "GET", URL, boot=await boot_of(a))))[0] == 200
    left = {row[0] for row in await side.fetch("SELECT nonce FROM peer_nonces WHERE peer = 'p'")}
    assert left == {"r" * 20}
