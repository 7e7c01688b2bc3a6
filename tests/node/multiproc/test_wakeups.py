"""Wakeups across processes (issue 41, docs/decisions.md record 85): a commit through process a wakes what waits in
process b (its /v1/feed and sync changes long-polls, its search indexer, its push dispatcher) through PostgreSQL's
LISTEN/NOTIFY, and a LISTEN connection ended by the server is reopened with every waiter woken, so nothing is
missed. Also two real `bbs serve` processes: a post through one is found by a search through the other.

Each waiter's own poll is set far beyond the test's bound, so only a wakeup can answer in time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import psycopg
import pytest

from identity import keys
from node.search_index import indexer as indexer_mod
from node.store import commit_listener
from scenarios import pg_cluster as cluster_mod
from scenarios.fednet import free_port
from sync.auth import sign_headers
from tests.conftest import AgentCreds
from tests.node.api_helpers import get_json, post
from tests.node.multiproc.conftest import Process, TwoProcesses, second_folder
from tests.node.push.conftest import receiver
from tests.ops.test_lifecycle import wait_healthy
from tests.ops.test_serve_postgresql import BBS, REPO, bbs

pytestmark = pytest.mark.postgresql

BOUND_S = 5.0  # what "promptly" means here: far below the polls set below, far above a wakeup's milliseconds
NO_POLL_S = 120.0  # a poll interval no test outlives


async def agent(p: Process, name: str) -> AgentCreds:
    created = await p.node.agents.create(name, name.title())
    return AgentCreds(created.name, created.agent_id, created.api_key)


async def listening(p: Process) -> commit_listener.CommitListener:
    """b's LISTEN thread, once its LISTEN is in place."""
    listener = p.node.db.wakeups.listener
    assert listener is not None
    assert await asyncio.to_thread(listener.listening.wait, BOUND_S)
    return listener


def no_polls(p: Process, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only wakeups move `p`'s waiters within the test's bounds."""
    p.node.feed.poll_s = NO_POLL_S
    p.node.sync.poll_s = NO_POLL_S
    monkeypatch.setattr(indexer_mod, "IDLE_POLL_SECONDS", NO_POLL_S)


async def head(p: Process, who: AgentCreds) -> int:
    return int((await get_json(p.client, "/v1/feed", who))["head"])


async def test_a_post_through_a_wakes_bs_feed_long_poll(
    two_processes: TwoProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two_processes.a, two_processes.b
    ada = await agent(a, "ada")
    await listening(b)
    no_polls(b, monkeypatch)
    after = await head(b, ada)
    waiting = asyncio.ensure_future(
        b.client.get("/v1/feed", params={"after": str(after), "wait_ms": "25000"}, headers=ada.headers)
    )
    await asyncio.sleep(0.3)  # the request waits in b
    assert not waiting.done()
    posted = await post(a.client, ada, content="through a")
    resp = await asyncio.wait_for(waiting, BOUND_S)
    assert [e["id"] for e in (await resp.json())["entries"]] == [posted["id"]]
    assert b.node.db.wakeups.stats.received >= 1


async def test_a_post_through_a_wakes_bs_sync_changes_long_poll(
    two_processes: TwoProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two_processes.a, two_processes.b
    peer = keys.SigningKey.generate()
    resp = await a.client.post(
        "/v1/peers", json={"url": "http://127.0.0.1:9", "node_id": peer.did}, headers=two_processes.admin_headers
    )
    assert resp.status == 201, await resp.text()
    ada = await agent(a, "ada")
    await listening(b)
    no_polls(b, monkeypatch)

    boot = (await (await b.client.get("/v1/node")).json())["boot_id"]  # b's, which the peer signs for

    async def changes(since: int, wait_ms: int = 0) -> dict[str, Any]:
        path = f"/v1/sync/changes?v=2&since={since}&wait_ms={wait_ms}"
        signed = sign_headers(peer, "GET", str(b.client.make_url(path)), boot=boot)
        got = await b.client.get(path, headers=signed)
        assert got.status == 200, await got.text()
        body: dict[str, Any] = msgspec.json.decode(await got.read())
        return body

    since = (await changes(0))["head"]
    waiting = asyncio.ensure_future(changes(since, 20_000))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    posted = await post(a.client, ada, content="for the peers")
    page = await asyncio.wait_for(waiting, BOUND_S)
    assert page["type"] == "changes" and page["head"] > since
    assert posted["record_hash"] in json.dumps(page)


async def test_bs_index_finds_an_entry_posted_through_a(
    two_processes: TwoProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two_processes.a, two_processes.b
    assert b.node.search_index is not None and b.node.search_index.path.is_relative_to(b.folder)  # its own index
    ada, bob = await agent(a, "ada"), await agent(a, "bob")
    await listening(b)
    no_polls(b, monkeypatch)
    posted = await post(a.client, ada, content="the okapi stays in b's index")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BOUND_S
    found: list[int] = []
    while loop.time() < deadline and not found:  # bob's search waits for nothing: b's indexer, woken, caught up
        found = [e["id"] for e in (await get_json(b.client, "/v1/search", bob, params={"q": "okapi"}))["entries"]]
        await asyncio.sleep(0.05)
    assert found == [posted["id"]]
    second = await post(a.client, ada, content="a second okapi")
    own = await get_json(b.client, "/v1/search", ada, params={"q": "okapi"})  # ada's own write, read through b
    assert {e["id"] for e in own["entries"]} == {posted["id"], second["id"]} and own.get("stale") is not True
    third = await post(a.client, bob, content="a third okapi")
    fresh = await get_json(b.client, "/v1/search", ada, params={"q": "okapi", "fresh": "true"})
    assert len(fresh["entries"]) == 3 and third["id"] in {e["id"] for e in fresh["entries"]}
    assert fresh.get("stale") is not True


async def test_bs_push_dispatcher_pushes_a_notification_of_a_write_through_a(two_processes: TwoProcesses) -> None:
    a, b = two_processes.a, two_processes.b
    ada, bob = await agent(a, "ada"), await agent(a, "bob")
    await listening(b)
    async with receiver(b.node.node_id) as rx:
        resp = await b.client.post("/v1/push/endpoints", json={"url": rx.url + "/bob"}, headers=bob.headers)
        assert resp.status == 201, await resp.text()  # registered through b: b's dispatcher has its sender
        entry = await post(a.client, ada, performative="request", content="b pushes", directed_to=[bob.agent_id])
        got = await rx.wait_for(1, tries=int(BOUND_S / 0.05))  # the dispatcher has no poll: only a wake moves it
        [env] = got[0]["payload"]["notifications"]
        assert (env["entry_id"], env["reason"]) == (entry["id"], "directed_request")


async def test_a_lost_listen_connection_is_reopened_and_nothing_is_missed(
    two_processes: TwoProcesses,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = two_processes.a, two_processes.b
    ada = await agent(a, "ada")
    listener = await listening(b)
    no_polls(b, monkeypatch)
    monkeypatch.setattr(commit_listener, "RETRY_FIRST_S", 1.0)  # the outage lasts long enough to post within it
    after = await head(b, ada)
    waiting = asyncio.ensure_future(
        b.client.get("/v1/feed", params={"after": str(after), "wait_ms": "25000"}, headers=ada.headers)
    )
    await asyncio.sleep(0.3)
    pid = listener.backend_pid()
    assert pid is not None
    caplog.set_level(logging.WARNING, logger=commit_listener.log.name)
    with psycopg.connect(two_processes.url, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BOUND_S
    while listener.listening.is_set() and loop.time() < deadline:  # b noticed: no LISTEN now
        await asyncio.sleep(0.01)
    assert not listener.listening.is_set()
    posted = await post(a.client, ada, content="sent while b was not listening")  # its NOTIFY reaches no one in b
    resp = await asyncio.wait_for(waiting, BOUND_S)  # the reconnect woke every waiter: it read again
    assert [e["id"] for e in (await resp.json())["entries"]] == [posted["id"]]
    assert await asyncio.to_thread(listener.listening.wait, BOUND_S)
    assert listener.backend_pid() not in (None, pid)
    assert b.node.db.wakeups.stats.reconnects == 1
    lost = [r for r in caplog.records if r.name == commit_listener.log.name and "was lost" in r.getMessage()]
    assert len(lost) == 1  # once per outage
    metrics = await b.client.get("/metrics", headers=two_processes.admin_headers)
    text = await metrics.text()
    assert "bbs_commit_listen_reconnects_total 1.0" in text and "bbs_commit_wakeups_received_total" in text


async def test_own_commits_are_not_taken_for_another_process(two_processes: TwoProcesses) -> None:
    a = two_processes.a
    await two_processes.b.client.close()  # b stops: every commit from now on is a's own
    ada = await agent(a, "ada")
    await listening(a)
    await asyncio.sleep(0.5)  # what b committed before it stopped has come
    before = a.node.db.wakeups.stats.received
    for i in range(3):
        await post(a.client, ada, content=f"mine {i}")
    await asyncio.sleep(0.5)  # a's own NOTIFYs have come back by now, and were skipped
    assert a.node.db.wakeups.stats.received == before


async def test_two_bbs_serve_processes_one_database_a_post_through_one_is_found_through_the_other(
    tmp_path: Path, pg_cluster: cluster_mod.Cluster, pg_template: str
) -> None:
    name = pg_cluster.create_database(template=pg_template)
    url = pg_cluster.store_url(name)
    first, second = tmp_path / "a", tmp_path / "b"
    ports = [free_port(), free_port()]
    bases = [f"http://127.0.0.1:{port}" for port in ports]
    procs: list[subprocess.Popen[str]] = []
    try:
        procs.append(start(first, url, ports[0]))
        await wait_healthy(bases[0], procs[0])
        second_folder(first, second)  # b starts with no search index: it builds its own from the log
        procs.append(start(second, url, ports[1]))
        await wait_healthy(bases[1], procs[1])
        created = bbs("agent", "create", "alice", "--data", str(first), "--json")
        assert created.returncode == 0, created.stderr
        headers = {"Authorization": f"Bearer {json.loads(created.stdout)['api_key']}"}
        body = {"entry_type": "finding", "performative": "inform", "content": "the pangolin crossed processes"}
        search = {"q": "pangolin", "fresh": "true"}
        async with aiohttp.ClientSession() as session:
            async with session.post(bases[0] + "/v1/entries", json=body, headers=headers) as resp:
                assert resp.status == 201, await resp.text()
                posted = await resp.json()
            async with session.get(bases[1] + "/v1/search", params=search, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                found = await resp.json()
            assert [hit["record_hash"] for hit in found["entries"]] == [posted["record_hash"]]
            assert found.get("stale") is not True
            assert (second / "search-index").is_dir() and (first / "search-index").is_dir()  # one index each
            # b stops; `bbs doctor` and `bbs rebuild` on b's folder check and rebuild b's index while a serves on
            procs[1].terminate()
            procs[1].wait(timeout=30)
            doctor = bbs("doctor", "--data", str(second), "--json")
            rebuilt = bbs("rebuild", "--data", str(second))
            async with session.get(bases[0] + "/v1/search", params=search, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                again = await resp.json()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
    checks = {c["name"]: c["status"] for c in json.loads(doctor.stdout)}
    assert checks["search_index"] == "ok", doctor.stdout
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert json.loads(rebuilt.stdout)["search_index_entries"] == 1
    assert [hit["record_hash"] for hit in again["entries"]] == [posted["record_hash"]]
    pg_cluster.drop_database(name)


def start(folder: Path, url: str, port: int) -> subprocess.Popen[str]:
    """`bbs serve` of `folder` on the node's database `url`."""
    return subprocess.Popen(
        [*BBS, "serve", "--data", str(folder), "--store", url, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
