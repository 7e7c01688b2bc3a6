"""Ingest: signed entries posted one per request through REST by concurrent clients, on a real `bbs serve`.

Two paths: node-signed (the node keeps the agent's key and signs) and author-signed (`{"record": ...}`,
signed by the client beforehand, verified by the node), each posted one entry per request and then
through `POST /v1/entries/batch` (MAX_BATCH entries per request). Compared with raw SQLite batched inserts
of the same rows measured in the same run (issue 2: at least 50%).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from identity import keys
from node.store.sealing import POOL_MIN_RECORDS
from scenarios.bench import corpus, raw
from scenarios.bench.bare_http import BareServer
from scenarios.bench.context import Context
from scenarios.bench.harness import BenchFailure, Call, LoadResult, Server, bearer, cpu_seconds, run_load
from scenarios.bench.report import Row, ms, percentile, rate, ratio
from wire.api import MAX_BATCH

BENCH = "ingest"
TARGET = 0.5
FLOOR_PROCESSES = 2  # the several-process floor: one per core of the reference machine
# issue 34: node-signed batches against raw batched inserts; single posts against the bare floor; the writer's
# time per entry against raw inserts at the same entries per commit
BATCH_TARGET = 0.8
FLOOR_TARGET = 0.7
WRITER_TARGET_SINGLES = 2.0
WRITER_TARGET_BATCHES = 1.3


def node_signed_lanes(api_keys: list[str], per_lane: int, offset: int) -> list[list[Call]]:
    gen = corpus.TextGen(seed=offset)
    lanes = []
    for lane, api_key in enumerate(api_keys):
        calls = []
        for j in range(per_lane):
            i = offset + lane * per_lane + j
            body = {
                "entry_type": "finding",
                "performative": "inform",
                "content": gen.content(i),
                "confidence": 0.8,
                "tags": gen.tags(),
            }
            calls.append(Call("POST", "/v1/entries", bearer(api_key), json.dumps(body).encode()))
        lanes.append(calls)
    return lanes


def author_signed_lanes(
    agents: list[tuple[keys.SigningKey, str]], per_lane: int, start: int = 10_000_000
) -> list[list[Call]]:
    signers = [key for key, _ in agents]
    by_author = {key.did: api_key for key, api_key in agents}
    lanes: dict[str, list[Call]] = {key.did: [] for key in signers}
    stream = corpus.signed_entries(signers, per_lane * len(signers), seed=23, start=start)
    for record, _ in stream:
        author = record["author_id"]
        lanes[author].append(
            Call("POST", "/v1/entries", bearer(by_author[author]), json.dumps({"record": record}).encode())
        )
    return list(lanes.values())


def as_batches(lanes: list[list[Call]], size: int = MAX_BATCH) -> list[list[Call]]:
    """The same entries, each lane's posts grouped into `POST /v1/entries/batch` requests of `size` items."""
    batched = []
    for calls in lanes:
        items = [json.loads(call.body or b"{}") for call in calls]
        batched.append(
            [
                Call(
                    "POST", "/v1/entries/batch", calls[0].headers, json.dumps({"entries": items[i : i + size]}).encode()
                )
                for i in range(0, len(items), size)
            ]
        )
    return batched


@dataclass
class Measured:
    """One ingest path's run: the client's view, the server's CPU and what its single writer did."""

    label: str
    result: LoadResult
    cpu: float
    loop_cpu: float  # of the server's main thread, its event loop
    entries: int
    writer: dict[str, float]  # growth of the bbs_writer_* counters during the run


@dataclass
class Floor:
    """The bare floor's run: the client's view and its event loop's CPU seconds."""

    result: LoadResult
    loop_cpu: float


def drive(
    server: Server, admin_token: str, lanes: list[list[Call]]
) -> tuple[LoadResult, float, float, dict[str, float]]:
    """Send `lanes` to the server (every answer a 201); (the load's result, the server's CPU seconds, its event
    loop's, the growth of its bbs_writer_* counters)."""
    writer_before = server.writer_stats(admin_token)
    cpu_before, loop_before = server.cpu_seconds(), server.loop_cpu_seconds()
    result = asyncio.run(run_load(server.url, lanes, expect=lambda s: s == 201))
    cpu, loop_cpu = server.cpu_seconds() - cpu_before, server.loop_cpu_seconds() - loop_before
    writer_after = server.writer_stats(admin_token)
    return result, cpu, loop_cpu, {name: writer_after[name] - writer_before.get(name, 0.0) for name in writer_after}


def start_workers(server: Server, admin_token: str, agent: tuple[keys.SigningKey, str], node_signed: bool) -> None:
    """Have the node start its worker processes, as a node that has taken a large batch before has them (the first
    one starts them and is sealed on threads): one batch of POOL_MIN_RECORDS posts of `agent`'s (node-signed, or
    signed by the agent), words and times of their own, then wait for the gauge."""
    if node_signed:
        warm = node_signed_lanes([agent[1]], POOL_MIN_RECORDS, offset=9_000_000)
    else:
        warm = author_signed_lanes([agent], POOL_MIN_RECORDS, start=20_000_000)
    asyncio.run(run_load(server.url, as_batches(warm), expect=lambda s: s == 201))
    deadline = time.monotonic() + 60
    while server.gauge(admin_token, "bbs_worker_processes_up") != 1.0:
        if time.monotonic() > deadline:
            raise BenchFailure("the node's worker processes did not start within 60 s")
        time.sleep(0.1)


def _bare_floor(ctx: Context, per_lane: int, *, processes: int = 1, flock: bool = False) -> Floor:
    """The same single posts, with the same client, sent to `bare_http`'s ingest route: aiohttp, Ed25519 signing
    and one writer thread committing the raw baseline's rows, and nothing else a node does; served by `processes`
    processes on one database file (their transactions ordered by an `flock` when `flock`, else by SQLite's lock).
    The event loop CPU is the first process's."""
    database = ctx.workdir / f"ingest-floor-{processes}{'-flock' if flock else ''}.db"
    raw.remove_database(database)
    lanes = node_signed_lanes([f"floor-{i}" for i in range(ctx.sizes.clients)], per_lane, offset=1_000_000)
    with BareServer(database, processes=processes, flock=flock) as bare:
        assert bare.proc is not None
        loop_before = cpu_seconds(bare.proc.pid, main_thread=True)
        result = asyncio.run(run_load(bare.url, lanes, expect=lambda s: s == 201))
        loop_cpu = cpu_seconds(bare.proc.pid, main_thread=True) - loop_before
        if bare.stored() != result.count:
            raise BenchFailure(f"the bare ingest server stored {bare.stored()} of {result.count} acknowledged posts")
    return Floor(result, loop_cpu)


def cpu_by_thread(m: Measured, floor: Floor) -> Row:
    """Where the server's CPU per entry went: its event loop (the main thread), its writer thread, and the rest
    (crypto threads, readers, the search indexer, the worker processes); against the bare floor's event loop per
    post."""
    n = max(m.entries, 1)
    writer_cpu = m.writer.get("cpu_seconds", 0.0)
    floor_loop = floor.loop_cpu / max(floor.result.count, 1)
    return Row(
        BENCH,
        f"{m.label}: server CPU per entry: event loop / writer / other threads and processes",
        f"{ms(m.loop_cpu / n)} / {ms(writer_cpu / n)} / {ms(max(m.cpu - m.loop_cpu - writer_cpu, 0.0) / n)}",
        f"{ms(floor_loop)} (the floor's event loop per post)",
        ratio(m.loop_cpu / n, floor_loop),
        "",
        None,
        "user+system CPU of the server's main thread (/proc/<pid>/task/<pid>/stat), of its writer thread"
        " (bbs_writer_cpu_seconds on /metrics) and the rest of the process and its worker processes, per entry;"
        " with one event loop the"
        " loop's share is what bounds single posts once the writer waits for requests (docs/performance.md)",
    )


def writer_breakdown(label: str, writer: dict[str, float], entries: int) -> Row:
    """Where the writer's time per entry went (node.store.db.WriterStats): SQL statements, Python in the transaction,
    COMMIT, and how much of the time outside COMMIT the thread was not running (waiting for the GIL)."""
    n = max(entries, 1)
    busy, commit = writer.get("busy_seconds", 0.0), writer.get("commit_seconds", 0.0)
    statements = writer.get("statement_seconds", 0.0)
    off_cpu = (busy - commit) - (writer.get("cpu_seconds", 0.0) - writer.get("commit_cpu_seconds", 0.0))
    per_commit = writer.get("statements", 0.0) / max(writer.get("transactions", 0.0), 1.0)
    return Row(
        BENCH,
        f"{label}: writer time per entry: SQL / Python / COMMIT / waiting",
        f"{ms((statements - commit) / n)} ({per_commit:.0f} statements per commit) / {ms((busy - statements) / n)}"
        f" / {ms(commit / n)} / {ms(off_cpu / n)}",
        "—",
        None,
        "",
        None,
        "bbs_writer_* on /metrics: SQL = wall time inside statements but COMMIT (BEGIN and savepoints included);"
        " Python = the rest of the transaction and its answers; COMMIT = its wall time (fsync); waiting = wall"
        " minus the thread's CPU outside COMMIT (the GIL), already counted in SQL and Python",
    )


def run(ctx: Context) -> None:
    """Measure the four ingest paths and report them against the raw SQLite rate."""
    sizes = ctx.sizes
    sqlite_rate = raw.sqlite_batched_rate(ctx)
    verify_one, verify_two = raw.verify_rates(ctx)
    clients = sizes.clients
    per_lane = max(1, sizes.ingest_posts // clients)
    paths: list[tuple[str, bool, Callable[[list[tuple[keys.SigningKey, str]]], list[list[Call]]]]] = [
        ("node-signed", True, lambda agents: node_signed_lanes([k for _, k in agents], per_lane, offset=1_000_000)),
        ('author-signed {"record": …}', False, lambda agents: author_signed_lanes(agents, per_lane)),
        (
            f"batch of {MAX_BATCH}, node-signed",
            True,
            lambda agents: as_batches(node_signed_lanes([k for _, k in agents], per_lane, offset=1_000_000)),
        ),
        (
            f'batch of {MAX_BATCH}, author-signed {{"record": …}}',
            False,
            lambda agents: as_batches(author_signed_lanes(agents, per_lane)),
        ),
    ]
    floor = _bare_floor(ctx, per_lane)
    # the lever beyond one process (issue 34): the floor itself served by several processes on one SQLite file
    several = {flock: _bare_floor(ctx, per_lane, processes=FLOOR_PROCESSES, flock=flock) for flock in (False, True)}
    measured: list[Measured] = []
    for n, (label, keep_key, make_lanes) in enumerate(paths):
        # each path starts from an empty node, as the raw baseline starts from an empty database
        data, admin_token = corpus.fresh_data_dir(ctx.workdir, f"ingest-{n}")
        agents = corpus.register_agents(data, clients, keep_key=keep_key, prefix="writer")
        lanes = make_lanes(agents)
        with Server(data) as server:
            # warm up: each agent's first request pays the API-key hash check once (then the token cache holds it)
            asyncio.run(run_load(server.url, [[Call("GET", "/v1/subscriptions", bearer(k))] for _, k in agents]))
            if label.startswith("batch"):
                start_workers(server, admin_token, agents[0], node_signed=keep_key)
            result, cpu, loop_cpu, writer = drive(server, admin_token, lanes)
        measured.append(Measured(label, result, cpu, loop_cpu, per_lane * clients, writer))
    method_common = (
        f"{clients} concurrent keep-alive HTTP/1.1 clients, real `bbs serve` subprocess on loopback;"
        " client and server share the machine's 2 cores"
    )
    for m in measured:
        label, result, cpu, entries = m.label, m.result, m.cpu, m.entries
        eps = entries / result.elapsed
        target = BATCH_TARGET if label == f"batch of {MAX_BATCH}, node-signed" else TARGET
        per_request = (
            "single posts" if result.count == entries else f"{result.count} batch requests of up to {MAX_BATCH}"
        )
        ctx.report.add(
            Row(
                BENCH,
                f"{label}: entries/s vs raw sqlite3 batched",
                rate(eps),
                rate(sqlite_rate),
                ratio(eps, sqlite_rate),
                f">= {target}",
                ratio(eps, sqlite_rate) >= target,
                f"{entries} entries, {per_request}; {method_common}",
            )
        )
        ctx.report.add(
            Row(
                BENCH,
                f"{label}: latency p50 / p99",
                f"{ms(percentile(result.latencies, 50))} / {ms(percentile(result.latencies, 99))}",
                "—",
                None,
                "",
                None,
                "per request, measured by the client, from send to full response",
            )
        )
        ctx.report.add(
            Row(
                BENCH,
                f"{label}: server CPU per entry",
                ms(cpu / max(entries, 1)),
                ms(1 / verify_one),
                ratio(cpu / max(entries, 1), 1 / verify_one),
                "",
                None,
                "server process user+system CPU during the run / entries; baseline: one Ed25519 verify",
            )
        )
        busy, commits = m.writer.get("busy_seconds", 0.0), max(m.writer.get("transactions", 0.0), 1.0)
        ctx.report.add(
            Row(
                BENCH,
                f"{label}: single writer time per entry",
                f"{ms(busy / max(entries, 1))} ({entries / commits:.0f} per commit, busy {busy / result.elapsed:.0%})",
                f"{ms(1 / sqlite_rate)} ({raw.SQLITE_BATCH} per commit)",
                ratio(busy / max(entries, 1), 1 / sqlite_rate),
                "",
                None,
                "the node's writer thread from BEGIN to the answers, COMMIT (fsync) included, per entry, with the"
                " entries per commit and the share of the run it was busy (bbs_writer_* on /metrics); baseline:"
                " the raw sqlite3 run's time per entry",
            )
        )
        at_rate = raw.sqlite_rate_at(ctx, entries / commits)
        writer_ratio = ratio(busy / max(entries, 1), 1 / at_rate)
        writer_target = WRITER_TARGET_SINGLES if result.count == entries else WRITER_TARGET_BATCHES
        ctx.report.add(
            Row(
                BENCH,
                f"{label}: single writer time per entry vs raw at the same entries per commit",
                f"{ms(busy / max(entries, 1))} ({entries / commits:.0f} per commit)",
                f"{ms(1 / at_rate)} ({max(1, round(entries / commits))} per commit)",
                writer_ratio,
                f"<= {writer_target}",
                writer_ratio <= writer_target,
                "the fair baseline (issue 34): the raw sqlite3 inserts of the same rows committed as many entries at a"
                " time as the node's writer did in this run (median of 3 runs on fresh files), so both pay an fsync"
                " per the same number of entries",
            )
        )
        ctx.report.add(writer_breakdown(label, m.writer, entries))
        ctx.report.add(cpu_by_thread(m, floor))
    floor_rate = floor.result.count / floor.result.elapsed
    single_rate = measured[0].entries / measured[0].result.elapsed
    ctx.report.add(
        Row(
            BENCH,
            "floor: bare aiohttp + one writer thread, single posts: entries/s vs raw sqlite3 batched",
            rate(floor_rate),
            rate(sqlite_rate),
            ratio(floor_rate, sqlite_rate),
            "",
            None,
            f"{floor.result.count} posts, the node-signed bodies; scenarios/bench/bare_http.py in its own process:"
            " decode, canonical record, Ed25519 sign, one writer thread committing what queued (raw baseline's rows),"
            " 201; no auth, validation, record check, access log, links or notifications. What any one-process aiohttp"
            " node with one writer could reach here",
        )
    )
    ctx.report.add(
        Row(
            BENCH,
            "node-signed single posts vs the floor",
            rate(single_rate),
            rate(floor_rate),
            ratio(single_rate, floor_rate),
            f">= {FLOOR_TARGET}",
            ratio(single_rate, floor_rate) >= FLOOR_TARGET,
            "the node's node-signed single posts above against the floor's; the rest is what the node does per post"
            " beyond the floor",
        )
    )
    for flock, several_floor in several.items():
        several_rate = several_floor.result.count / several_floor.result.elapsed
        ordered_by = "an flock" if flock else "SQLite's lock"
        ctx.report.add(
            Row(
                BENCH,
                f"floor served by {FLOOR_PROCESSES} processes on one SQLite file, their transactions ordered by"
                f" {ordered_by}: entries/s vs the floor in one process",
                rate(several_rate),
                rate(floor_rate),
                ratio(several_rate, floor_rate),
                "",
                None,
                "the same posts and client; each process (SO_REUSEPORT on one port) with its own writer thread on the"
                + (
                    " one file, each transaction inside an exclusive flock of a file beside it (the next writer is"
                    " woken when it is let go)"
                    if flock
                    else " one file, BEGIN IMMEDIATE waiting in SQLite's busy handler (which sleeps between tries)"
                )
                + ". What several processes of one node on SQLite could reach on this machine at best",
            )
        )
    signed_result = measured[1].result
    ctx.cache["ingest_author_signed"] = {
        "rate": signed_result.per_second,
        "count": signed_result.count,
        "p50": percentile(signed_result.latencies, 50),
        "p99": percentile(signed_result.latencies, 99),
    }
    limit = min(sqlite_rate, verify_two)
    ctx.report.add(
        Row(
            BENCH,
            "author-signed entries/s vs the limit the raw figures imply",
            rate(signed_result.per_second),
            rate(limit),
            ratio(signed_result.per_second, limit),
            "",
            None,
            "limit = min(raw sqlite3 batched rate, Ed25519 verifies/s on 2 threads) from this run",
        )
    )
