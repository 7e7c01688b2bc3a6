"""A receiving agent as a real process (scenarios.bench.push_receiver.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[3]


class Receiver:
    """A running receiver process and its base URL."""

    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc, self.port = proc, port
        self.url = f"http://127.0.0.1:{port}"

    async def received(self) -> list[dict]:
        async with aiohttp.ClientSession() as s, s.get(self.url + "/received") as resp:
            return await resp.json()

    async def behave(self, **how: object) -> None:
        async with aiohttp.ClientSession() as s, s.post(self.url + "/behave", json=how) as resp:
            assert resp.status == 200

    async def wait_for(
        self, count: int, cond: Callable[[list[dict]], bool] | None = None, tries: int = 200
    ) -> list[dict]:
        """The pushes received once there are `count` of them (and `cond` holds); fails after `tries` looks."""
        got: list[dict] = []
        for _ in range(tries):
            got = await self.received()
            if len(got) >= count and (cond is None or cond(got)):
                return got
            await asyncio.sleep(0.05)
        raise AssertionError(f"received {len(got)} pushes, wanted {count}: {got}")


@asynccontextmanager
async def receiver(node_id: str, *extra: str) -> AsyncIterator[Receiver]:
    """Start scenarios.bench.push_receiver.py; stop it afterwards."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "scenarios.bench.push_receiver", "--node-id", node_id, *extra],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.to_thread(proc.stdout.readline)
        assert line.startswith("PORT "), line
        yield Receiver(proc, int(line.split()[1]))
    finally:
        proc.terminate()
        proc.wait(10)
