"""The node on PostgreSQL (`bbs serve --store postgresql://`) against the same node on SQLite and against raw inserts
into the same PostgreSQL schema, measured in the same run (issue 40).

- Ingest: node-signed single posts and batches of MAX_BATCH through REST by concurrent clients, on a real `bbs serve`
  whose database is in a throwaway PostgreSQL cluster (fsync and full-page writes on, as SQLite's synchronous=FULL),
  against the same load on a SQLite node; and the PostgreSQL node's writer time per entry against psycopg inserting
  the same rows (records, entries, entry_tags) into the same schema at the same entries per commit.
- Catch-up: a fresh node on each engine pulls N records from one served SQLite node; and a fresh SQLite node pulls
  them from a PostgreSQL node and from a SQLite node (serving from PostgreSQL).
- Reads and search: the same corpus in a node on each engine, the same requests sent one at a time.

The cluster is started by the benchmark (scenarios/pg_cluster.py, unix socket only) and removed after. Without
PostgreSQL installed the benchmark says so in a note and measures nothing (under `CI` it fails instead).
Sizes: BBS_BENCH_PG_POSTS (posts per ingest path, default 2,000), BBS_BENCH_PG_RECORDS (catch-up, 5,000),
BBS_BENCH_PG_ENTRIES (the read corpus, 10,000).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from identity import key_files, keys
from node.ops.datadir import DataDir
from node.store import db
from scenarios import pg_cluster
from scenarios.bench import corpus, index_lag, ingest, raw, search, sync
from scenarios.bench.context import Context
from scenarios.bench.harness import BenchFailure, Call, LoadResult, Server, bearer, run_load
from scenarios.bench.report import Row, ms, percentile, rate, ratio
from sync.store import PeerConfig
from wire.api import MAX_BATCH

BENCH = "postgresql"
ROUNDS = 3  # raw inserts: the median of this many rounds, each into a fresh database
RAW_COMMITS = 20  # commits per raw round, within RAW_ENTRIES entries
RAW_ENTRIES = (3_000, 6_000)
RAW_BATCH = raw.SQLITE_BATCH
ENGINES = ("sqlite", "postgresql")
# The tests' small cluster (scenarios/pg_cluster.py TEST_SETTINGS) without `fsync=off` and `full_page_writes=off`:
# PostgreSQL's defaults, durable as SQLite's synchronous=FULL is, and wal_recycle off as a node's operator sets it
BENCH_SETTINGS = "-c shared_buffers=32MB -c max_connections=40 -c wal_recycle=off"

INSERT_RECORD = (
    "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, scope, origin, received_ms, body)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING seq"
)
INSERT_ENTRY = (
    "INSERT INTO entries (id, record_hash, content_fingerprint, author_id, created_at, created_ms, entry_type,"
    " performative, content, confidence, tags, directed_to, metadata, truth_state, authority, scope, signature)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
INSERT_TAG = "INSERT INTO entry_tags (entry_id, tag) VALUES (%s, %s)"


@dataclasses.dataclass(frozen=True)
class PgSizes:
    """This benchmark's sizes (its own: the shared --posts and --entries defaults are for SQLite's larger runs)."""

    posts: int
    records: int
    entries: int

    @classmethod
    def of(cls, ctx: Context) -> PgSizes:
        """Quick sizes, or the defaults, each overridden by its BBS_BENCH_PG_* variable."""
        quick = ctx.quick
        return cls(
            posts=int(os.environ.get("BBS_BENCH_PG_POSTS", "64" if quick else "2000")),
            records=int(os.environ.get("BBS_BENCH_PG_RECORDS", "200" if quick else "5000")),
            entries=int(os.environ.get("BBS_BENCH_PG_ENTRIES", "300" if quick else "10000")),
        )


@contextlib.contextmanager
def durable_cluster() -> Iterator[pg_cluster.Cluster | None]:
    """A throwaway cluster with fsync on for the run, or None when PostgreSQL is not installed (an error under CI,
    which installs it)."""
    bindir = pg_cluster.find_bindir()
    if bindir is None:
        if os.environ.get("CI"):
            raise BenchFailure("PostgreSQL is not installed (initdb, pg_ctl): CI installs Debian's postgresql")
        yield None
        return
    cluster = pg_cluster.start(bindir, BENCH_SETTINGS)
    try:
        yield cluster
    finally:
        cluster.stop()


def node_folder(ctx: Context, cluster: pg_cluster.Cluster, name: str, engine: str) -> tuple[Path, str]:
    """A fresh node's data folder on `engine` (a new database in the cluster for PostgreSQL), its admin token."""
    url = cluster.store_url(cluster.create_database()) if engine == "postgresql" else None
    return corpus.fresh_data_dir(ctx.workdir, f"pg-bench-{name}-{engine}", url)


# --- raw inserts into the PostgreSQL schema -----------------------------------------------------------------------


def pg_raw_rate(cluster: pg_cluster.Cluster, rows: list[Any], per_commit: int) -> float:
    """Entries/s of psycopg inserting the node's rows into a freshly migrated database, `per_commit` entries per
    transaction: the median of ROUNDS rounds, each in a new database."""
    rates = []
    for _ in range(ROUNDS):
        name = cluster.create_database()
        try:
            with contextlib.closing(db.connect_store(cluster.store_url(name))) as node_conn:
                db.migrate_store(node_conn)
            rates.append(insert_rows(cluster.url(name), rows, per_commit))
        finally:
            cluster.drop_database(name)
    return sorted(rates)[len(rates) // 2]


def insert_rows(url: str, rows: list[Any], per_commit: int) -> float:
    """Insert `rows` (raw.sqlite_rows: the node's records, entries and entry_tags rows) into the migrated database at
    `url` (a libpq string), `per_commit` entries per transaction, one statement each as the raw SQLite baseline;
    entries/s."""
    with psycopg.connect(url) as conn:
        started = time.perf_counter()
        for i in range(0, len(rows), per_commit):
            with conn.transaction():
                for log_row, entry_row, tags in rows[i : i + per_commit]:
                    fetched = conn.execute(INSERT_RECORD, log_row).fetchone()
                    assert fetched is not None
                    seq = fetched[0]
                    conn.execute(INSERT_ENTRY, (seq, *entry_row))
                    with conn.cursor() as cur:
                        cur.executemany(INSERT_TAG, [(seq, tag) for tag in tags])
        elapsed = time.perf_counter() - started
        counted = conn.execute("SELECT count(*) FROM entries").fetchone()
    if counted is None or counted[0] != len(rows):
        raise BenchFailure(f"the raw PostgreSQL round stored {counted} of {len(rows)} entries")
    return len(rows) / elapsed


def raw_rows(ctx: Context, per_commit: int) -> list[Any]:
    """The node's rows for the first sample records (the raw benchmark's): RAW_COMMITS commits of `per_commit`, within
    RAW_ENTRIES (quick: the sample's size)."""
    records = raw.sample_records(ctx)
    least, most = (0, len(records)) if ctx.quick else RAW_ENTRIES
    return raw.sqlite_rows(records[: min(len(records), max(least, min(most, per_commit * RAW_COMMITS)))])


def sqlite_raw_rate(ctx: Context, rows: list[Any], per_commit: int) -> float:
    """Entries/s of sqlite3 inserting the same rows into the node's schema (raw.sqlite_round: a fresh file, the
    writer's pragmas), `per_commit` per transaction: the median of ROUNDS rounds."""
    rates = sorted(raw.sqlite_round(ctx, rows, batch=per_commit) for _ in range(ROUNDS))
    return rates[len(rates) // 2]


def round_trips(cluster: pg_cluster.Cluster, path: Path, count: int) -> tuple[list[float], list[float]]:
    """(PostgreSQL, SQLite) latencies of `count` `SELECT 1` statements through the node's own connections: a round
    trip to the server over its unix socket against a call into the library in process."""
    out = []
    for store in (cluster.store_url(cluster.create_database()), path):
        with contextlib.closing(db.connect_store(store)) as conn:
            samples = []
            for _ in range(count):
                started = time.perf_counter()
                conn.execute("SELECT 1").fetchone()
                samples.append(time.perf_counter() - started)
            out.append(samples)
    return out[0], out[1]


def report_round_trip(ctx: Context, cluster: pg_cluster.Cluster) -> None:
    """What one statement costs on each engine: the unit every figure below is made of."""
    pg, lite = round_trips(cluster, ctx.workdir / "pg-bench-round-trip.db", 200 if ctx.quick else 2000)
    ctx.report.add(
        Row(
            BENCH,
            "one statement (SELECT 1) through the node's connection: p50 / p99, PostgreSQL vs SQLite",
            f"{ms(percentile(pg, 50))} / {ms(percentile(pg, 99))}",
            f"{ms(percentile(lite, 50))} / {ms(percentile(lite, 99))}",
            ratio(percentile(pg, 50), percentile(lite, 50)),
            "",
            None,
            f"{len(pg)} statements one after another: node.store.pg_conn over the cluster's unix socket (a round trip"
            " to another process, which must be scheduled) vs sqlite3 in process; ratio of the p50s",
        )
    )


# --- ingest -------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Ingested:
    """One engine's run of one ingest path."""

    result: LoadResult
    entries: int
    writer: dict[str, float]

    @property
    def per_second(self) -> float:
        return self.entries / self.result.elapsed

    @property
    def per_commit(self) -> float:
        return self.entries / max(self.writer.get("transactions", 0.0), 1.0)

    @property
    def writer_per_entry(self) -> float:
        return self.writer.get("busy_seconds", 0.0) / max(self.entries, 1)


def ingest_on(ctx: Context, cluster: pg_cluster.Cluster, engine: str, batched: bool, posts: int) -> Ingested:
    """Node-signed posts (single or in batches) by concurrent clients into a fresh node on `engine`."""
    clients = min(ctx.sizes.clients, posts)
    per_lane = max(1, posts // clients)
    data, admin_token = node_folder(ctx, cluster, "batch" if batched else "single", engine)
    agents = corpus.register_agents(data, clients, keep_key=True, prefix="writer")
    lanes = ingest.node_signed_lanes([k for _, k in agents], per_lane, offset=1_000_000)
    if batched:
        lanes = ingest.as_batches(lanes)
    with Server(data) as server:
        asyncio.run(run_load(server.url, [[Call("GET", "/v1/subscriptions", bearer(k))] for _, k in agents]))
        result, _, _, writer = ingest.drive(server, admin_token, lanes)
    return Ingested(result, per_lane * clients, writer)


def report_ingest(ctx: Context, cluster: pg_cluster.Cluster, sizes: PgSizes) -> None:
    """Single posts and batches on each engine, and the PostgreSQL writer against raw psycopg."""
    add = ctx.report.add
    rows = raw_rows(ctx, RAW_BATCH)
    pg_batched = pg_raw_rate(cluster, rows, RAW_BATCH)
    sqlite_batched = sqlite_raw_rate(ctx, rows, RAW_BATCH)
    add(
        Row(
            BENCH,
            f"raw inserts, {RAW_BATCH} per commit (entries/s): psycopg into PostgreSQL vs sqlite3",
            rate(pg_batched),
            rate(sqlite_batched),
            ratio(pg_batched, sqlite_batched),
            "",
            None,
            f"{len(rows)} entries: the node's rows (records RETURNING seq, entries, entry_tags) into the migrated"
            f" schema of each engine, median of {ROUNDS} rounds on fresh databases; PostgreSQL over its unix"
            " socket, fsync on; sqlite3 with the node writer's pragmas (WAL, synchronous=FULL)",
        )
    )
    clients = min(ctx.sizes.clients, sizes.posts)
    for batched in (False, True):
        label = f"batches of {MAX_BATCH}" if batched else "single posts"
        runs = {engine: ingest_on(ctx, cluster, engine, batched, sizes.posts) for engine in ENGINES}
        pg, lite = runs["postgresql"], runs["sqlite"]
        add(
            Row(
                BENCH,
                f"{label}, node-signed: entries/s, PostgreSQL node vs SQLite node",
                rate(pg.per_second),
                rate(lite.per_second),
                ratio(pg.per_second, lite.per_second),
                "",
                None,
                f"{pg.entries} entries, {clients} concurrent keep-alive clients, a real `bbs serve` each (PostgreSQL:"
                f" --store postgresql:// in the run's cluster); {pg.per_commit:.0f} vs {lite.per_commit:.0f} entries"
                " per commit",
            )
        )
        add(
            Row(
                BENCH,
                f"{label}: latency p50 / p99, PostgreSQL node (SQLite node)",
                f"{ms(percentile(pg.result.latencies, 50))} / {ms(percentile(pg.result.latencies, 99))}",
                f"{ms(percentile(lite.result.latencies, 50))} / {ms(percentile(lite.result.latencies, 99))}",
                ratio(percentile(pg.result.latencies, 50), percentile(lite.result.latencies, 50)),
                "",
                None,
                "per request, measured by the client; ratio of the p50s",
            )
        )
        at = max(1, round(pg.per_commit))
        at_rows = raw_rows(ctx, at)
        pg_at = pg_raw_rate(cluster, at_rows, at)
        add(
            Row(
                BENCH,
                f"{label}: PostgreSQL node's writer time per entry vs raw psycopg at the same entries per commit",
                f"{ms(pg.writer_per_entry)} ({pg.per_commit:.0f} per commit)",
                f"{ms(1 / pg_at)} ({at} per commit)",
                ratio(pg.writer_per_entry, 1 / pg_at),
                "",
                None,
                "the node's writer from BEGIN (and its advisory lock) to the answers, COMMIT included (bbs_writer_* on"
                f" /metrics); baseline: psycopg inserting the same rows into the same schema, {at} per commit,"
                f" {len(at_rows)} entries, median of {ROUNDS} rounds",
            )
        )
        sqlite_writer = lite.writer_per_entry
        add(
            Row(
                BENCH,
                f"{label}: writer time per entry, PostgreSQL node vs SQLite node",
                ms(pg.writer_per_entry),
                ms(sqlite_writer),
                ratio(pg.writer_per_entry, sqlite_writer),
                "",
                None,
                "bbs_writer_busy_seconds per entry on each node in the runs above",
            )
        )
        breakdown = ingest.writer_breakdown(f"PostgreSQL node, {label}", pg.writer, pg.entries)
        add(dataclasses.replace(breakdown, bench=BENCH))


# --- catch-up -----------------------------------------------------------------------------------------------------


def pull_rate(source: PeerConfig, fresh: Path, n: int) -> float:
    """Records/s of a fresh node pulling all `n` records from `source`."""
    seconds, _, _ = sync.catch_up(fresh, source, n)
    return n / seconds


def fresh_puller(ctx: Context, cluster: pg_cluster.Cluster, name: str, engine: str) -> tuple[Path, str]:
    """A fresh node that will pull, and its node id."""
    data, _ = node_folder(ctx, cluster, name, engine)
    return data, key_files.load_key(DataDir(data).key_path).did


def report_catch_up(ctx: Context, cluster: pg_cluster.Cluster, sizes: PgSizes) -> None:
    """Pulling into each engine from one SQLite node; and a SQLite node pulling from each engine's node."""
    n = sizes.records
    records = sync.records_for(n)
    into = {engine: fresh_puller(ctx, cluster, f"pull-into-{i}", engine) for i, engine in enumerate(ENGINES)}
    from_ = {engine: fresh_puller(ctx, cluster, f"pull-from-{i}", "sqlite") for i, engine in enumerate(ENGINES)}
    pulled_into: dict[str, float] = {}
    pulled_from: dict[str, float] = {}
    for engine in ENGINES:
        url = cluster.store_url(cluster.create_database()) if engine == "postgresql" else None
        pullers = [into[e][1] for e in ENGINES] if engine == "sqlite" else []
        with sync.served_source(ctx, records, f"pg-bench-source-{engine}", [*pullers, from_[engine][1]], url) as peer:
            if engine == "sqlite":
                for puller in ENGINES:
                    pulled_into[puller] = pull_rate(peer, into[puller][0], n)
            pulled_from[engine] = pull_rate(peer, from_[engine][0], n)
    method = (
        "a fresh node pulls every record over the signed changes feed (pages of 1000; verify, store, cursor), the"
        " production puller in process; the source is a `bbs serve` subprocess"
    )
    for label, figures, how in (
        ("into", pulled_into, "from one SQLite node; the puller's database on PostgreSQL vs on SQLite"),
        ("served by", pulled_from, "to a SQLite puller; the source's database on PostgreSQL vs on SQLite"),
    ):
        ctx.report.add(
            Row(
                BENCH,
                f"catch-up of {n:,} records {label} a PostgreSQL node vs a SQLite node: records/s",
                rate(figures["postgresql"]),
                rate(figures["sqlite"]),
                ratio(figures["postgresql"], figures["sqlite"]),
                "",
                None,
                f"{method}; {how}",
            )
        )


# --- reads and search ---------------------------------------------------------------------------------------------


def probes(picked: list[str]) -> list[tuple[str, list[str]]]:
    """(label, request paths) of the reads timed on both nodes."""
    quoted = [urllib.parse.quote(h) for h in picked]
    hops = [f"/v1/entries/{h}?hops=2&include_links=true" for h in quoted]
    return [
        ("GET /v1/entries/{hash}", [f"/v1/entries/{h}" for h in quoted]),
        ("GET /v1/entries/{hash}?hops=2&include_links=true", hops),
        (f"search q={corpus.COMMON_TERM} (common term), 20 a page", [f"/v1/search?q={corpus.COMMON_TERM}"]),
        (f"search q={corpus.RARE_TERM} (rare term)", [f"/v1/search?q={corpus.RARE_TERM}"]),
        (f"search by a tag alone (tags={corpus.TAGS[7]})", [f"/v1/search?tags={corpus.TAGS[7]}"]),
    ]


@dataclasses.dataclass
class Reads:
    """One engine's read figures: each probe's latencies, and the node's quick reads answered on the event loop and
    moved to a reader thread (over the inline budget) during them."""

    latencies: dict[str, list[float]]
    inline: float
    moved: float


def read_latencies(
    data: Path, admin_token: str, api_key: str, rounds: int, paths: list[tuple[str, list[str]]]
) -> Reads:
    """Each probe's latencies on the node serving `data`: `rounds` requests sent one at a time (3 warm-ups first)."""
    out: dict[str, list[float]] = {}
    with Server(data) as server:
        before = quick_reads(server, admin_token)
        for label, targets in paths:
            calls = [Call("GET", targets[i % len(targets)], bearer(api_key)) for i in range(rounds)]
            asyncio.run(run_load(server.url, [calls[:3]]))
            out[label] = asyncio.run(run_load(server.url, [calls])).latencies
        after = quick_reads(server, admin_token)
    return Reads(out, after[0] - before[0], after[1] - before[1])


def quick_reads(server: Server, admin_token: str) -> tuple[float, float]:
    """The node's (bbs_reads_inline_total, bbs_reads_moved_total) from /metrics."""
    request = urllib.request.Request(server.url + "/metrics", headers={"Authorization": f"Bearer {admin_token}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        values = index_lag.gauges(resp.read().decode())
    return values.get("bbs_reads_inline_total", 0.0), values.get("bbs_reads_moved_total", 0.0)


def report_reads(ctx: Context, cluster: pg_cluster.Cluster, sizes: PgSizes) -> None:
    """The same corpus on each engine, the same reads sent to each."""
    signers = [keys.SigningKey.generate() for _ in range(20)]
    stream = list(corpus.signed_entries(signers, sizes.entries, seed=3, link_ratio=search.LINK_RATIO))
    linked = [h for record, h in stream if record["links"]]
    picked = random.Random(5).sample(linked, min(len(linked), ctx.sizes.queries))
    rounds = ctx.sizes.queries
    measured: dict[str, Reads] = {}
    for engine in ENGINES:
        data, admin_token = node_folder(ctx, cluster, "reads", engine)
        api_key = corpus.register_agents(data, 1, keep_key=True, prefix="reader")[0][1]
        corpus.bulk_load(data, iter(stream))
        search.ensure_index(data)
        measured[engine] = read_latencies(data, admin_token, api_key, rounds, probes(picked))
    for label, _ in probes(picked):
        pg, lite = measured["postgresql"].latencies[label], measured["sqlite"].latencies[label]
        ctx.report.add(
            Row(
                BENCH,
                f"{label}: p50 / p95, PostgreSQL node vs SQLite node",
                f"{ms(percentile(pg, 50))} / {ms(percentile(pg, 95))}",
                f"{ms(percentile(lite, 50))} / {ms(percentile(lite, 95))}",
                ratio(percentile(pg, 50), percentile(lite, 50)),
                "",
                None,
                f"{rounds} requests one at a time on one keep-alive connection, {sizes.entries:,} entries (30% with a"
                " link) in each node, search index built; ratio of the p50s",
            )
        )
    shares = {engine: reads.moved / max(reads.inline + reads.moved, 1.0) for engine, reads in measured.items()}
    ctx.report.add(
        Row(
            BENCH,
            "quick reads moved off the event loop (over the inline budget) during the reads above",
            f"{shares['postgresql']:.0%} of {measured['postgresql'].inline + measured['postgresql'].moved:.0f}",
            f"{shares['sqlite']:.0%} of {measured['sqlite'].inline + measured['sqlite'].moved:.0f}",
            None,
            "",
            None,
            "bbs_reads_moved_total / (bbs_reads_inline_total + bbs_reads_moved_total) on /metrics: a moved read ran"
            " over the budget (PostgreSQL: a statement over `statement_timeout`, record 80) and is run again on a"
            " reader thread",
        )
    )


def run(ctx: Context) -> None:
    """Ingest, catch-up and reads on a PostgreSQL node against a SQLite node and raw psycopg, in one cluster."""
    sizes = PgSizes.of(ctx)
    with durable_cluster() as cluster:
        if cluster is None:
            ctx.report.notes.append("postgresql: PostgreSQL is not installed (initdb, pg_ctl); nothing measured")
            return
        report_round_trip(ctx, cluster)
        report_ingest(ctx, cluster, sizes)
        report_catch_up(ctx, cluster, sizes)
        report_reads(ctx, cluster, sizes)
