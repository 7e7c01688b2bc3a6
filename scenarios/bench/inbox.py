"""Inbox poll with many agents holding subscriptions, and the fan-out cost per matching subscription."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

from node.inbox import notify
from node.ops.datadir import DataDir
from node.service import Node
from scenarios.bench import corpus
from scenarios.bench.context import Context
from scenarios.bench.harness import Call, Server, bearer, run_load
from scenarios.bench.report import Row, ms, percentile, ratio
from wire.api import MAX_BATCH, PostEntry, SubscriptionIn

BENCH = "inbox"
GROUPS = 50
BROADCAST = "broadcast"
BACKLOG_TAG = "backlog"
PAGE = 50


async def _setup(
    data: Path, agent_ids: list[str], poster: str, entries: int, probes: int, backlog: tuple[str, int]
) -> dict[str, list[float]]:
    """Subscriptions for every agent, entries that fill inboxes, a backlog for one more agent, and timed posts
    by match count."""
    node = Node(data)
    node.open()
    try:
        subs = [node.inbox.subscribe(backlog[0], SubscriptionIn(tags=[BACKLOG_TAG]))]
        for i, agent in enumerate(agent_ids):
            subs.append(node.inbox.subscribe(agent, SubscriptionIn(tags=[BROADCAST])))
            subs.append(node.inbox.subscribe(agent, SubscriptionIn(tags=[f"group{i % GROUPS}"])))
        await asyncio.gather(*subs)
        for start in range(0, backlog[1], MAX_BATCH):
            bodies = [
                PostEntry(entry_type="finding", performative="inform", content=f"backlog {j}", tags=[BACKLOG_TAG])
                for j in range(start, min(start + MAX_BATCH, backlog[1]))
            ]
            await node.entries.post_batch(poster, list(bodies))
        posts = []
        for j in range(entries):
            tags = [f"group{j % GROUPS}"] + ([BROADCAST] if j % 10 == 0 else [])
            body = PostEntry(entry_type="finding", performative="inform", content=f"inbox filler {j}", tags=tags)
            posts.append(node.entries.post(poster, body, None))
        await asyncio.gather(*posts)
        timings: dict[str, list[float]] = {"none": [], "group": [], "broadcast": []}
        for k in range(probes):
            for label, tags in (("none", ["nobody"]), ("group", ["group0"]), ("broadcast", [BROADCAST])):
                body = PostEntry(entry_type="finding", performative="inform", content=f"probe {label} {k}", tags=tags)
                started = time.perf_counter()
                await node.entries.post(poster, body, None)
                timings[label].append(time.perf_counter() - started)
        return timings
    finally:
        node.close()


def direct_take(db_path: Path, agent_ids: list[str]) -> list[float]:
    """The inbox statements run directly with sqlite3 per agent, each in a rolled-back write transaction."""
    conn = sqlite3.connect(str(db_path), isolation_level=None)
    conn.row_factory = sqlite3.Row
    now = int(time.time() * 1000)
    lat = []
    for agent in agent_ids:
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        notify.take_inbox(conn, agent, limit=50, since_ms=None, mark_delivered=False, now_ms=now)
        conn.execute("ROLLBACK")
        lat.append(time.perf_counter() - started)
    conn.close()
    return lat


def run(ctx: Context) -> None:
    """p50/p99 of GET /v1/inbox for every agent (sequential), and the per-subscription fan-out cost."""
    n_agents = ctx.sizes.inbox_agents
    data, _ = corpus.fresh_data_dir(ctx.workdir, "inbox")
    agents = corpus.register_agents(data, n_agents, keep_key=True, prefix="listener")
    poster = corpus.register_agents(data, 1, keep_key=True, prefix="poster")[0][0].did
    agent_ids = [key.did for key, _ in agents]
    behind_key, behind = corpus.register_agents(data, 1, keep_key=True, prefix="behind")[0]
    probes = 5 if ctx.quick else 20
    backlog = ctx.sizes.inbox_backlog
    timings = asyncio.run(_setup(data, agent_ids, poster, ctx.sizes.inbox_entries, probes, (behind_key.did, backlog)))
    base = direct_take(DataDir(data).db_path, agent_ids)
    calls = [Call("GET", f"/v1/inbox?limit={PAGE}", bearer(api_key)) for _, api_key in agents]
    polls = max(1, min(ctx.sizes.queries, backlog // (2 * PAGE)))  # the backlog stays above half its size
    with Server(data) as server:
        result = asyncio.run(run_load(server.url, [calls]))
        empty = asyncio.run(run_load(server.url, [calls]))  # everything is leased now: nothing to hand out
        behind_call = Call("GET", f"/v1/inbox?limit={PAGE}", bearer(behind))
        behind_result = asyncio.run(run_load(server.url, [[behind_call] * polls]))
    p99, base99 = percentile(result.latencies, 99), percentile(base, 99)
    add = ctx.report.add
    broadcast_share = (ctx.sizes.inbox_entries + 9) // 10
    per_agent = broadcast_share + sum(1 for j in range(ctx.sizes.inbox_entries) if j % GROUPS == 0)
    add(
        Row(
            BENCH,
            f"inbox poll p50 / p99 ({n_agents:,} agents, 2 subscriptions each, ~{per_agent} pending each)",
            f"{ms(percentile(result.latencies, 50))} / {ms(p99)}",
            f"{ms(percentile(base, 50))} / {ms(base99)}",
            ratio(p99, base99),
            "reported",
            None,
            "GET /v1/inbox?limit=50 once per agent, sequential, real `bbs serve`; baseline: notify.take_inbox's"
            " statements on the file with sqlite3 (rolled back); ratio of p99",
        )
    )
    add(
        Row(
            BENCH,
            f"inbox poll p50 / p99 of an empty inbox ({n_agents:,} agents)",
            f"{ms(percentile(empty.latencies, 50))} / {ms(percentile(empty.latencies, 99))}",
            f"{ms(percentile(result.latencies, 50))} / {ms(p99)}",
            ratio(percentile(empty.latencies, 99), p99),
            "reported",
            None,
            "the same polls again right after, when every agent's notifications are leased: answered by a read,"
            " without the writer; baseline: the polls above; ratio of p99",
        )
    )
    behind50, behind99 = percentile(behind_result.latencies, 50), percentile(behind_result.latencies, 99)
    add(
        Row(
            BENCH,
            f"inbox poll p50 / p99 with a backlog ({backlog:,} pending for one agent)",
            f"{ms(behind50)} / {ms(behind99)}",
            f"{ms(percentile(result.latencies, 50))} / {ms(p99)}",
            ratio(behind99, p99),
            "reported",
            None,
            f"GET /v1/inbox?limit={PAGE} {polls} times by one agent, sequential, each leasing {PAGE} of its backlog;"
            f" baseline: the polls above (~{per_agent} pending each); ratio of p99 (near 1: a poll's cost does not"
            " grow with the backlog)",
        )
    )
    none, group, broadcast = (percentile(timings[k], 50) for k in ("none", "group", "broadcast"))
    per_sub = (broadcast - none) / max(n_agents, 1)
    add(
        Row(
            BENCH,
            "fan-out cost per matching subscription",
            ms(per_sub),
            f"post matching none: {ms(none)}",
            None,
            "reported",
            None,
            f"p50 of Entries.post (in-process, {probes} probes) matching {n_agents:,} subscriptions"
            f" ({ms(broadcast)}) minus matching none ({ms(none)}), / {n_agents:,}; baseline: a post matching none;"
            f" {n_agents // GROUPS} matches: {ms(group)}",
        )
    )
