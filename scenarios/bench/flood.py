"""An agent's post latency while one address floods `POST /v1/auth/challenge`, against no flood, in one run.

Anyone may ask for a key-proof challenge, so a flood of asks must not delay the agents' writes: pending
challenges are held in memory (node/agents/challenges.py), never by the single writer, and unauthenticated requests
are rate-limited per client address (`anon_rate_limit_per_s`, `anon_rate_limit_burst`). One agent posts
entries one after another through a real `bbs serve`: first alone (the baseline), then while flooders on the
same machine (a process of their own) ask for challenges as fast as they are answered; once with the node's
default anonymous limit and once with it turned off (so the figure shows what the in-memory store alone
buys). The writer's jobs during each run are read from /metrics: a challenge costs none.

Run alone: `python -m scenarios.bench.flood [--posts N] [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import tempfile
import time
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

import aiohttp

from scenarios.bench import corpus
from scenarios.bench.context import Context, Sizes
from scenarios.bench.harness import Call, LoadResult, Server, bearer, run_load
from scenarios.bench.report import Row, ms, percentile, ratio

BENCH = "flood"
POSTS, QUICK_POSTS = 1_000, 60
FLOODERS, QUICK_FLOODERS = 16, 4
TARGET_RATIO = 2.0


def posts(api_key: str, n: int, label: str) -> list[Call]:
    return [
        Call(
            "POST",
            "/v1/entries",
            bearer(api_key),
            json.dumps({"entry_type": "finding", "performative": "inform", "content": f"{label} post {i}"}).encode(),
        )
        for i in range(n)
    ]


async def _flood(url: str, agent_id: str, lanes: int, stop: EventType, counts: Any) -> None:
    body = {"agent_id": agent_id}

    async def lane(session: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            async with session.post(url + "/v1/auth/challenge", json=body) as resp:
                await resp.read()
                with counts.get_lock():
                    counts[0 if resp.status == 201 else 1 if resp.status == 429 else 2] += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=lanes)) as session:
        await asyncio.gather(*(lane(session) for _ in range(lanes)))


def _flooder(url: str, agent_id: str, lanes: int, stop: EventType, counts: Any) -> None:
    """A process of its own, so that the flood's client work does not slow the measuring client's loop."""
    asyncio.run(_flood(url, agent_id, lanes, stop, counts))


def measure(url: str, calls: list[Call], agent_id: str, lanes: int) -> tuple[LoadResult, dict[int, int]]:
    """The posts' latencies while `lanes` connections ask for challenges (none: the baseline), and the statuses
    of the asks (201 answered, 429 refused, 0 anything else)."""
    context = multiprocessing.get_context("spawn")
    stop, counts = context.Event(), context.Array("q", 3)
    flood = context.Process(target=_flooder, args=(url, agent_id, lanes, stop, counts)) if lanes else None
    try:
        if flood is not None:
            flood.start()
            time.sleep(1.0)  # the flood is under way (and past any burst) before the first post
        result = asyncio.run(run_load(url, [calls]))
    finally:
        stop.set()
        if flood is not None:
            flood.join(30)
    return result, {201: counts[0], 429: counts[1], 0: counts[2]}


def run(ctx: Context, n_posts: int | None = None) -> None:
    """p50/p95 of one agent's posts under a challenge flood from one address vs without it."""
    n = n_posts or (QUICK_POSTS if ctx.quick else POSTS)
    flooders = QUICK_FLOODERS if ctx.quick else FLOODERS
    data, admin = corpus.fresh_data_dir(ctx.workdir, "flood")
    [(key, api_key)] = corpus.register_agents(data, 1, keep_key=True, prefix="poster")
    for limited, env in ((True, {}), (False, {"BBS_ANON_RATE_LIMIT_PER_S": "0"})):
        # the anonymous limit at the node's default (the harness lifts only the per-credential one), or off
        with Server(data, extra_env={"BBS_ANON_RATE_LIMIT_PER_S": "50", **env}) as server:
            asyncio.run(run_load(server.url, [posts(api_key, 10, f"warm {limited}")]))
            before = server.writer_stats(admin)
            quiet, _ = measure(server.url, posts(api_key, n, f"quiet {limited}"), key.did, 0)
            middle = server.writer_stats(admin)
            flood, statuses = measure(server.url, posts(api_key, n, f"flood {limited}"), key.did, flooders)
            after = server.writer_stats(admin)
        extra_jobs = (after["jobs"] - middle["jobs"]) - (middle["jobs"] - before["jobs"])
        asked = sum(statuses.values())
        limit = "default anonymous limit (50/s, burst 500)" if limited else "anonymous limit off"
        for p in (50, 95):
            ours, theirs = percentile(flood.latencies, p), percentile(quiet.latencies, p)
            ctx.report.add(
                Row(
                    BENCH,
                    f"POST /v1/entries p{p} during a challenge flood, {limit}",
                    ms(ours),
                    ms(theirs),
                    ratio(ours, theirs),
                    target=f"<= {TARGET_RATIO:g}",
                    met=ratio(ours, theirs) <= TARGET_RATIO,
                    method=(
                        f"{n} sequential posts by one agent, during {flooders} connections asking for challenges"
                        f" from one address ({asked} asks: {statuses.get(201, 0)} answered 201,"
                        f" {statuses.get(429, 0)} refused 429; {extra_jobs:.0f} more writer jobs than the same"
                        " posts without the flood) vs the same posts without it"
                    ),
                )
            )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m scenarios.bench.flood", description=__doc__)
    parser.add_argument("--posts", type=int, help=f"posts per run (default {POSTS:,})")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bbs-bench-flood-") as tmp:
        ctx = Context(sizes=Sizes.quick() if args.quick else Sizes(), workdir=Path(tmp), quick=args.quick)
        run(ctx, args.posts)
        print(ctx.report.table(BENCH))


if __name__ == "__main__":
    main()
