"""Replication side by side: two `pouchdb-server` instances (npm) vs two Agent BBS nodes, the same documents.

Theirs: server A is loaded with N documents through `_bulk_docs` (batches of 1,000); each document is one
of our signed entry records (the same records, so the same size) with `_id` = its hash. Server B then
pulls them with a one-shot `POST /_replicate` (source A over HTTP, target a local database B creates),
and the clock stops when B's `doc_count` reaches N. Both servers run with their default LevelDOWN storage.

Ours: the sync benchmark's catch-up (a fresh node pulls the same N records from a `bbs serve` subprocess over
the signed changes feed, verifying every signature), reused when `sync` ran in this invocation at the same
size, measured here otherwise.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp

from scenarios.bench import sync
from scenarios.bench.context import Context
from scenarios.bench.harness import free_port
from scenarios.bench.peer_install import PeerUnavailable, npm_peer, stop, wait_for_port
from scenarios.bench.report import Row, rate, ratio

BENCH = "peers"
BULK_BATCH = 1000
DB = "bench"


def start_pouchdb(modules: Path, folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`pouchdb-server` on a free loopback port storing its databases in `folder`; returns (process, url)."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with open(folder / "server.log", "wb") as log:
        proc = subprocess.Popen(
            [
                "node",
                str(modules / ".bin" / "pouchdb-server"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--dir",
                str(folder),
                "--config",
                str(folder / "config.json"),
                "--no-stdout-logs",
            ],
            cwd=folder,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    wait_for_port(port, proc)
    return proc, f"http://127.0.0.1:{port}"


async def _json(resp: aiohttp.ClientResponse, what: str) -> Any:
    body = await resp.read()
    if resp.status >= 300:
        raise PeerUnavailable(f"pouchdb-server {what} answered {resp.status}: {body[:200]!r}")
    return json.loads(body)


async def load_and_replicate(a: str, b: str, docs: list[bytes]) -> tuple[float, float, dict[str, Any]]:
    """Load `docs` into A, then B pulls them; returns (load seconds, replication seconds, B's database info)."""
    n = len(docs)
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.put(f"{a}/{DB}") as resp:
            await _json(resp, f"PUT /{DB}")
        started = time.perf_counter()
        for i in range(0, n, BULK_BATCH):
            body = b'{"docs":[' + b",".join(docs[i : i + BULK_BATCH]) + b"]}"
            async with session.post(
                f"{a}/{DB}/_bulk_docs", data=body, headers={"Content-Type": "application/json"}
            ) as resp:
                results = await _json(resp, "_bulk_docs")
            failed = [r for r in results if not r.get("ok")]
            if failed:
                raise PeerUnavailable(f"pouchdb-server _bulk_docs refused {len(failed)} documents: {failed[0]}")
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        request = {"source": f"{a}/{DB}", "target": DB, "create_target": True}
        async with session.post(f"{b}/_replicate", json=request) as resp:
            outcome = await _json(resp, "_replicate")
        if not outcome.get("ok"):
            raise PeerUnavailable(f"pouchdb-server _replicate did not complete: {str(outcome)[:200]}")
        while True:
            async with session.get(f"{b}/{DB}") as resp:
                info = await _json(resp, f"GET /{DB}")
            if info["doc_count"] >= n:
                break
            await asyncio.sleep(0.05)
        return load_s, time.perf_counter() - started, info


def run(ctx: Context) -> None:
    """Two pouchdb-server instances replicating N documents vs two nodes syncing N entries, same run."""
    cached = ctx.cache.get("sync_catch_up")
    n = cached["records"] if cached else ctx.sizes.peer_docs
    modules, version = npm_peer("pouchdb-server", "pouchdb-server")
    records = sync.records_for(n)
    docs = [json.dumps({"_id": h, **record}, separators=(",", ":")).encode() for record, h in records]
    work = ctx.workdir / "pouchdb"
    a_proc, a_url = start_pouchdb(modules, work / "a")
    try:
        b_proc, b_url = start_pouchdb(modules, work / "b")
        try:
            load_s, repl_s, info = asyncio.run(load_and_replicate(a_url, b_url, docs))
        finally:
            stop(b_proc)
    finally:
        stop(a_proc)
    ours = cached or sync.two_node_catch_up(ctx, records, "peers-sync")
    our_rate, their_rate = ours["records"] / ours["seconds"], n / repl_s
    avg_doc = sum(len(d) for d in docs) / n
    ctx.report.add(
        Row(
            BENCH,
            f"replication of {n:,} records: our node-to-node catch-up records/s vs pouchdb-server docs/s",
            rate(our_rate),
            rate(their_rate),
            ratio(our_rate, their_rate),
            "",
            None,
            f"pouchdb-server {version} (npm; Node {_node_version()}, LevelDOWN): A loaded by _bulk_docs"
            f" ({BULK_BATCH} per request, {n / load_s:,.0f} docs/s), then B pulled by one-shot POST /_replicate"
            f" until its doc_count reached {info['doc_count']:,}; documents are our signed entry records"
            f" ({avg_doc:,.0f} B of JSON each) keyed by hash. Ours: a fresh node pulls the same records from a"
            f" `bbs serve` subprocess over the signed changes feed, verifying each signature"
            f" ({ours['wire_bytes'] / ours['records']:,.0f} B on the wire per record)"
            + ("; the sync benchmark's catch-up in this run" if cached else "; measured here"),
        )
    )


def _node_version() -> str:
    proc = subprocess.run(["node", "--version"], capture_output=True, text=True)
    return proc.stdout.strip().lstrip("v") or "unknown"
