"""Crash safety: SIGKILL a real `bbs serve` during concurrent posts and batches; every acknowledged entry survives,
and no batch is half-stored."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from scenarios.bench.harness import listens
from scenarios.fednet import free_port

POSTS = 200
CONCURRENCY = 32
KILL_AFTER_ACKS = 50
BATCH_EVERY, BATCH_SIZE = 4, 4  # every 4th request is a POST /v1/entries/batch of 4 entries


def bbs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args], capture_output=True, text=True, timeout=120, check=True
    )


class Server:
    """A `bbs serve` subprocess on a loopback port."""

    def __init__(self, data: Path, port: int, log: Path) -> None:
        self.data, self.port, self.log = data, port, log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "node.cli", "serve", "--data", str(self.data), "--port", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        async with aiohttp.ClientSession() as session:
            for _ in range(300):
                if self.proc.poll() is not None:
                    raise AssertionError(f"bbs serve exited: {self.log.read_text()}")
                try:
                    async with session.get(self.url + "/healthz") as resp:
                        if resp.status == 200 and listens(self.proc.pid, self.port):
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise AssertionError(f"bbs serve did not come up: {self.log.read_text()}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    data = tmp_path / "crash-node"
    bbs("init", "--data", str(data))
    srv = Server(data, free_port(), tmp_path / "serve.log")
    yield srv
    srv.kill()


@pytest.mark.slow
async def test_sigkill_during_concurrent_posts_loses_no_acknowledged_entry(server: Server) -> None:
    agent = json.loads(bbs("agent", "create", "writer", "--data", str(server.data), "--json").stdout)
    headers = {"Authorization": f"Bearer {agent['api_key']}"}
    await server.start()

    acked: dict[str, str] = {}  # record_hash -> content
    failures: list[str] = []
    enough = asyncio.Event()
    gate = asyncio.Semaphore(CONCURRENCY)

    batches: dict[int, bool] = {}  # request number -> acknowledged

    def entry(content: str, i: int) -> dict[str, Any]:
        return {"entry_type": "finding", "performative": "inform", "content": content, "tags": [f"n{i % 7}"]}

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        if i % BATCH_EVERY == 0:
            contents = [f"crash test entry {i} batch {j}" for j in range(BATCH_SIZE)]
            path, body = "/v1/entries/batch", {"entries": [entry(c, i) for c in contents]}
            batches[i] = False
        else:
            contents = [f"crash test entry {i}"]
            path, body = "/v1/entries", entry(contents[0], i)
        async with gate:
            try:
                async with session.post(server.url + path, json=body, headers=headers) as resp:
                    data: dict[str, Any] = await resp.json()
                    if resp.status == 201:
                        stored = [r["entry"] for r in data["results"]] if i in batches else [data]
                        acked.update({e["record_hash"]: c for e, c in zip(stored, contents, strict=True)})
                        if i in batches:
                            batches[i] = True
                        if len(acked) >= KILL_AFTER_ACKS:
                            enough.set()
                    else:
                        failures.append(f"{resp.status}: {data}")
            except (TimeoutError, aiohttp.ClientError) as exc:
                failures.append(type(exc).__name__)

    async def killer() -> None:
        await enough.wait()
        server.kill()

    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        kill_task = asyncio.create_task(killer())
        await asyncio.gather(*(one(session, i) for i in range(POSTS)))
        enough.set()
        await kill_task

    assert len(acked) >= KILL_AFTER_ACKS
    assert failures, "the server was killed while requests were in flight, so some must have failed"
    assert all(not f[:3].isdigit() for f in failures), failures  # failures are dropped connections, not errors
    assert len(acked) < POSTS

    # The file is intact after the kill, before anything reopens it.
    conn = sqlite3.connect(server.data / "bbs.db")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()

    await server.start()
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            hashes = list(acked)
            for start in range(0, len(hashes), 100):
                chunk = hashes[start : start + 100]
                async with session.get(
                    server.url + "/v1/entries",
                    params={"ids": ",".join(chunk), "include_links": "false"},
                    headers=headers,
                ) as resp:
                    assert resp.status == 200
                    body = await resp.json()
                assert body["missing"] == []
                assert {e["record_hash"]: e["content"] for e in body["entries"]} == {h: acked[h] for h in chunk}
            found: set[str] = set()
            # a search before the restarted node's first index catch-up answers from the index as it is, `stale`
            # (docs/api.md, "Freshness"): wait for one that is not
            for _ in range(600):
                params = {"q": "crash test entry", "limit": "1", "fresh": "true"}
                async with session.get(server.url + "/v1/search", params=params, headers=headers) as resp:
                    assert resp.status in (200, 503)
                    if resp.status == 200 and not (await resp.json())["stale"]:
                        break
                await asyncio.sleep(0.05)
            for offset in range(0, 2 * POSTS * BATCH_SIZE, 200):
                async with session.get(
                    server.url + "/v1/search",
                    params={"q": "crash test entry", "limit": "200", "offset": str(offset)},
                    headers=headers,
                ) as resp:
                    found |= {e["record_hash"] for e in (await resp.json())["entries"]}
            assert set(acked) <= found  # the FTS index survived with the rows
            # the node still accepts writes after the crash
            async with session.post(
                server.url + "/v1/entries",
                json={"entry_type": "finding", "performative": "inform", "content": "after the crash"},
                headers=headers,
            ) as resp:
                assert resp.status == 201
    finally:
        server.stop()
    conn = sqlite3.connect(server.data / "bbs.db")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert (
            conn.execute("SELECT count(*) FROM entries").fetchone()[0]
            == conn.execute("SELECT count(*) FROM records WHERE kind = 'entry'").fetchone()[0]
        )
        # a batch is stored whole or not at all, acknowledged or not
        assert any(batches.values()) and not all(batches.values())
        for i, was_acked in batches.items():
            stored = conn.execute(
                "SELECT count(*) FROM entries WHERE content LIKE ?", (f"crash test entry {i} batch %",)
            ).fetchone()[0]
            assert stored == BATCH_SIZE if was_acked else stored in (0, BATCH_SIZE), (i, was_acked, stored)
    finally:
        conn.close()
