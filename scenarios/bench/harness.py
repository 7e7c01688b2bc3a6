"""Run a real `bbs serve` subprocess on a loopback port and drive it with concurrent aiohttp clients."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class BenchFailure(RuntimeError):
    """A benchmark run failed (a request errored, a server did not start): not merely slow."""


class Server:
    """`bbs serve --data DIR` as a subprocess (the real entry point), logs in DIR/serve.log."""

    def __init__(self, data: Path, *, extra_env: dict[str, str] | None = None) -> None:
        self.data = data
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> None:
        log = open(self.data / "serve.log", "ab")  # noqa: SIM115  (closed with the process)
        env = {**os.environ, **self.extra_env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "node.cli", "serve", "--data", str(self.data), "--port", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchFailure(f"bbs serve exited with {self.proc.returncode}; see {self.data / 'serve.log'}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise BenchFailure(f"bbs serve did not answer /healthz within {timeout}s")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def rss_bytes(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) of the server process, in bytes."""
        assert self.proc is not None
        return proc_rss(self.proc.pid)

    def cpu_seconds(self) -> float:
        """User + system CPU time the server process has used so far."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks


def proc_rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, in bytes, from /proc."""
    values = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    return values["VmRSS"], values["VmHWM"]


@dataclass
class Call:
    """One request to send: method, path, headers and an already-encoded JSON body."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes | None = None


@dataclass
class LoadResult:
    """What a load run measured."""

    count: int
    elapsed: float
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)

    @property
    def per_second(self) -> float:
        return self.count / self.elapsed if self.elapsed else 0.0


async def run_load(
    base_url: str,
    lanes: Sequence[Sequence[Call]],
    *,
    expect: Callable[[int], bool] = lambda status: 200 <= status < 300,
    check_body: Callable[[Any], None] | None = None,
) -> LoadResult:
    """Send every lane's calls in order, all lanes concurrently (one lane = one client); time each call.

    Raises BenchFailure if any response status fails `expect`: a benchmark of failing requests measures nothing.
    """
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    failures: list[str] = []
    async with aiohttp.ClientSession(base_url, connector=connector) as session:

        async def lane(calls: Sequence[Call]) -> None:
            for call in calls:
                headers = {**call.headers}
                if call.body is not None:
                    headers["Content-Type"] = "application/json"
                started = time.perf_counter()
                async with session.request(call.method, call.path, data=call.body, headers=headers) as resp:
                    payload = await resp.read()
                latencies.append(time.perf_counter() - started)
                statuses[resp.status] = statuses.get(resp.status, 0) + 1
                if not expect(resp.status):
                    failures.append(f"{call.method} {call.path} -> {resp.status}: {payload[:300]!r}")
                elif check_body is not None:
                    check_body(payload)

        started = time.perf_counter()
        await asyncio.gather(*(lane(calls) for calls in lanes))
        elapsed = time.perf_counter() - started
    if failures:
        raise BenchFailure(f"{len(failures)} requests failed; first: {failures[0]}")
    return LoadResult(count=len(latencies), elapsed=elapsed, latencies=latencies, statuses=statuses)


def bearer(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}
