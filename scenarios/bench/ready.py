"""GET /v1/agent-workflows/tasks/ready on a large random task DAG, through a real `bbs serve`.

The graph is built the way a node holds it: signed `task_event` records appended through the projections
(declarations by one supervisor, lease grants signed by the node key). Task i depends on 0 to 6 random
earlier tasks (3 on average); the first 60% are done, 2% of the rest hold a live lease. The figure is the
REST latency of one ready page, beside the same SQL run directly on the file.

Run alone: `python -m scenarios.bench.ready [--tasks N] [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from identity import canonical, key_files, keys, records
from node.features import LOG
from node.ops.datadir import DataDir
from node.spaces.sight import PUBLIC
from node.store import db, projections
from node.workflows.store.tasks import READY_SQL
from scenarios.bench import corpus
from scenarios.bench.context import Context, Sizes
from scenarios.bench.harness import Call, Server, bearer, run_load
from scenarios.bench.report import Row, ms, percentile, ratio
from wire.time import format_ms

BENCH = "ready"
TARGET_MS = 50.0
TASKS = 100_000
QUICK_TASKS = 2_000
DONE_FRACTION = 0.6
LEASED_FRACTION = 0.02


def _event(author: keys.SigningKey, created_ms: int, key: str, event: str, **fields: Any) -> dict[str, Any]:
    body = {
        "kind": "task_event",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": author.did,
        "created_at": format_ms(created_ms),
        "event": event,
        "task_key": key,
        **fields,
    }
    return records.sign(body, author)


def task_records(node_key: keys.SigningKey, supervisor: keys.SigningKey, n: int, seed: int = 11) -> Iterator[Any]:
    """Declarations of a random DAG (plus done statuses and a few live lease grants), in creation order."""
    rng = random.Random(seed)
    start = int(time.time() * 1000) - n - 10_000
    done_upto = int(n * DONE_FRACTION)
    for i in range(n):
        deps = sorted({f"task-{rng.randrange(i)}" for _ in range(rng.randint(0, 6))}) if i else []
        fields: dict[str, Any] = {"node_id": node_key.did, "title": f"Task {i}", "depends_on": deps}
        if i < done_upto:
            fields["status"] = "done"
        yield _event(supervisor, start + i, f"task-{i}", "declare", **fields)
        if i >= done_upto and rng.random() < LEASED_FRACTION:
            holder = supervisor.did
            expires = format_ms(start + i + 86_400_000)
            yield _event(node_key, start + i + 1, f"task-{i}", "lease", holder=holder, expires_at=expires)


def build(data: Path, n: int, *, batch: int = 5_000) -> str:
    """Load an n-task graph into a fresh data folder; return an agent API key for reading it."""
    node_key = key_files.load_key(DataDir(data).key_path)
    (supervisor, api_key) = corpus.register_agents(data, 1, keep_key=True, prefix="supervisor")[0]
    pending: list[dict[str, Any]] = []

    def flush(conn: sqlite3.Connection) -> None:
        now = int(time.time() * 1000)
        for record in pending:
            record_hash, decoded = records.check(record)
            projections.append(conn, record, record_hash, decoded, origin="local", now_ms=now)

    for record in task_records(node_key, supervisor, n):
        pending.append(record)
        if len(pending) >= batch:
            db.write_sync(DataDir(data).db_path, flush, log=LOG)
            pending = []
    if pending:
        db.write_sync(DataDir(data).db_path, flush, log=LOG)
    return api_key


def direct(db_path: Path, rounds: int, limit: int) -> tuple[list[float], list[str]]:
    """Latencies of the node's ready query run directly with sqlite3, and its query plan."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    now = int(time.time() * 1000)
    sql = READY_SQL.format(sight=PUBLIC.sql("space"))  # as an agent of no space asks it: public tasks only
    params = (-1, now, None, None, limit + 1)
    plan = [str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
    lat = []
    for _ in range(rounds):
        started = time.perf_counter()
        conn.execute(sql, params).fetchall()
        lat.append(time.perf_counter() - started)
    conn.close()
    return lat, plan


def run(ctx: Context, tasks: int | None = None) -> None:
    """p50/p95 of GET /tasks/ready (a page of 100, and of 1,000) on the task graph."""
    n = tasks or (QUICK_TASKS if ctx.quick else TASKS)
    data, _ = corpus.fresh_data_dir(ctx.workdir, f"tasks-{n}")
    started = time.perf_counter()
    api_key = build(data, n)
    print(f"  built a graph of {n:,} tasks from signed records in {time.perf_counter() - started:.1f}s", flush=True)
    db_path = DataDir(data).db_path
    rounds = ctx.sizes.queries
    with Server(data) as server:
        for limit in (100, 1_000):
            calls = [Call("GET", f"/v1/agent-workflows/tasks/ready?limit={limit}", bearer(api_key))] * rounds
            asyncio.run(run_load(server.url, [calls[:3]]))
            result = asyncio.run(run_load(server.url, [calls]))
            base, plan = direct(db_path, rounds, limit)
            for p in (50, 95):
                ours, theirs = percentile(result.latencies, p), percentile(base, p)
                ctx.report.add(
                    Row(
                        BENCH,
                        f"GET /tasks/ready?limit={limit} ({n:,} tasks, avg 3 deps): p{p}",
                        ms(ours),
                        ms(theirs),
                        ratio(ours, theirs),
                        target=f"< {TARGET_MS:.0f} ms",
                        met=ours * 1000 < TARGET_MS,
                        method="one client through REST vs the same SQL on the file; plan: " + "; ".join(plan),
                    )
                )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m scenarios.bench.ready", description=__doc__)
    parser.add_argument("--tasks", type=int, help=f"graph size (default {TASKS:,})")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bbs-bench-ready-") as tmp:
        ctx = Context(sizes=Sizes.quick() if args.quick else Sizes(), workdir=Path(tmp), quick=args.quick)
        run(ctx, args.tasks)
        print(ctx.report.table(BENCH))


if __name__ == "__main__":
    main()
