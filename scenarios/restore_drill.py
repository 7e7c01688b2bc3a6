"""Scenario: the Litestream restore drill on real processes, then rejoining the federation.

Two `bbs serve` nodes, A and B, peer each other. `litestream replicate` ships A's database to a local
file replica. Agents write on both; A's digest is noted once the replica holds everything. Then A is
stopped, its data folder destroyed, and restored with `bbs restore --litestream-config --key`: the digest
must match, the store must have a new epoch, `bbs doctor` must pass. A starts again and rejoins: a write
on each side after the restore reaches the other.

Run: python -m scenarios.restore_drill   (exit status 0 on success, 1 on failure)
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from node.ops.backup import litestream_binary
from scenarios.fednet import free_port

ENV = {"BBS_SYNC_WAIT_MS": "15000", "BBS_RECONCILE_EVERY_S": "2"}


class DrillFailed(AssertionError):
    """An expectation of the drill did not hold."""


def bbs(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "node.cli", *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise DrillFailed(f"bbs {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def digest(data: Path) -> tuple[int, str]:
    d = json.loads(bbs("digest", "--data", str(data), "--json"))
    return int(d["count"]), str(d["sha256"])


def epoch(data: Path) -> str:
    conn = sqlite3.connect(data / "bbs.db")
    try:
        return str(conn.execute("SELECT value FROM node_meta WHERE key = 'epoch'").fetchone()[0])
    finally:
        conn.close()


class Node:
    """One served node on loopback."""

    def __init__(self, name: str, data: Path) -> None:
        self.name, self.data, self.port = name, data, free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.token = self.node_id = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def init(self) -> None:
        match = re.search(r"Admin token \(shown once, keep it safe\): (\S+)", bbs("init", "--data", str(self.data)))
        if not match:
            raise DrillFailed("no admin token from bbs init")
        self.token = match.group(1)

    async def start(self, session: aiohttp.ClientSession) -> None:
        log = open(self.data.parent / f"{self.name}.log", "ab")  # noqa: SIM115 (kept open while it runs)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "node.cli", "serve", "--data", str(self.data), "--port", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **ENV},
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DrillFailed(f"{self.name} exited with {self.proc.returncode}")
            try:
                async with session.get(self.url + "/v1/node") as resp:
                    if resp.status == 200:
                        self.node_id = (await resp.json())["node_id"]
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        raise DrillFailed(f"{self.name} did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if self.proc.wait(timeout=60) != 0:
                raise DrillFailed(f"{self.name} exited with {self.proc.returncode} after SIGTERM")
        self.proc = None

    async def post(self, session: aiohttp.ClientSession, key: str, content: str) -> str:
        body = {"entry_type": "finding", "performative": "inform", "content": content}
        async with session.post(self.url + "/v1/entries", json=body, headers={"Authorization": key}) as resp:
            if resp.status != 201:
                raise DrillFailed(f"{self.name}: post answered {resp.status}: {await resp.text()}")
            return str((await resp.json())["record_hash"])

    async def has(self, session: aiohttp.ClientSession, key: str, record_hash: str) -> bool:
        async with session.get(self.url + f"/v1/entries/{record_hash}", headers={"Authorization": key}) as resp:
            return resp.status == 200


def agent_key(node: Node, name: str) -> str:
    created = json.loads(bbs("agent", "create", name, "--data", str(node.data), "--json"))
    return f"Bearer {created['api_key']}"


async def until(check: Any, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not await check():
        if time.monotonic() - start > timeout:
            raise DrillFailed(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.2)
    return time.monotonic() - start


async def run(root: Path) -> None:
    a, b = Node("a", root / "a"), Node("b", root / "b")
    config, key_copy, probe = root / "litestream.yml", root / "a-node.key", root / "probe"
    replicate: subprocess.Popen[bytes] | None = None
    async with aiohttp.ClientSession() as session:
        try:
            for n in (a, b):
                n.init()
            ka, kb = agent_key(a, "writer-a"), agent_key(b, "writer-b")
            for n in (a, b):
                await n.start(session)
            bbs("peer", "add", b.url, "--key", b.node_id, "--data", str(a.data))
            bbs("peer", "add", a.url, "--key", a.node_id, "--data", str(b.data))
            bbs("litestream-config", "--data", str(a.data), "--replica", str(root / "replica"), "--out", str(config))
            shutil.copyfile(a.data / "node.key", key_copy)
            replicate = subprocess.Popen(
                [litestream_binary(), "replicate", "-config", str(config)],
                stdout=subprocess.DEVNULL,
                stderr=open(root / "litestream.log", "ab"),  # noqa: SIM115
            )

            # 1. write on both sides; wait until A holds everything and the replica holds A.
            written = [await a.post(session, ka, f"A before the loss {i}") for i in range(20)]
            written += [await b.post(session, kb, f"B before the loss {i}") for i in range(20)]

            async def a_has_all() -> bool:
                return all([await a.has(session, ka, h) for h in written])

            await until(a_has_all, 60, "A to hold every record")
            before = digest(a.data)
            old_epoch = epoch(a.data)

            async def replica_caught_up() -> bool:
                shutil.rmtree(probe, ignore_errors=True)
                probe.mkdir()
                done = subprocess.run(
                    [
                        litestream_binary(),
                        "restore",
                        "-config",
                        str(config),
                        "-o",
                        str(probe / "bbs.db"),
                        str((a.data / "bbs.db").resolve()),
                    ],
                    capture_output=True,
                )
                return done.returncode == 0 and digest(probe) == before

            took = await until(replica_caught_up, 60, "the replica to hold A's records")
            print(f"replica caught up {took:.1f}s after the last write; digest {before[0]} {before[1][:16]}")

            # 2. lose A's disk.
            a.stop()
            replicate.terminate()
            replicate.wait(timeout=30)
            shutil.rmtree(a.data)

            # 3. restore from the replica and the key copy.
            result = json.loads(
                bbs("restore", "--data", str(a.data), "--litestream-config", str(config), "--key", str(key_copy))
            )
            after = digest(a.data)
            if after != before:
                raise DrillFailed(f"restored digest {after} differs from {before}")
            if result["epoch"] == old_epoch or result["previous_epoch"] != old_epoch:
                raise DrillFailed(f"store epoch not renewed: {result} (old {old_epoch})")
            bbs("doctor", "--data", str(a.data), "--peer-timeout", "2")
            print(f"restored: digest matches, new epoch {result['epoch'][:8]} (was {old_epoch[:8]}), doctor ok")

            # 4. rejoin: A serves again on its old address; writes cross in both directions.
            await a.start(session)
            after_a = await a.post(session, ka, "A after the restore")
            after_b = await b.post(session, kb, "B after the restore")
            took_b = await until(lambda: b.has(session, kb, after_a), 60, "A's new write to reach B")
            took_a = await until(lambda: a.has(session, ka, after_b), 60, "B's new write to reach A")
            print(f"rejoined: A -> B {took_b:.1f}s, B -> A {took_a:.1f}s")

            async def same() -> bool:
                return digest(a.data) == digest(b.data)

            await until(same, 60, "A and B to agree")
            peers = json.loads(bbs("peers", "--data", str(b.data), "--json"))["peers"]
            seen = next(p for p in peers if p["node_id"] == a.node_id)
            if seen["cursor_epoch"] != result["epoch"]:
                raise DrillFailed(f"B's cursor into A is still on epoch {seen['cursor_epoch']}, not the new one")
            print(
                "A and B agree after the restore; B's cursor moved to A's new epoch"
                f" ({seen['reconciliations']} reconciliations)"
            )
        finally:
            if replicate is not None and replicate.poll() is None:
                replicate.terminate()
                replicate.wait(timeout=30)
            for n in (a, b):
                if n.proc is not None and n.proc.poll() is None:
                    n.proc.kill()
                    n.proc.wait()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bbs-restore-drill-") as tmp:
        try:
            asyncio.run(run(Path(tmp)))
        except DrillFailed as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
    print("restore drill: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
