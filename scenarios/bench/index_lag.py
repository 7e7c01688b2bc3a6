"""How far the search index trails the log while 64 clients post: /metrics sampled during the ingest run.

The node keeps its tantivy index caught up off the write path (node/search_index/indexer.py) and reports the
entries committed but not yet indexed as `bbs_search_index_lag_entries`. A thread scrapes /metrics every
SAMPLE_SECONDS while the ingest benchmark's node-signed single posts run on a fresh node, and keeps going until
the index has caught up after the last post. A seconds gauge (`bbs_search_index_lag_seconds`), where the node
has one, is sampled too; otherwise seconds are derived from entries: lag / the run's ingest rate.
"""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from dataclasses import dataclass, field

from scenarios.bench import corpus, ingest
from scenarios.bench.context import Context
from scenarios.bench.harness import Call, LoadResult, Server, bearer, run_load
from scenarios.bench.report import Row, percentile

SAMPLE_SECONDS = 0.05
ENTRIES_GAUGE = "bbs_search_index_lag_entries"
SECONDS_GAUGE = "bbs_search_index_lag_seconds"
SETTLE_SECONDS = 30.0  # at most this long after the run for the index to catch up


def gauges(text: str) -> dict[str, float]:
    """Unlabelled samples of a Prometheus text exposition, by name (comments and labelled series skipped)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or "{" in line:
            continue
        name, _, value = line.partition(" ")
        try:
            out[name] = float(value.split()[0])
        except (ValueError, IndexError):
            continue
    return out


@dataclass
class Sampler:
    """Scrapes a node's /metrics on a thread until stopped; keeps the lag gauges it saw."""

    url: str
    admin_token: str
    entries: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    scrapes: int = 0
    stopping: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def scrape(self) -> dict[str, float]:
        """One scrape of the node's gauges."""
        request = urllib.request.Request(self.url + "/metrics", headers={"Authorization": f"Bearer {self.admin_token}"})
        with urllib.request.urlopen(request, timeout=10) as resp:
            return gauges(resp.read().decode())

    def record(self) -> float:
        """Scrape once, keep the lag figures; returns the entries lag."""
        values = self.scrape()
        self.scrapes += 1
        lag = values.get(ENTRIES_GAUGE, 0.0)
        self.entries.append(lag)
        if SECONDS_GAUGE in values:
            self.seconds.append(values[SECONDS_GAUGE])
        return lag

    def start(self) -> None:
        def loop() -> None:
            while not self.stopping.is_set():
                self.record()
                self.stopping.wait(SAMPLE_SECONDS)

        self.thread = threading.Thread(target=loop, name="lag sampler", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join()

    def settle(self, timeout: float = SETTLE_SECONDS) -> float:
        """Keep sampling after the run until the lag is 0 (or `timeout`); returns how long that took."""
        started = time.perf_counter()
        while self.record() > 0 and time.perf_counter() - started < timeout:
            time.sleep(SAMPLE_SECONDS)
        return time.perf_counter() - started


def measure(ctx: Context) -> tuple[LoadResult, Sampler, float]:
    """The ingest benchmark's node-signed single posts on a fresh node, with the lag sampled; (load, samples,
    seconds from the last acknowledged post until the index had caught up)."""
    clients = ctx.sizes.clients
    per_lane = max(1, ctx.sizes.ingest_posts // clients)
    data, admin_token = corpus.fresh_data_dir(ctx.workdir, "index-lag")
    agents = corpus.register_agents(data, clients, keep_key=True, prefix="writer")
    lanes = ingest.node_signed_lanes([k for _, k in agents], per_lane, offset=2_000_000)
    with Server(data) as server:
        asyncio.run(run_load(server.url, [[Call("GET", "/v1/subscriptions", bearer(k))] for _, k in agents]))
        sampler = Sampler(server.url, admin_token)
        sampler.start()
        try:
            result = asyncio.run(run_load(server.url, lanes, expect=lambda s: s == 201))
        finally:
            sampler.stop()
        settled = sampler.settle()
    return result, sampler, settled


def run(ctx: Context, bench: str) -> None:
    """Report the index lag p50/p99/max in entries and seconds under the 64-client ingest run."""
    result, sampler, settled = measure(ctx)
    ingest_rate = result.count / result.elapsed
    p50, p99, top = (percentile(sampler.entries, p) for p in (50, 99, 100))
    method = (
        f"{result.count:,} node-signed single posts by {ctx.sizes.clients} clients on a fresh node (the ingest"
        f" benchmark's run) at {ingest_rate:,.0f} entries/s; {sampler.scrapes} scrapes of /metrics"
        f" `{ENTRIES_GAUGE}`, one every {SAMPLE_SECONDS * 1000:.0f} ms from a thread of the load generator"
    )
    ctx.report.add(
        Row(
            bench,
            "index lag under ingest, entries: p50 / p99 / max",
            f"{p50:.0f} / {p99:.0f} / {top:.0f}",
            method=method,
        )
    )
    if sampler.seconds:
        s50, s99 = percentile(sampler.seconds, 50), percentile(sampler.seconds, 99)
        ours, how = f"{s50:.3f} / {s99:.3f} s", f"`{SECONDS_GAUGE}` sampled with the entries"
    else:
        s50, s99 = p50 / ingest_rate, p99 / ingest_rate
        ours, how = f"{s50:.3f} / {s99:.3f} s", "derived: entries lag / the run's ingest rate (no seconds gauge)"
    ctx.report.add(
        Row(bench, "index lag under ingest, seconds: p50 / p99", ours, "", None, "p99 < 1 s", s99 < 1.0, how)
    )
    ctx.report.add(
        Row(
            bench,
            "index caught up after the last acknowledged post",
            f"{settled * 1000:.0f} ms",
            method="sampling until the entries lag read 0 (resolution: one scrape)",
        )
    )
