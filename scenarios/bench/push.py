"""NLIP push: latency from post to the receiving agent's handler against the inbox-poll path at the seed's active
polling profile (one run), and pushes per second to 100 endpoints while ingest runs, with its cost to ingest."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from identity import key_files
from node.ops.datadir import DataDir
from scenarios.bench import corpus
from scenarios.bench.context import Context
from scenarios.bench.harness import BenchFailure, Call, Server, bearer, run_load, stop_process
from scenarios.bench.report import Row, ms, percentile, rate, ratio

BENCH = "push"
ACTIVE = (5.0, 10.0)  # the seed's active polling profile: an interval drawn from 5-10 s
ROOT = Path(__file__).resolve().parents[2]


def start_receiver(node_id: str) -> tuple[subprocess.Popen[str], str]:
    """scenarios/bench/push_receiver.py as its own process; (process, base URL)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "scenarios.bench.push_receiver", "--node-id", node_id],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        stop_process(proc)  # type: ignore[arg-type]
        raise BenchFailure(f"the push receiver did not start: {line!r}")
    return proc, f"http://127.0.0.1:{line.split()[1]}"


async def _json(http: aiohttp.ClientSession, method: str, url: str, key: str | None = None, body: Any = None) -> Any:
    headers = bearer(key) if key else {}
    async with http.request(method, url, json=body, headers=headers) as resp:
        if resp.status >= 300:
            raise BenchFailure(f"{method} {url} -> {resp.status}: {await resp.text()}")
        return await resp.json() if resp.status != 204 else None


async def _latency(node: str, rx: str, poster: str, pushed: str, pushed_id: str, pollers: list[str],
                   poller_ids: list[str], posts: int) -> tuple[list[float], list[float]]:  # fmt: skip
    """Requests directed to the pushed agent and to every poller, one a second: seconds from each post's start to
    the receiver's handler, and to the first poll (at the active profile) that leases it."""
    posted: dict[int, float] = {}
    seen_by_poll: list[float] = []
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        await _json(http, "POST", node + "/v1/push/endpoints", pushed, {"url": rx + "/latency", "tiers": [1]})

        async def poller(key: str) -> None:
            rng = random.Random(key)
            await asyncio.sleep(rng.uniform(*ACTIVE))  # the pollers do not start in step
            while not stop.is_set():
                page = await _json(http, "GET", node + "/v1/inbox?limit=50", key)
                now = time.time()
                ids = [n["notification_id"] for n in page["notifications"]]
                seen_by_poll.extend(
                    now - posted[n["entry_id"]] for n in page["notifications"] if n["entry_id"] in posted
                )
                if ids:
                    await _json(http, "POST", node + "/v1/inbox/ack", key, {"ids": ids})
                await asyncio.sleep(rng.uniform(*ACTIVE))

        tasks = [asyncio.create_task(poller(k)) for k in pollers]
        for i in range(posts):
            body = {"entry_type": "question", "performative": "request", "content": f"latency probe {i}",
                    "directed_to": [pushed_id, *poller_ids]}  # fmt: skip
            started = time.time()
            entry = await _json(http, "POST", node + "/v1/entries", poster, body)
            posted[entry["id"]] = started
            await asyncio.sleep(1.0)
        await asyncio.sleep(ACTIVE[1] + 1)  # every poller polls once more after the last post
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        received = await _json(http, "GET", rx + "/received")
    by_push = [
        r["at"] - posted[n["entry_id"]]
        for r in received
        if r["path"] == "/latency"
        for n in r["payload"]["notifications"]
        if n["entry_id"] in posted
    ]
    return by_push, seen_by_poll


async def _register_many(node: str, rx: str, agents: list[str]) -> list[int]:
    async with aiohttp.ClientSession() as http:
        return [
            (await _json(http, "POST", node + "/v1/push/endpoints", key, {"url": f"{rx}/a{i}", "tiers": [1, 2]}))["id"]
            for i, key in enumerate(agents)
        ]


async def _delete_many(node: str, agents: list[str], ids: list[int]) -> None:
    async with aiohttp.ClientSession() as http:
        for key, endpoint_id in zip(agents, ids, strict=True):
            await _json(http, "DELETE", f"{node}/v1/push/endpoints/{endpoint_id}", key)


async def _stats(rx: str) -> dict[str, int]:
    async with aiohttp.ClientSession() as http:
        result: dict[str, int] = await _json(http, "GET", rx + "/stats")
        return result


def _ingest_lanes(writers: list[str], per_lane: int, tag: str, offset: int) -> list[list[Call]]:
    return [
        [
            Call(
                "POST",
                "/v1/entries",
                bearer(key),
                json.dumps(
                    {
                        "entry_type": "finding",
                        "performative": "inform",
                        "content": f"ingest {offset} {w} {j}",
                        "tags": [tag],
                    }
                ).encode(),
            )
            for j in range(per_lane)
        ]
        for w, key in enumerate(writers)
    ]


def run(ctx: Context) -> None:
    """The two push figures, each against its baseline measured in the same run."""
    quick = ctx.quick
    data, _ = corpus.fresh_data_dir(ctx.workdir, "push")
    node_id = key_files.load_key(DataDir(data).key_path).did
    poster = corpus.register_agents(data, 1, keep_key=True, prefix="poster")[0]
    pushed = corpus.register_agents(data, 1, keep_key=True, prefix="pushed")[0]
    pollers = corpus.register_agents(data, 4 if quick else 20, keep_key=True, prefix="poller")
    listeners = corpus.register_agents(data, 10 if quick else 100, keep_key=True, prefix="listener")
    writers = corpus.register_agents(data, min(ctx.sizes.clients, 16), keep_key=True, prefix="writer")
    posts = 3 if quick else 20
    per_lane = max(4, ctx.sizes.ingest_posts // len(writers) // 2)
    tag = "pushed-tag"
    rx_proc, rx = start_receiver(node_id)
    try:
        with Server(data) as server:
            by_push, by_poll = asyncio.run(
                _latency(
                    server.url,
                    rx,
                    poster[1],
                    pushed[1],
                    pushed[0].did,
                    [k for _, k in pollers],
                    [k.did for k, _ in pollers],
                    posts,
                )
            )
            subs = [[Call("POST", "/v1/subscriptions", bearer(k), json.dumps({"tags": [tag]}).encode())]
                    for _, k in listeners]  # fmt: skip
            asyncio.run(run_load(server.url, subs))
            asyncio.run(run_load(server.url, [[Call("GET", "/v1/subscriptions", bearer(k))] for _, k in writers]))
            plain = asyncio.run(run_load(server.url, _ingest_lanes([k for _, k in writers], per_lane, tag, 0)))
            listener_keys = [k for _, k in listeners]
            endpoint_ids = asyncio.run(_register_many(server.url, rx, listener_keys))
            before = asyncio.run(_stats(rx))
            started = time.perf_counter()
            pushing = asyncio.run(run_load(server.url, _ingest_lanes([k for _, k in writers], per_lane, tag, 1)))
            expected = before["notifications"] + pushing.count * len(listeners)
            after = before
            for _ in range(600):  # until every notification of the run is pushed (listed or counted), or 60 s
                after = asyncio.run(_stats(rx))
                if after["notifications"] >= expected:
                    break
                time.sleep(0.1)
            drained = time.perf_counter() - started
            asyncio.run(_delete_many(server.url, listener_keys, endpoint_ids))
            # the same ingest again without endpoints: the log and notifications have grown, so the baseline is the
            # mean of the runs before and after
            plain_after = asyncio.run(run_load(server.url, _ingest_lanes([k for _, k in writers], per_lane, tag, 2)))
    finally:
        stop_process(rx_proc)  # type: ignore[arg-type]
    add = ctx.report.add
    p50, p99 = percentile(by_push, 50), percentile(by_push, 99)
    b50, b99 = percentile(by_poll, 50), percentile(by_poll, 99)
    add(Row(BENCH, f"tier-1 request to the agent's handler p50 / p99 ({posts} posts)", f"{ms(p50)} / {ms(p99)}",
            f"{ms(b50)} / {ms(b99)}", ratio(p99, b99), "p99 under 1 s", p99 < 1.0,
            f"post start -> the receiver process's handler (NLIP push, signed, one endpoint); baseline: post start ->"
            f" the first inbox poll that leases it, {len(pollers)} agents polling every U{ACTIVE} s (the seed's"
            " active profile), same posts, same run; ratio of p99"))  # fmt: skip
    messages = after["messages"] - before["messages"]
    notes = after["notifications"] - before["notifications"]
    add(Row(BENCH, f"push messages/s to {len(listeners)} endpoints (one receiver process) while ingest runs",
            rate(messages / drained), f"{rate(notes / drained)} notifications", None, "reported", None,
            f"{pushing.count} posts by {len(writers)} clients, each notifying all {len(listeners)} subscribed agents"
            f" (tier 2, pushed): messages the receiver accepted / seconds from the ingest's start until all"
            f" {notes:,} notifications arrived (listed or counted); coalescing: {notes / max(messages, 1):.1f}"
            " notifications per message"))  # fmt: skip
    baseline = (plain.per_second + plain_after.per_second) / 2
    add(Row(BENCH, f"ingest rate with {len(listeners)} push endpoints", rate(pushing.per_second),
            rate(baseline), ratio(pushing.per_second, baseline), ">= 0.5", pushing.per_second >= 0.5 * baseline,
            f"POST /v1/entries, {len(writers)} clients x {per_lane}, each matching {len(listeners)} subscriptions;"
            f" baseline: the mean of the same ingest just before ({rate(plain.per_second)}) and just after"
            f" ({rate(plain_after.per_second)}) with the same subscriptions and no push endpoint"))  # fmt: skip
