"""Run a real `bbs serve` subprocess on a loopback port and drive it with concurrent keep-alive HTTP clients."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from scenarios.fednet import free_port


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

    def start(self, timeout: float = 30.0, attempts: int = 3) -> None:
        """Start `bbs serve` and wait until it answers; a port another process took first is retried on a new one."""
        log_path = self.data / "serve.log"
        for attempt in range(attempts):
            offset = log_path.stat().st_size if log_path.exists() else 0
            log = open(log_path, "ab")  # noqa: SIM115  (closed with the process)
            # Benchmarks measure throughput: the rate limits (100/s per key, 50/s per address without one, by
            # default) are lifted, as an operator would for a bulk load; a run can still set them through extra_env.
            env = {**os.environ, "BBS_RATE_LIMIT_PER_S": "0", "BBS_ANON_RATE_LIMIT_PER_S": "0", **self.extra_env}
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "node.cli", "serve", "--data", str(self.data), "--port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
            log.close()
            try:
                wait_healthy(self.proc, self.url, timeout, f"bbs serve (see {log_path})")
                return
            except BenchFailure:
                self.stop()
                with open(log_path, "rb") as fh:
                    fh.seek(offset)
                    said = fh.read()
                taken = b"cannot listen" in said or b"address already in use" in said.lower()
                if not taken or attempt == attempts - 1:
                    raise
                self.port = free_port()
                self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
        self.proc = None

    def rss_bytes(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) of the server process, in bytes."""
        assert self.proc is not None
        return proc_rss(self.proc.pid)

    def metrics(self, admin_token: str) -> str:
        """The node's /metrics, as text."""
        request = urllib.request.Request(self.url + "/metrics", headers={"Authorization": f"Bearer {admin_token}"})
        with urllib.request.urlopen(request, timeout=10) as resp:
            return str(resp.read().decode())

    def writer_stats(self, admin_token: str) -> dict[str, float]:
        """The node's `bbs_writer_*_total` counters from /metrics (transactions, jobs, busy_seconds, ...)."""
        text = self.metrics(admin_token)
        prefix, suffix = "bbs_writer_", "_total "
        return {
            line[len(prefix) : line.index(suffix)]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(prefix) and suffix in line
        }

    def gauge(self, admin_token: str, name: str) -> float | None:
        """One gauge of the node's /metrics (None when it has none by that name)."""
        for line in self.metrics(admin_token).splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def cpu_seconds(self) -> float:
        """User + system CPU time the server process and its live children (its worker processes) have used."""
        assert self.proc is not None
        return cpu_seconds(self.proc.pid) + sum(cpu_seconds(child) for child in children(self.proc.pid))

    def loop_cpu_seconds(self) -> float:
        """User + system CPU time the server's main thread (its event loop) has used so far."""
        assert self.proc is not None
        return cpu_seconds(self.proc.pid, main_thread=True)


def cpu_seconds(pid: int, *, main_thread: bool = False) -> float:
    """User + system CPU time of process `pid` so far (Linux /proc), or of its main thread alone (the thread whose
    id is the process's: where an asyncio server runs its event loop)."""
    path = f"/proc/{pid}/task/{pid}/stat" if main_thread else f"/proc/{pid}/stat"
    try:
        with open(path) as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:  # a child that ended since it was listed
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The live child processes of `pid` (Linux /proc): a node's worker processes."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` holds the listening TCP socket on `port` (Linux: /proc/net/tcp and the process's fds)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[1].rsplit(":", 1)[1] == f"{port:04X}" and fields[3] == "0A":  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    try:
        return any(os.readlink(fd) in inodes for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False


def wait_healthy(proc: subprocess.Popen[bytes], url: str, timeout: float, what: str) -> None:
    """Wait until `proc` listens on `url`'s port and answers GET /healthz with 200; BenchFailure if it exits or
    does not. With tests running in parallel, the port free_port() saw can be bound by another server before
    `proc` binds it, and that server would answer /healthz: hence the check that the listener is `proc`'s."""
    port = urllib.parse.urlsplit(url).port
    assert port is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchFailure(f"{what} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1) as resp:
                if resp.status == 200 and listens(proc.pid, port):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise BenchFailure(f"{what} did not answer /healthz within {timeout}s")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT (a server's clean shutdown), then SIGKILL if it has not exited within 15 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
) -> LoadResult:
    """Send every lane's calls in order, all lanes concurrently (one lane = one keep-alive connection); time each.

    The load generator shares the machine's cores with the server it measures, so it is kept lean: each
    request is encoded to bytes before the clock starts, and responses are parsed only as far as the status
    line, Content-Length or chunked framing (see `_Connection`). Raises BenchFailure if any response status
    fails `expect`: a benchmark of failing requests measures nothing.
    """
    url = urllib.parse.urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    encoded = [[_encode(call, f"{host}:{port}") for call in calls] for calls in lanes]
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    failures: list[str] = []
    loop = asyncio.get_running_loop()

    async def lane(requests: list[tuple[str, bytes]]) -> None:
        _, conn = await loop.create_connection(_Connection, host, port)
        try:
            for label, request in requests:
                started = time.perf_counter()
                status, payload = await conn.exchange(request)
                latencies.append(time.perf_counter() - started)
                statuses[status] = statuses.get(status, 0) + 1
                if not expect(status):
                    failures.append(f"{label} -> {status}: {payload[:300]!r}")
        finally:
            conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(lane(requests) for requests in encoded))
    elapsed = time.perf_counter() - started
    if failures:
        raise BenchFailure(f"{len(failures)} requests failed; first: {failures[0]}")
    return LoadResult(count=len(latencies), elapsed=elapsed, latencies=latencies, statuses=statuses)


def _encode(call: Call, host: str) -> tuple[str, bytes]:
    """(label for error messages, the complete HTTP/1.1 request as bytes)."""
    head = [f"{call.method} {call.path} HTTP/1.1", f"Host: {host}"]
    head += [f"{name}: {value}" for name, value in call.headers.items()]
    if call.body is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(call.body)}"]
    return f"{call.method} {call.path}", ("\r\n".join(head) + "\r\n\r\n").encode() + (call.body or b"")


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection that sends a request and waits for its whole response."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._try_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(BenchFailure(f"server closed the connection: {exc or 'EOF'}"))

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        assert self.transport is not None and self.waiter is None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        try:
            return await self.waiter
        finally:
            self.waiter = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _try_complete(self) -> None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0 or self.waiter is None:
            return
        lines = bytes(self.buffer[:end]).split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
        start = end + 4
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            body = _dechunk(self.buffer, start)
            if body is None:
                return
            payload, consumed = body
        else:
            length = int(headers.get(b"content-length", b"0"))
            if len(self.buffer) < start + length:
                return
            payload, consumed = bytes(self.buffer[start : start + length]), start + length
        del self.buffer[:consumed]
        self.waiter.set_result((status, payload))


def _dechunk(buffer: bytearray, pos: int) -> tuple[bytes, int] | None:
    """(body, bytes consumed) of a complete chunked body starting at pos, or None if more must arrive."""
    parts: list[bytes] = []
    while True:
        eol = buffer.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buffer[pos:eol]).split(b";")[0], 16)
        if size == 0:
            trailer_end = buffer.find(b"\r\n", eol + 2)
            return (b"".join(parts), trailer_end + 2) if trailer_end >= 0 else None
        if len(buffer) < eol + 2 + size + 2:
            return None
        parts.append(bytes(buffer[eol + 2 : eol + 2 + size]))
        pos = eol + 2 + size + 2


def bearer(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}
