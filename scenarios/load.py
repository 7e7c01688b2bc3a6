"""Load: N simulated agents post, search, poll their inboxes and lease tasks against one `bbs serve` for T
seconds. Every answer must be a success; the run reports p50/p99 latency per operation.

    python -m scenarios.load [--agents 200] [--seconds 60]   # the long form (figures in docs/performance.md)
    tests/hardening/test_load.py                             # the CI form (20 agents, 5 s)

Each agent runs one operation at a time (a closed loop), picking post 40%, search 25%, inbox poll 20% and a
task cycle (declare, lease, complete) 15%. Each agent first subscribes to one of ten topic tags and every
post carries one of them, so a post notifies about a tenth of the agents and inbox polls (which lease what
they return) acknowledge real notifications.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from scenarios.fednet import ScenarioFailed, ServedNode

WORDS = [
    "consensus", "ledger", "latency", "shard", "replica", "quorum", "lease", "inbox", "search", "graph",
]  # fmt: skip
WF = "/v1/agent-workflows"
TOPICS = 10  # agents subscribe to one of ten tags; each post notifies about a tenth of the agents


@dataclass
class LoadReport:
    """Latencies (seconds) per operation, and every error."""

    agents: int
    seconds: float
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: list[str] = field(default_factory=list)

    def percentile(self, op: str, q: float) -> float:
        values = sorted(self.latencies[op])
        return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")

    def table(self) -> str:
        lines = ["| operation | requests | per second | p50 ms | p99 ms |", "|---|---|---|---|---|"]
        for op in sorted(self.latencies):
            n = len(self.latencies[op])
            lines.append(
                f"| {op} | {n} | {n / self.seconds:.0f} | {self.percentile(op, 0.5) * 1000:.1f} | "
                f"{self.percentile(op, 0.99) * 1000:.1f} |"
            )
        return "\n".join(lines)


class Agent:
    def __init__(self, session: aiohttp.ClientSession, url: str, headers: dict[str, str], n: int, report: LoadReport):
        self.session, self.url, self.headers, self.n, self.report = session, url, headers, n, report
        self.count = 0

    async def call(self, op: str, method: str, path: str, body: Any = None) -> Any:
        start = time.perf_counter()
        try:
            async with self.session.request(method, self.url + path, json=body, headers=self.headers) as resp:
                data = await resp.json(content_type=None)
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.report.errors.append(f"{op}: {type(exc).__name__}: {exc}")
            return None
        self.report.latencies[op].append(time.perf_counter() - start)
        if status >= 300:
            self.report.errors.append(f"{op} {method} {path}: {status} {data}")
            return None
        return data

    async def post(self) -> None:
        self.count += 1
        words = " ".join(random.sample(WORDS, 4))
        body = {"entry_type": "finding", "performative": "inform", "content": f"{words} {self.n}.{self.count}",
                "tags": [f"topic-{random.randrange(TOPICS)}"]}  # fmt: skip
        await self.call("post", "POST", "/v1/entries", body)

    async def search(self) -> None:
        await self.call("search", "GET", f"/v1/search?q={random.choice(WORDS)}&limit=20")

    async def inbox(self) -> None:
        got = await self.call("inbox", "GET", "/v1/inbox?limit=20")
        ids = [n["notification_id"] for n in (got or {}).get("notifications", [])]
        if ids:
            await self.call("ack", "POST", "/v1/inbox/ack", {"ids": ids})

    async def task(self) -> None:
        self.count += 1
        key = f"load-{self.n}-{self.count}"
        task = await self.call("task_declare", "POST", f"{WF}/tasks", {"key": key, "title": key})
        if task is None:
            return
        leased = await self.call("task_lease", "POST", f"{WF}/tasks/{task['id']}/lease", {})
        if leased is not None:
            token = {"lease": leased["lease"]["lease_id"]}  # the fencing token
            await self.call("task_complete", "POST", f"{WF}/tasks/{task['id']}/complete", token)

    async def run(self, until: float) -> None:
        await self.call("subscribe", "POST", "/v1/subscriptions", {"tags": [f"topic-{self.n % TOPICS}"]})
        ops = [self.post] * 8 + [self.search] * 5 + [self.inbox] * 4 + [self.task] * 3
        while time.monotonic() < until:
            await random.choice(ops)()


async def run(root: Path, agents: int, seconds: float) -> LoadReport:
    """Serve a node from `root` and drive it with `agents` agents for `seconds`; raise on any error."""
    node = ServedNode("loaded", root / "loaded")
    node.init()
    report = LoadReport(agents, seconds)
    connector = aiohttp.TCPConnector(limit=agents)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        await node.start(session)
        try:
            creds = await asyncio.gather(*(node.agent(session, f"load{i}") for i in range(agents)))
            workers = [Agent(session, node.url, {"Authorization": c["Authorization"]}, i, report)
                       for i, c in enumerate(creds)]  # fmt: skip
            until = time.monotonic() + seconds
            await asyncio.gather(*(w.run(until) for w in workers))
            if node.proc is None or node.proc.poll() is not None:
                raise ScenarioFailed("the node exited under load")
        finally:
            node.kill()
    if report.errors:
        raise ScenarioFailed(f"{len(report.errors)} errors, e.g.:\n" + "\n".join(report.errors[:10]))
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bbs-load-") as tmp:
        try:
            report = asyncio.run(run(Path(tmp), args.agents, args.seconds))
        except ScenarioFailed as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
    total = sum(len(v) for v in report.latencies.values())
    print(f"{args.agents} agents, {args.seconds:g} s: {total} requests, 0 errors")
    print(report.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
