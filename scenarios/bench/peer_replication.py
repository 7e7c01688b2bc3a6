"""Replication side by side: two `pouchdb-server` instances (npm) vs two Agent BBS nodes, the same documents.

Theirs: server A is loaded with N documents through `_bulk_docs` (batches of 1,000); each document is one
of our signed entry records (the same records, so the same size) with `_id` = its hash. A fresh server B then
pulls them with a one-shot `POST /_replicate` (source A over HTTP, target a local database B creates),
and the clock stops when B's `doc_count` reaches N. Both servers run with their default LevelDOWN storage.

Ours: a fresh node pulls the same N records from a `bbs serve` subprocess over the signed changes feed
(the scheduler's `Puller.catch_up`: verify every signature, store, cursor per page).

The two alternate, `replication_rounds` times each (ours, theirs, ours, theirs, ...), each round on a fresh
target, and the row compares the medians: one run of either moves by half on a shared machine. The floor beside
it: the node's Ed25519 check of the same records (on as many threads as the puller would use without its worker
processes) and a bare SQLite insert of the same rows, measured in the same run.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp

from identity import keys
from identity import records as identity_records
from node.store import db
from scenarios.bench import raw, sync
from scenarios.bench.context import Context
from scenarios.bench.harness import free_port
from scenarios.bench.peer_install import PeerUnavailable, npm_peer, stop, wait_for_port
from scenarios.bench.report import Row, rate, ratio
from sync.puller import VERIFY_THREADS
from sync.workers import PROCESSES

BENCH = "peers"
BULK_BATCH = 1000
TARGET = 2.0  # issue 24: at least twice pouchdb-server's replication rate
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


async def load(a: str, docs: list[bytes]) -> float:
    """Load `docs` into A's database; returns seconds."""
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.put(f"{a}/{DB}") as resp:
            await _json(resp, f"PUT /{DB}")
        started = time.perf_counter()
        for i in range(0, len(docs), BULK_BATCH):
            body = b'{"docs":[' + b",".join(docs[i : i + BULK_BATCH]) + b"]}"
            async with session.post(
                f"{a}/{DB}/_bulk_docs", data=body, headers={"Content-Type": "application/json"}
            ) as resp:
                results = await _json(resp, "_bulk_docs")
            failed = [r for r in results if not r.get("ok")]
            if failed:
                raise PeerUnavailable(f"pouchdb-server _bulk_docs refused {len(failed)} documents: {failed[0]}")
        return time.perf_counter() - started


async def replicate(a: str, b: str, n: int) -> float:
    """B pulls A's database into a new one of its own; returns seconds until B holds all `n` documents."""
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
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
                return time.perf_counter() - started
            await asyncio.sleep(0.05)


def run(ctx: Context) -> None:
    """Two pouchdb-server instances replicating N documents vs two nodes syncing N entries, alternating, medians."""
    n, rounds = ctx.sizes.peer_docs, ctx.sizes.replication_rounds
    modules, version = npm_peer("pouchdb-server", "pouchdb-server")
    records = sync.records_for(n)
    docs = [json.dumps({"_id": h, **record}, separators=(",", ":")).encode() for record, h in records]
    work = ctx.workdir / "pouchdb"
    ours: list[float] = []
    theirs: list[float] = []
    a_proc, a_url = start_pouchdb(modules, work / "a")
    try:
        load_s = asyncio.run(load(a_url, docs))
        fresh_ids = []
        for i in range(rounds):
            fresh_ids.append(sync.fresh_node(ctx, f"replication-fresh-{i}"))
        with sync.served_source(ctx, records, "replication-source", [fid for _, fid in fresh_ids]) as peer:
            for i, (fresh, _) in enumerate(fresh_ids):
                seconds, traffic, _ = sync.catch_up(fresh, peer, n)
                ours.append(n / seconds)
                b_proc, b_url = start_pouchdb(modules, work / f"b{i}")
                try:
                    theirs.append(n / asyncio.run(replicate(a_url, b_url, n)))
                finally:
                    stop(b_proc)
                print(f"  round {i + 1}: ours {ours[-1]:,.0f}/s, pouchdb-server {theirs[-1]:,.0f}/s", flush=True)
    finally:
        stop(a_proc)
    our_rate, their_rate = statistics.median(ours), statistics.median(theirs)
    avg_doc = sum(len(d) for d in docs) / n
    met = our_rate >= TARGET * their_rate
    ctx.report.add(
        Row(
            BENCH,
            f"replication of {n:,} records: our node-to-node catch-up records/s vs pouchdb-server docs/s"
            f" (median of {rounds} alternating runs)",
            rate(our_rate),
            rate(their_rate),
            ratio(our_rate, their_rate),
            f">= {TARGET:g}",
            met,
            f"pouchdb-server {version} (npm; Node {_node_version()}, LevelDOWN): A loaded once by _bulk_docs"
            f" ({BULK_BATCH} per request, {n / load_s:,.0f} docs/s), then a fresh B per run pulled by one-shot"
            f" POST /_replicate until its doc_count reached {n:,}; documents are our signed entry records"
            f" ({avg_doc:,.0f} B of JSON each) keyed by hash. Ours: a fresh node per run pulls the same records"
            f" from one `bbs serve` subprocess over the signed changes feed (Puller.catch_up, pages of"
            f" {sync.PAGE}), verifying each signature ({traffic.bytes_received / n:,.0f} B on the wire per record)."
            f" Runs alternate, ours first: ours {_rates(ours)}; theirs {_rates(theirs)}",
        )
    )
    _floor(ctx, records, our_rate, their_rate)


def _rates(values: list[float]) -> str:
    return ", ".join(f"{v:,.0f}/s" for v in values)


def _floor(ctx: Context, records: list[tuple[dict[str, Any], str]], our_rate: float, their_rate: float) -> None:
    """What the machine allows for the same records: verifying them as the puller does, storing the same rows
    bare; pages of the puller's size."""
    n = len(records)
    verify_rate = _verify_rate(records)
    insert_rate = _insert_rate(ctx, records)
    serial = 1 / (1 / verify_rate + 1 / insert_rate)
    ctx.report.add(
        Row(
            BENCH,
            "replication floor: Ed25519 check + bare SQLite insert of the same records, records/s",
            rate(our_rate),
            rate(serial),
            ratio(our_rate, serial),
            "",
            None,
            f"verify {verify_rate:,.0f}/s (identity.keys.verify of each record's signed bytes on"
            f" {VERIFY_THREADS} thread(s); the puller verifies a page in {PROCESSES} worker process(es)),"
            f" SQLite {insert_rate:,.0f}/s (the node's"
            f" schema and pragmas, its records, entries and entry_tags rows of the same {n:,} records, one"
            f" transaction of multi-row inserts per page of {sync.PAGE}); baseline = both one after the other"
            f" ({serial / their_rate:.2f}x pouchdb-server's median), {min(verify_rate, insert_rate) / their_rate:.2f}x"
            " if they overlapped perfectly",
        )
    )


def _verify_rate(records: list[tuple[dict[str, Any], str]]) -> float:
    items = [(r["author_id"], identity_records.signing_bytes(r), r["signature"]) for r, _ in records]
    chunks = [items[i::VERIFY_THREADS] for i in range(VERIFY_THREADS)]

    def work(chunk: list[tuple[str, bytes, str]]) -> None:
        for author, data, signature in chunk:
            if not keys.verify(author, data, signature):
                raise RuntimeError("a record of the benchmark does not verify")

    started = time.perf_counter()
    with ThreadPoolExecutor(VERIFY_THREADS) as pool:
        list(pool.map(work, chunks))
    return len(items) / (time.perf_counter() - started)


def _insert_rate(ctx: Context, records: list[tuple[dict[str, Any], str]]) -> float:
    rows = raw.sqlite_rows(records)
    path = ctx.workdir / "replication-floor.db"
    raw.remove_database(path)
    conn = db.connect(path)
    try:
        db.migrate(conn)
        started = time.perf_counter()
        seq = 0
        for i in range(0, len(rows), sync.PAGE):
            page = rows[i : i + sync.PAGE]
            conn.execute("BEGIN IMMEDIATE")
            db.insert_rows(
                conn,
                "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, scope, origin,"
                " received_ms, body)",
                [log_row for log_row, _, _ in page],
            )
            db.insert_rows(
                conn,
                "INSERT INTO entries (id, record_hash, content_fingerprint, author_id, created_at, created_ms,"
                " entry_type, performative, content, confidence, tags, directed_to, metadata, truth_state,"
                " authority, scope, signature)",
                [(seq + j + 1, *entry_row) for j, (_, entry_row, _) in enumerate(page)],
            )
            db.insert_rows(
                conn,
                "INSERT INTO entry_tags (entry_id, tag)",
                [(seq + j + 1, t) for j, (_, _, tags) in enumerate(page) for t in tags],
            )
            conn.execute("COMMIT")
            seq += len(page)
        return len(rows) / (time.perf_counter() - started)
    finally:
        conn.close()


def _node_version() -> str:
    proc = subprocess.run(["node", "--version"], capture_output=True, text=True)
    return proc.stdout.strip().lstrip("v") or "unknown"
