"""Read with hops=2 through REST against the same walk in plain SQL, and the node's memory at a corpus size."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from pathlib import Path

from node.ops.datadir import DataDir
from scenarios.bench import search
from scenarios.bench.context import Context
from scenarios.bench.harness import Call, Server, bearer, proc_rss, run_load
from scenarios.bench.report import Row, mib, ms, percentile, ratio

# Two hops in both directions from one entry, then the entries reached: one recursive query.
WALK_SQL = """
WITH RECURSIVE walk(h, depth) AS (
    SELECT :seed, 0
    UNION
    SELECT l.target_hash, w.depth + 1 FROM walk w JOIN links l ON l.source_hash = w.h WHERE w.depth < 2
    UNION
    SELECT l.source_hash, w.depth + 1 FROM walk w JOIN links l ON l.target_hash = w.h WHERE w.depth < 2
)
SELECT e.* FROM entries e WHERE e.record_hash IN (SELECT h FROM walk)
"""
LINKS_SQL = """
SELECT l.* FROM links l WHERE l.source_hash IN (SELECT value FROM json_each(:hs))
UNION SELECT l.* FROM links l WHERE l.target_hash IN (SELECT value FROM json_each(:hs))
"""


def seeds(db_path: Path, count: int) -> list[tuple[int, str]]:
    """Entries that have links, chosen at random (fixed seed)."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT e.id, e.record_hash FROM entries e WHERE e.record_hash IN (SELECT source_hash FROM links)"
            " ORDER BY e.id"
        ).fetchall()
    finally:
        conn.close()
    rng = random.Random(5)
    return [tuple(r) for r in rng.sample(rows, min(count, len(rows)))]


def direct_walk(db_path: Path, picked: list[tuple[int, str]]) -> list[float]:
    import json

    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    lat = []
    for _, seed in picked:
        started = time.perf_counter()
        hashes = [r[-1] for r in conn.execute(WALK_SQL.replace("e.*", "e.*, e.record_hash"), {"seed": seed})]
        conn.execute(LINKS_SQL, {"hs": json.dumps(hashes)}).fetchall()
        lat.append(time.perf_counter() - started)
    conn.close()
    return lat


def run_read(ctx: Context) -> None:
    """p50/p95 of GET /v1/entries/{id}?hops=2 (both directions, links included)."""
    data, api_key = search.main_corpus(ctx)
    db_path = DataDir(data).db_path
    picked = seeds(db_path, ctx.sizes.queries)
    calls = [Call("GET", f"/v1/entries/{i}?hops=2&include_links=true", bearer(api_key)) for i, _ in picked]
    with Server(data) as server:
        asyncio.run(run_load(server.url, [calls[:3]]))
        result = asyncio.run(run_load(server.url, [calls]))
    base = direct_walk(db_path, picked)
    for p in (50, 95):
        ours, theirs = percentile(result.latencies, p), percentile(base, p)
        ctx.report.add(
            Row(
                "read",
                f"read hops=2 ({ctx.sizes.search_entries:,} entries, 30% with a link): p{p}",
                ms(ours),
                ms(theirs),
                ratio(ours, theirs),
                "",
                None,
                f"GET /v1/entries/{{id}}?hops=2&include_links=true from {len(picked)} random linked entries,"
                " sequential; baseline: a recursive CTE walking 2 hops both ways + the links, sqlite3 on the file",
            )
        )


def run_memory(ctx: Context) -> None:
    """Resident memory of a node serving a corpus (after search and read traffic) vs an empty node."""
    size = ctx.sizes.rss_entries or ctx.sizes.search_entries
    data, api_key = search.build_corpus(ctx, size, "rss-corpus") if ctx.sizes.rss_entries else search.main_corpus(ctx)
    empty = ctx.workdir / "rss-empty"
    if not empty.exists():
        from scenarios.bench import corpus

        corpus.fresh_data_dir(ctx.workdir, "rss-empty")
    with Server(empty) as idle:
        time.sleep(0.5)
        idle_rss, _ = idle.rss_bytes()
    db_path = DataDir(data).db_path
    picked = seeds(db_path, 50)
    calls = [Call("GET", f"/v1/entries/{i}?hops=2&include_links=true", bearer(api_key)) for i, _ in picked]
    calls += [Call("GET", f"/v1/search?q={t}&limit=50", bearer(api_key)) for t in ("kernel", "zeppelin")] * 10
    search.ensure_index(data)
    with Server(data) as server:
        asyncio.run(run_load(server.url, [calls[i::8] for i in range(8)]))
        rss, hwm = server.rss_bytes()
        pid = server.proc.pid if server.proc else 0
        assert pid
    db_bytes = sum(p.stat().st_size for p in data.glob("bbs.db*"))
    ctx.report.add(
        Row(
            "memory",
            f"node RSS at {size:,} entries (peak)",
            f"{mib(rss)} ({mib(hwm)})",
            mib(idle_rss),
            ratio(rss, idle_rss),
            "",
            None,
            f"VmRSS of `bbs serve` after 8 concurrent clients ran reads and searches; baseline: an empty node;"
            f" database files {mib(db_bytes)}; larger sizes: --rss-entries N",
        )
    )
    _ = proc_rss  # re-exported for callers measuring other processes
