"""Helpers for federation scenarios: real `bbs serve` processes on loopback, and a TCP link that can be cut."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from node.ops.datadir import DataDir
from node.store import db
from scenarios import pg_cluster

SCENARIO_ENV = {"BBS_SYNC_WAIT_MS": "15000", "BBS_RECONCILE_EVERY_S": "5"}


class ScenarioFailed(AssertionError):
    """A scenario's expectation did not hold."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the one helper every scenario and test starting a server uses)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bbs(*args: str) -> str:
    """Run a `bbs` command; return its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "node.cli", *args], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        said = f"{done.stderr.strip()} {done.stdout.strip()[-1000:]}".strip()
        raise ScenarioFailed(f"bbs {' '.join(args)} failed ({done.returncode}): {said}")
    return done.stdout


@dataclass
class ServedNode:
    """One `bbs serve` process with its own data folder."""

    name: str
    data: Path
    port: int = field(default_factory=free_port)
    token: str = ""
    node_id: str = ""
    proc: subprocess.Popen[bytes] | None = None
    log: Any = None
    env: dict[str, str] = field(default_factory=lambda: dict(SCENARIO_ENV))
    mcp_port: int | None = None  # also serve MCP over streamable HTTP here (`bbs serve --mcp-port`, path /mcp)
    store: str = ""  # a PostgreSQL URL: the node's database is there (`bbs init/serve --store`); "": data/bbs.db
    start_timeout: float = 30.0  # seconds `start` waits for GET /v1/node to answer

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def store_args(self) -> list[str]:
        """`--store URL` when the node's database is PostgreSQL's, else nothing."""
        return ["--store", self.store] if self.store else []

    def init(self) -> None:
        out = bbs("init", "--data", str(self.data), *self.store_args)
        match = re.search(r"Admin token \(shown once, keep it safe\): (\S+)", out)
        if not match:
            raise ScenarioFailed(f"no admin token from bbs init: {out!r}")
        self.token = match.group(1)

    async def start(self, session: aiohttp.ClientSession) -> None:
        self.log = open(self.data.parent / f"{self.name}.log", "ab")  # noqa: SIM115 (kept open while it runs)
        env = {**os.environ, **self.env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "node.cli", "serve", "--data", str(self.data), "--port", str(self.port)]
            + self.store_args
            + ([] if self.mcp_port is None else ["--mcp-port", str(self.mcp_port)]),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.proc.poll() is not None:
                raise ScenarioFailed(f"{self.name} exited with {self.proc.returncode}; see {self.log.name}")
            try:
                async with session.get(self.url + "/v1/node") as resp:
                    if resp.status == 200:
                        self.node_id = (await resp.json())["node_id"]
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise ScenarioFailed(f"{self.name} did not start")
            await asyncio.sleep(0.1)

    def read(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one read-only statement (sqlite3's placeholders) on the node's database, whichever its engine:
        its bbs.db, or the PostgreSQL database its folder names (`DataDir.store`); running or stopped."""
        conn = db.connect_store(DataDir(self.data).store, readonly=True)
        try:
            return [tuple(row) for row in conn.execute(sql, tuple(parameters)).fetchall()]
        finally:
            conn.close()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)
        self.proc = None

    async def call(
        self, session: aiohttp.ClientSession, method: str, path: str, body: Any = None, headers: Any = None
    ) -> Any:
        async with session.request(method, self.url + path, json=body, headers=headers or self.admin) as resp:
            data = await resp.json(content_type=None)
            if resp.status >= 300:
                raise ScenarioFailed(f"{self.name} {method} {path}: {resp.status} {data}")
            return data

    async def attempt(
        self,
        session: aiohttp.ClientSession,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> tuple[int, str]:
        """(status, text) of one request as the node's admin unless `headers`; (0, "") when no answer came (the node
        is down or cut off), for a drill that observes rather than fails."""
        try:
            async with session.request(
                method,
                self.url + path,
                json=body,
                headers=headers or self.admin,
                params=params or {},
                timeout=timeout or aiohttp.ClientTimeout(total=30),
            ) as resp:
                return resp.status, await resp.text()
        except (aiohttp.ClientError, TimeoutError):
            return 0, ""

    async def peer(self, session: aiohttp.ClientSession, other: ServedNode, via: str | None = None) -> None:
        await self.call(session, "POST", "/v1/peers", {"url": via or other.url, "node_id": other.node_id})

    async def agent(self, session: aiohttp.ClientSession, name: str) -> dict[str, str]:
        created = await self.call(session, "POST", "/v1/agents", {"name": name})
        return {"Authorization": f"Bearer {created['api_key']}", "X-Agent": created["agent_id"]}

    async def post(self, session: aiohttp.ClientSession, agent: dict[str, str], content: str, **fields: Any) -> str:
        body = {"entry_type": "finding", "performative": "inform", "content": content, **fields}
        entry = await self.call(session, "POST", "/v1/entries", body, headers=agent)
        return str(entry["record_hash"])

    async def digest(self, session: aiohttp.ClientSession) -> tuple[int, str]:
        d = await self.call(session, "GET", "/v1/sync/digest")
        return int(d["count"]), str(d["sha256"])

    async def has(self, session: aiohttp.ClientSession, record_hash: str) -> bool:
        async with session.get(self.url + f"/v1/entries/{record_hash}", headers=self.admin) as resp:
            return resp.status == 200


async def wait_until(check: Any, timeout: float, what: str) -> float:
    """Poll `check()` until true; return the seconds it took. Fails the scenario after `timeout`."""
    start = time.monotonic()
    while not await check():
        if time.monotonic() - start > timeout:
            raise ScenarioFailed(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def converged(session: aiohttp.ClientSession, nodes: list[ServedNode]) -> bool:
    try:
        digests = {await n.digest(session) for n in nodes}
    except (aiohttp.ClientError, ScenarioFailed):
        return False
    return len(digests) == 1


@contextlib.contextmanager
def postgresql_databases() -> Iterator[Callable[[], str]]:
    """A throwaway PostgreSQL cluster (scenarios/pg_cluster.py) for a scenario's `--postgresql` form: yields a maker
    of new empty databases, each a URL for `ServedNode(store=...)`; the cluster is stopped and removed after."""
    bindir = pg_cluster.find_bindir()
    if bindir is None:
        raise ScenarioFailed(
            "--postgresql: PostgreSQL's server programs are not installed (apt-get install postgresql)"
        )
    cluster = pg_cluster.start(bindir)
    try:
        yield lambda: cluster.store_url(cluster.create_database())
    finally:
        cluster.stop()


class Link:
    """A TCP relay from a local port to a node; `cut()` drops every connection and refuses new ones.

    `tap`, when given, sees every chunk sent towards the node, with a number naming its connection.
    """

    def __init__(self, target_port: int, tap: Callable[[int, bytes], None] | None = None) -> None:
        self.target_port = target_port
        self.tap = tap
        self.port = free_port()
        self.up = True
        self._conns: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    def cut(self) -> None:
        self.up = False
        for w in list(self._conns):
            w.close()

    def restore(self) -> None:
        self.up = True

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The connection to the node for one accepted connection (OSError when it refuses)."""
        return await asyncio.open_connection("127.0.0.1", self.target_port)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.up:
            writer.close()
            return
        try:
            up_reader, up_writer = await self.connect()
        except OSError:
            writer.close()
            return
        self._conns.update({writer, up_writer})

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, tap: Any = None) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await src.read(65536):
                    if tap is not None:
                        tap(id(writer), data)
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer, self.tap), pipe(up_reader, writer))
        self._conns.difference_update({writer, up_writer})


class Balancer(Link):
    """A TCP load balancer in front of several processes of one node: each accepted connection goes to the next
    port in turn, or to the one after when that refuses (a killed process); every request on a kept-alive
    connection reaches the same process, as behind a layer-4 proxy."""

    def __init__(self, target_ports: Sequence[int]) -> None:
        super().__init__(target_ports[0])
        self.targets = list(target_ports)
        self._turn = 0
        self.connections: Counter[int] = Counter()  # target port -> connections handed to it

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        failure: OSError = ConnectionRefusedError("no process of the node answers")
        for _ in self.targets:
            port = self.targets[self._turn % len(self.targets)]
            self._turn += 1
            try:
                opened = await asyncio.open_connection("127.0.0.1", port)
            except OSError as exc:
                failure = exc
                continue
            self.connections[port] += 1
            return opened
        raise failure


class Capture:
    """Taps relays (`Link(port, tap=capture.tap((src, dst)))`) and keeps the first complete request sent over one
    chosen link whose request line holds `wanted` (a path, or a path and the start of its query)."""

    def __init__(self, wanted: str) -> None:
        self.wanted = wanted
        self.want: tuple[str, str] | None = None
        self.raw: bytes | None = None
        self.at = 0.0
        self._buffers: dict[int, bytearray] = {}

    def arm(self, link: tuple[str, str] | None) -> None:
        """Capture on `link` from now on (None: stop); connection numbers may be reused, so start afresh."""
        self.want = link
        self._buffers.clear()

    def tap(self, link: tuple[str, str]) -> Callable[[int, bytes], None]:
        """The tap of the relay for `link`: requests are read one after another on each kept-alive connection."""

        def feed(conn: int, data: bytes) -> None:
            if self.want != link or self.raw is not None:
                return
            buf = self._buffers.setdefault(conn, bytearray())
            buf += data
            while (end := buf.find(b"\r\n\r\n")) >= 0:
                head = bytes(buf[:end]).decode("latin-1")
                length = re.search(r"(?im)^content-length:\s*(\d+)", head)
                total = end + 4 + (int(length.group(1)) if length else 0)
                if len(buf) < total:
                    return
                if self.wanted in head.split("\r\n", 1)[0]:
                    self.raw, self.at = bytes(buf[:total]), time.monotonic()
                    return
                del buf[:total]

        return feed


async def send_raw(port: int, raw: bytes, timeout: float = 15.0) -> tuple[int, bytes]:
    """Send captured request bytes to 127.0.0.1:`port` as they are; (status, body) of the answer ((0, b"") when
    none came)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(raw)
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
            length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            body = await asyncio.wait_for(reader.readexactly(int(length.group(1))), timeout) if length else b""
            return int(head.split(b" ", 2)[1]), body
        finally:
            writer.close()
    except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError):
        return 0, b""


def run_scenario(name: str, run: Callable[[Path], Coroutine[Any, Any, None]]) -> int:
    """Run one federation scenario in a scratch folder; on failure print the reason and each node's log tail."""
    with tempfile.TemporaryDirectory(prefix=f"bbs-{name}-") as tmp:
        try:
            asyncio.run(run(Path(tmp)))
        except ScenarioFailed as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            for log in sorted(Path(tmp).glob("*.log")):
                print(f"--- {log.name} (tail)", file=sys.stderr)
                print("\n".join(log.read_text(errors="replace").splitlines()[-20:]), file=sys.stderr)
            return 1
    print(f"{name} scenario: OK")
    return 0
