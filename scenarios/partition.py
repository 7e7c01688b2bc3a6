"""Scenario: partitions and crashes. Three `bbs serve` nodes in a line (A - B - C); the B - C link runs
through a relay that is cut while both sides keep writing, then restored; node A is killed (SIGKILL) in
the middle of catching up on a large backlog and restarted. After healing every node holds the identical
set of records, checked by the digest of sorted versions.

Run: python -m scenarios.partition   (exit status 0 on success, 1 on failure)
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import aiohttp

from scenarios.fednet import Link, ScenarioFailed, ServedNode, converged, run_scenario, wait_until


async def write_many(
    session: aiohttp.ClientSession, node: ServedNode, agent: dict[str, str], tag: str, n: int
) -> list[str]:
    return [await node.post(session, agent, f"{tag} {i}", tags=[tag]) for i in range(n)]


async def run(root: Path) -> None:
    nodes = [ServedNode(name, root / name) for name in ("a", "b", "c")]
    a, b, c = nodes
    async with aiohttp.ClientSession() as session:
        links: list[Link] = []
        try:
            for n in nodes:
                n.init()
                await n.start(session)
            b_to_c, c_to_b = Link(c.port), Link(b.port)
            links = [b_to_c, c_to_b]
            for link in links:
                await link.start()
            await a.peer(session, b)
            await b.peer(session, a)
            await b.peer(session, c, via=b_to_c.url)
            await c.peer(session, b, via=c_to_b.url)
            wa, wb, wc = [await n.agent(session, f"w-{n.name}") for n in nodes]
            await write_many(session, b, wb, "warmup", 5)
            await wait_until(lambda: converged(session, nodes), 60, "warm-up convergence")

            # 1. Cut B - C while both sides keep writing.
            b_to_c.cut()
            c_to_b.cut()
            print("link B - C cut")
            left = await write_many(session, b, wb, "during-cut-b", 20)
            right = await write_many(session, c, wc, "during-cut-c", 20)
            await asyncio.sleep(1.0)
            if await c.has(session, left[-1]) or await b.has(session, right[-1]):
                raise ScenarioFailed("records crossed a cut link")
            b_to_c.restore()
            c_to_b.restore()
            took = await wait_until(lambda: converged(session, nodes), 90, "convergence after the cut")
            print(f"link restored; converged in {took:.2f}s")

            # 2. Kill A mid-sync: give B a large backlog, start A pulling it, SIGKILL A part-way, restart.
            a.kill()
            backlog = await write_many(session, b, wb, "backlog", 600)
            backlog += await write_many(session, c, wc, "backlog-c", 100)
            await a.start(session)

            async def partly() -> bool:
                count, _ = await a.digest(session)
                return count > 20

            await wait_until(partly, 60, "A to start catching up")
            a.kill()
            print("A killed (SIGKILL) mid catch-up")
            await write_many(session, c, wc, "while-a-down", 10)
            await a.start(session)
            await write_many(session, a, wa, "a-after-restart", 10)
            took = await wait_until(lambda: converged(session, nodes), 120, "convergence after the restart")
            print(f"A restarted; converged in {took:.2f}s")
            digests = {n.name: await n.digest(session) for n in nodes}
            if len(set(digests.values())) != 1:
                raise ScenarioFailed(f"digests differ: {digests}")
            count, sha = digests["a"]
            expected_min = 5 + 40 + len(backlog) + 10 + 10
            if count < expected_min:
                raise ScenarioFailed(f"only {count} records, expected at least {expected_min}")
            for n in nodes:
                dupes = await n.call(session, "GET", "/v1/peers")
                for p in dupes["peers"]:
                    if p["counters"]["invalid"]:
                        raise ScenarioFailed(f"{n.name} counted invalid records from {p['node_id']}: {p}")
            print(f"every node holds {count} federated records, digest {sha}")
        finally:
            for n in nodes:
                n.kill()
            for link in links:
                await link.close()


def main() -> int:
    return run_scenario("partition", run)


if __name__ == "__main__":
    sys.exit(main())
