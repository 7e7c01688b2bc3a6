"""One node served by two `bbs serve` processes on one PostgreSQL database against the same node served by one, in
the same run (issue 41): node-signed single posts and batches of MAX_BATCH by concurrent clients, spread over the
processes (the two-process run's second folder made by `bbs init --join`'s code, node.ops.datadir.join).

Reported per path: entries/s and latency with two processes against one; CPU per entry of each process (user +
system from /proc/<pid>/stat, around the load) against the one process's; and the share of the run's wall time the
node's writer lock (the transaction-level advisory lock every write transaction takes after BEGIN,
node.store.db.WRITER_LOCK) was held and waited for, sampled from pg_locks every SAMPLE_S by the benchmark, beside
each process's `bbs_writer_busy_seconds_total` over the run (which counts its wait for the lock too: it starts at
BEGIN). The cluster is durable (fsync on: postgresql.BENCH_SETTINGS). Two processes share the machine's cores with
PostgreSQL and the load generator: on 2 cores no linear scaling is expected, and the figures say where the time goes.

Sizes: BBS_BENCH_MP_POSTS (single posts per run, default 3,000, quick 240; the batch runs post three times as many),
--clients (single posts' concurrent clients, default 64, quick 8; batches: as many clients as send
BATCHES_PER_CLIENT batches of MAX_BATCH each, at least 2).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from node.ops.datadir import join
from node.store.db import WRITER_LOCK
from scenarios import pg_cluster
from scenarios.bench import corpus, ingest
from scenarios.bench.context import Context
from scenarios.bench.harness import BenchFailure, Call, LoadResult, Server, run_load
from scenarios.bench.postgresql import durable_cluster
from scenarios.bench.report import Row, ms, percentile, rate, ratio
from wire.api import MAX_BATCH

BENCH = "processes"
SAMPLE_S = 0.005  # pg_locks sampling period
# pg_locks shows a bigint advisory key as classid (high 32 bits) and objid (low 32 bits), objsubid 1
LOCK_QUERY = (
    "SELECT coalesce(bool_or(granted), false), coalesce(bool_or(NOT granted), false) FROM pg_locks"
    " WHERE locktype = 'advisory' AND classid = %s AND objid = %s AND objsubid = 1"
)


@dataclasses.dataclass
class ProcessRun:
    """One process's part of a run: the entries it took, its CPU seconds and its writer's counters' growth."""

    entries: int
    cpu: float
    writer: dict[str, float]

    @property
    def cpu_per_entry(self) -> float:
        return self.cpu / max(self.entries, 1)


@dataclasses.dataclass
class Run:
    """A load through one or two processes of a node."""

    result: LoadResult
    processes: list[ProcessRun]
    held: float  # share of the wall time the writer lock was held (pg_locks samples)
    waited: float  # share of the wall time some transaction waited for it

    @property
    def entries(self) -> int:
        return sum(p.entries for p in self.processes)

    @property
    def per_second(self) -> float:
        return self.entries / self.result.elapsed

    @property
    def held_per_entry(self) -> float:
        """Seconds the writer lock was held per entry stored."""
        return self.held * self.result.elapsed / max(self.entries, 1)

    def busy_share(self, i: int) -> float:
        return self.processes[i].writer.get("busy_seconds", 0.0) / self.result.elapsed


class LockSampler:
    """Samples pg_locks for the writer lock on its own connection in a thread: the share of samples it was held and
    the share some transaction waited for it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples = self.held = self.waited = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-locks-sampler", daemon=True)

    def _run(self) -> None:
        key = (WRITER_LOCK >> 32, WRITER_LOCK & 0xFFFF_FFFF)
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.is_set():
                row = conn.execute(LOCK_QUERY, key).fetchone()
                assert row is not None
                self.samples += 1
                self.held += bool(row[0])
                self.waited += bool(row[1])
                time.sleep(SAMPLE_S)

    @contextmanager
    def running(self) -> Iterator[LockSampler]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()

    def shares(self) -> tuple[float, float]:
        n = max(self.samples, 1)
        return self.held / n, self.waited / n


def posts_of(ctx: Context) -> int:
    return int(os.environ.get("BBS_BENCH_MP_POSTS", "240" if ctx.quick else "3000"))


BATCHES_PER_CLIENT = 5  # a batch run's clients each send this many batches: a run of one wave of requests is noise


def clients_for(ctx: Context, batched: bool, posts: int) -> int:
    """Concurrent clients: --clients for single posts; for batches, as many as send BATCHES_PER_CLIENT full batches
    each (at least 2: one per process)."""
    if batched:
        return max(2, min(ctx.sizes.clients, posts // (MAX_BATCH * BATCHES_PER_CLIENT)))
    return min(ctx.sizes.clients, posts)


def run_through(
    ctx: Context, cluster: pg_cluster.Cluster, label: str, processes: int, batched: bool, posts: int
) -> Run:
    """`posts` node-signed entries by concurrent clients into a fresh node on PostgreSQL served by `processes`
    `bbs serve` processes, the clients' lanes dealt over the processes in turn."""
    name = cluster.create_database()
    first, admin_token = corpus.fresh_data_dir(ctx.workdir, f"mp-bench-{label}-{processes}-1", cluster.store_url(name))
    folders = [first]
    for n in range(2, processes + 1):
        folder = ctx.workdir / f"mp-bench-{label}-{processes}-{n}"
        join(folder, first)
        folders.append(folder)
    clients = clients_for(ctx, batched, posts)
    per_lane = max(1, posts // clients)
    agents = corpus.register_agents(first, clients, keep_key=True, prefix="writer")
    lanes = ingest.node_signed_lanes([k for _, k in agents], per_lane, offset=2_000_000)
    if batched:
        lanes = ingest.as_batches(lanes)
    dealt = [lanes[i::processes] for i in range(processes)]
    servers = [Server(folder) for folder in folders]
    try:
        for server in servers:
            server.start()
        for server, share in zip(servers, dealt, strict=True):  # each agent's first request (its key's look-up)
            warm = [[Call("GET", "/v1/subscriptions", lane[0].headers)] for lane in share]
            asyncio.run(run_load(server.url, warm))
        before = [(s.writer_stats(admin_token), s.cpu_seconds()) for s in servers]
        with LockSampler(cluster.url(name)).running() as sampler:
            result = asyncio.run(load_over(servers, dealt))
        after = [(s.writer_stats(admin_token), s.cpu_seconds()) for s in servers]
    finally:
        for server in servers:
            server.stop()
    runs = []
    for share, (w0, c0), (w1, c1) in zip(dealt, before, after, strict=True):
        entries = sum(per_lane for _ in share)
        runs.append(ProcessRun(entries, c1 - c0, {k: v - w0.get(k, 0.0) for k, v in w1.items()}))
    with psycopg.connect(cluster.url(name)) as conn:
        stored = conn.execute("SELECT count(*) FROM entries").fetchone()
    if stored is None or stored[0] != sum(r.entries for r in runs):
        raise BenchFailure(f"the node stored {stored} entries of {sum(r.entries for r in runs)} acknowledged")
    held, waited = sampler.shares()
    return Run(result, runs, held, waited)


async def load_over(servers: list[Server], dealt: list[list[list[Call]]]) -> LoadResult:
    """Each server's lanes at once; one result over all (its elapsed: the whole run's wall time)."""
    started = time.perf_counter()
    parts = await asyncio.gather(
        *(run_load(s.url, lanes, expect=lambda status: status == 201) for s, lanes in zip(servers, dealt, strict=True))
    )
    elapsed = time.perf_counter() - started
    latencies = [x for part in parts for x in part.latencies]
    return LoadResult(count=len(latencies), elapsed=elapsed, latencies=latencies)


def report(ctx: Context, cluster: pg_cluster.Cluster, batched: bool, posts: int) -> None:
    """One path through one process and through two: throughput, latency, CPU per entry, the writer lock."""
    clients = clients_for(ctx, batched, posts)
    label = f"batches of {min(MAX_BATCH, posts // clients)}" if batched else "single posts"
    slug = "batch" if batched else "single"
    one = run_through(ctx, cluster, slug, 1, batched, posts)
    two = run_through(ctx, cluster, slug, 2, batched, posts)
    add = ctx.report.add
    add(
        Row(
            BENCH,
            f"{label}, node-signed: entries/s, two processes vs one",
            rate(two.per_second),
            rate(one.per_second),
            ratio(two.per_second, one.per_second),
            "",
            None,
            f"{two.entries} entries, {clients} concurrent keep-alive clients (two processes: half the clients each),"
            " real `bbs serve` processes of one node on one PostgreSQL database (fsync on); a fresh node each run",
        )
    )
    lat2, lat1 = two.result.latencies, one.result.latencies
    add(
        Row(
            BENCH,
            f"{label}: latency p50 / p99, two processes (one)",
            f"{ms(percentile(lat2, 50))} / {ms(percentile(lat2, 99))}",
            f"{ms(percentile(lat1, 50))} / {ms(percentile(lat1, 99))}",
            ratio(percentile(lat2, 50), percentile(lat1, 50)),
            "",
            None,
            "per request, measured by the client; ratio of the p50s",
        )
    )
    per_process = " + ".join(ms(p.cpu_per_entry) for p in two.processes)
    total2 = sum(p.cpu for p in two.processes) / max(two.entries, 1)
    add(
        Row(
            BENCH,
            f"{label}: CPU per entry of each process, two processes (one)",
            f"{per_process} (all: {ms(total2)} per entry)",
            ms(one.processes[0].cpu_per_entry),
            ratio(total2, one.processes[0].cpu_per_entry),
            "",
            None,
            "user + system CPU of each `bbs serve` (/proc/<pid>/stat) over the load / the entries its clients posted;"
            " ratio: both processes' CPU per entry against the one process's. Each process also indexes every entry"
            " (its own search index tails the log), so an entry costs indexing once per process",
        )
    )
    busy2 = " + ".join(f"{two.busy_share(i):.0%}" for i in range(len(two.processes)))
    add(
        Row(
            BENCH,
            f"{label}: writer lock held / waited for, share of wall time, two processes (one)",
            f"{two.held:.0%} / {two.waited:.0%} (writers busy {busy2}); held {ms(two.held_per_entry)} per entry",
            f"{one.held:.0%} / {one.waited:.0%} (writer busy {one.busy_share(0):.0%}); {ms(one.held_per_entry)}",
            ratio(two.held_per_entry, one.held_per_entry),
            "",
            None,
            f"pg_locks sampled every {SAMPLE_S * 1000:.0f} ms for the writer's advisory lock: held (granted) and"
            " waited for (a transaction queued on it); busy: each process's bbs_writer_busy_seconds_total over the"
            " run's wall time, its wait for the lock included; ratio: the lock's held time per entry",
        )
    )


def run(ctx: Context) -> None:
    """Single posts and batches through one and through two processes of a node, in one durable cluster."""
    with durable_cluster() as cluster:
        if cluster is None:
            ctx.report.notes.append("processes: PostgreSQL is not installed (initdb, pg_ctl); nothing measured")
            return
        posts = posts_of(ctx)
        report(ctx, cluster, False, posts)
        report(ctx, cluster, True, 3 * posts)  # batches write faster: three times as many entries
