"""Federation benchmarks: catch-up against local ingest, reconciliation cost by difference, idle cost.

- Catch-up: a fresh node pulls N entries from a real `bbs serve` over the signed changes feed (verify,
  store, cursor: the production puller); the baseline is the same node code ingesting the same records
  from a local JSON-lines file (verify, store), in the same run.
- Reconciliation: a store missing d of the N records reconciles with the served node (negentropy over HTTP)
  and fetches them: round trips and bytes both ways, for d = 1, 10, 1000.
- Idle: one long-poll of a caught-up peer: requests per interval and bytes.
"""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp

from identity import canonical, key_files, keys
from node.federation import store as sync_store
from node.ops.datadir import DataDir
from node.service import Node
from node.store import db
from scenarios.bench import corpus, index_lag
from scenarios.bench.context import Context
from scenarios.bench.harness import Server
from scenarios.bench.report import Row, rate
from sync.client import Traffic
from sync.memory import MemoryStore
from sync.messages import MAX_CHANGES_LIMIT
from sync.puller import Puller
from sync.store import PeerConfig, Verified
from sync.verify import verify_record

BENCH = "sync"
FILE_BATCH = 500
PAGE = MAX_CHANGES_LIMIT  # records per changes page the node's puller asks for (the protocol's most)


def _records(n: int) -> list[tuple[dict[str, Any], str]]:
    signers = [keys.SigningKey.generate() for _ in range(8)]
    return list(corpus.signed_entries(signers, n, seed=11))


async def _ingest_file(data: Path, path: Path) -> float:
    """Baseline: verify and store records read from a local file, batch by batch; returns seconds."""
    node = Node(data)
    node.open()
    store = node.sync
    try:
        start = time.perf_counter()
        batch: list[Verified] = []
        with path.open("rb") as f:
            for line in f:
                result = verify_record(line.rstrip(b"\n"), None)
                assert isinstance(result, Verified), result
                batch.append(result)
                if len(batch) >= FILE_BATCH:
                    await store.ingest("file", batch, [], None)
                    batch = []
        if batch:
            await store.ingest("file", batch, [], None)
        return time.perf_counter() - start
    finally:
        node.close()


async def _catch_up(data: Path, source: PeerConfig, n: int, space: str | None) -> tuple[float, Traffic, Traffic]:
    """Pull everything from `source` into a fresh node (at least `n` records of `space`, None: public); returns
    (seconds, catch-up traffic, one idle poll)."""
    node = Node(data)
    node.open()
    try:
        async with aiohttp.ClientSession() as session:
            puller = Puller(node.sync, node.key, session)
            start = time.perf_counter()
            while (await puller.catch_up(source)).more:  # the scheduler's loop: `more` only after a reset
                pass
            took = time.perf_counter() - start
            count = (await node.sync.digest(space=space)).count
            assert count >= n, f"caught up {count} of {n}"
            idle = Puller(node.sync, node.key, session)
            await idle.pull_once(source, wait_ms=500)
            return took, puller.traffic, idle.traffic
    finally:
        node.close()


async def _reconcile(
    records: list[tuple[dict[str, Any], str]], missing: int, source: PeerConfig, key: keys.SigningKey
) -> tuple[int, int, int]:
    store = MemoryStore(node_id=key.did)
    dropped = set(random.Random(missing).sample(range(len(records)), missing))
    for i, (record, record_hash) in enumerate(records):
        if i not in dropped:
            body = canonical.canonical_bytes(record)
            store.add(Verified(record_hash, body, record, None))
    async with aiohttp.ClientSession() as session:
        report = await Puller(store, key, session).reconcile(source)
    assert report.need == missing, (report.need, missing)
    return report.rounds, report.bytes_sent, report.bytes_received


def records_for(n: int) -> list[tuple[dict[str, Any], str]]:
    """The N signed entry records the sync benchmarks move (8 authors, about 800 bytes each as canonical JSON)."""
    return _records(n)


def fresh_node(ctx: Context, name: str) -> tuple[Path, str]:
    """An empty data folder that will pull, and its node id."""
    fresh, _ = corpus.fresh_data_dir(ctx.workdir, name)
    return fresh, key_files.load_key(DataDir(fresh).key_path).did


@contextmanager
def served_source(
    ctx: Context,
    records: list[tuple[dict[str, Any], str]],
    name: str,
    pullers: list[str],
    store_url: str | None = None,
) -> Iterator[PeerConfig]:
    """A data folder holding `records`, served by a `bbs serve` subprocess that accepts `pullers`' node ids; its
    database in `store_url` (an empty PostgreSQL database) when given."""
    source, token = corpus.fresh_data_dir(ctx.workdir, name, store_url)
    corpus.bulk_load(source, iter(records))
    with served_folder(source, token, pullers) as peer:
        yield peer


@contextmanager
def served_folder(source: Path, token: str, pullers: list[str]) -> Iterator[PeerConfig]:
    """A data folder (`token`: its admin token) served by a `bbs serve` subprocess that accepts `pullers`' node ids,
    once its search index caught up with what was loaded."""
    source_id = key_files.load_key(DataDir(source).key_path).did
    now = int(time.time() * 1000)

    def allow_pullers(conn: sqlite3.Connection) -> None:
        for peer_id in pullers:
            sync_store.add_peer_txn(conn, "http://127.0.0.1:9", peer_id, now)

    db.write_sync(DataDir(source).store, allow_pullers)
    with Server(source, extra_env={"BBS_SYNC": "off"}) as server:
        # bulk_load bypasses the search index: the node indexes those records once started. A puller measured
        # meanwhile would share the cores with that (pouchdb-server's source is loaded before it replicates too).
        index_lag.Sampler(server.url, token).settle(timeout=300.0)
        yield PeerConfig(source_id, server.url)


def catch_up(fresh: Path, source: PeerConfig, n: int, space: str | None = None) -> tuple[float, Traffic, Traffic]:
    """The fresh node adds `source` as a peer and pulls all n records (of `space`; None: the public federation):
    (seconds, traffic, one idle poll)."""
    now = int(time.time() * 1000)
    db.write_sync(DataDir(fresh).store, lambda c: sync_store.add_peer_txn(c, source.url, source.node_id, now))
    return asyncio.run(_catch_up(fresh, source, n, space))


def run(ctx: Context) -> None:
    """Catch-up ratio, reconciliation cost and idle cost, as rows of the report."""
    n = int(os.environ.get("BBS_BENCH_SYNC_RECORDS", "200" if ctx.quick else "100000"))
    diffs = (1, 5, 20) if ctx.quick else (1, 10, 1000)
    records = _records(n)
    jsonl = ctx.workdir / "sync-records.jsonl"
    with jsonl.open("wb") as f:
        for record, _ in records:
            f.write(canonical.canonical_bytes(record) + b"\n")
    local, _ = corpus.fresh_data_dir(ctx.workdir, "sync-local")
    local_s = asyncio.run(_ingest_file(local, jsonl))

    fresh, fresh_id = fresh_node(ctx, "sync-fresh")
    reconciler = keys.SigningKey.generate()
    with served_source(ctx, records, "sync-source", [fresh_id, reconciler.did]) as peer:
        pull_s, traffic, idle = catch_up(fresh, peer, n)
        recon = [(d, *asyncio.run(_reconcile(records, d, peer, reconciler))) for d in diffs]
    file_rate, pull_rate = n / local_s, n / pull_s
    ratio = pull_rate / file_rate
    wire = traffic.bytes_received / n
    ctx.report.add(
        Row(
            BENCH,
            f"catch-up of {n:,} entries: records/s vs local-file ingest",
            rate(pull_rate),
            rate(file_rate),
            ratio,
            ">= 0.5",
            ratio >= 0.5,
            "fresh node pulls from a `bbs serve` subprocess (signed requests, pages of 1000, verify + store +"
            " cursor per page); baseline: the same verify + store from a JSON-lines file, same run",
        )
    )
    ctx.report.add(
        Row(
            BENCH,
            "catch-up: bytes on the wire per record",
            f"{wire:,.0f} B",
            method=f"{traffic.requests} requests, response bodies only (records are sent as canonical JSON)",
        )
    )
    for d, rounds, sent, received in recon:
        total = sent + received
        ctx.report.add(
            Row(
                BENCH,
                f"reconcile {n:,} vs {n - d:,} records (differ by {d})",
                f"{rounds} round trips, {total:,} B",
                target="grows with the difference; <= 8 KiB for 1" if d == 1 else "grows with the difference",
                met=(total <= 8 * 1024) if d == 1 else None,
                method="negentropy over HTTP, then fetch by hash; bytes = request + response bodies",
            )
        )
    ctx.report.add(
        Row(
            BENCH,
            "idle peer in sync: cost per poll interval",
            f"{idle.requests} request, {idle.bytes_received + idle.bytes_sent} B",
            target="one small request",
            met=idle.requests == 1,
            method="one long-poll of the changes feed by a caught-up peer (wait_ms; 20 s in production)",
        )
    )
