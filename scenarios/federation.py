"""Scenario: three `bbs serve` nodes in a line (A - B - C). Writes on each end and in the middle converge on
every node, a record crosses the line in about a second, links across nodes resolve, scope:local stays home, and
every node holds the same federated records, bodies byte for byte (read from each node's database).

With `--postgresql` the middle node B keeps its database on a throwaway PostgreSQL cluster (`bbs serve --store
postgresql://...`), peered both ways with the SQLite nodes A and C: every record that crosses the line goes
through it, in and out (docs/decisions.md record 80).

Run: python -m scenarios.federation [--postgresql]   (exit status 0 on success, 1 on failure)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import aiohttp

from scenarios.fednet import (
    ScenarioFailed,
    ServedNode,
    bbs,
    converged,
    postgresql_databases,
    run_scenario,
    wait_until,
)


def federated_bodies(node: ServedNode) -> dict[str, bytes]:
    """version -> signed body of every federated record in `node`'s log, read from its database (either engine)."""
    rows = node.read("SELECT version, body FROM records WHERE scope = 'federation'")
    return {str(version): bytes(body) for version, body in rows}


def same_records(nodes: list[ServedNode]) -> None:
    """Every federated record held by one node is held by every other, its body byte for byte."""
    held = {n.name: federated_bodies(n) for n in nodes}
    first, *others = nodes
    for other in others:
        mine, theirs = held[first.name], held[other.name]
        if mine.keys() != theirs.keys():
            only = sorted(mine.keys() ^ theirs.keys())
            raise ScenarioFailed(f"{first.name} and {other.name} hold different records: {len(only)}, e.g. {only[:3]}")
        differ = sorted(v for v in mine if mine[v] != theirs[v])
        if differ:
            raise ScenarioFailed(f"{first.name} and {other.name} hold different bodies of {differ[:3]}")
    print(f"every node holds the same {len(held[first.name])} federated records, bodies byte for byte")


async def run(root: Path, store_b: str = "") -> None:
    """The line A - B - C in `root`; B's database at the PostgreSQL URL `store_b` when given."""
    nodes = [ServedNode(name, root / name, store=store_b if name == "b" else "") for name in ("a", "b", "c")]
    a, b, c = nodes
    async with aiohttp.ClientSession() as session:
        try:
            for n in nodes:
                n.init()
                await n.start(session)
            # The line: A <-> B <-> C. A and C never talk directly.
            await a.peer(session, b)
            await b.peer(session, a)
            bbs("peer", "add", c.url, "--key", c.node_id, "--data", str(b.data))  # CLI, on a running node
            await c.peer(session, b)
            wa, wb, wc = [await n.agent(session, f"writer-{n.name}") for n in nodes]
            left = [await a.post(session, wa, f"A writes {i}", tags=["federation"]) for i in range(10)]
            right = [await c.post(session, wc, f"C writes {i}", tags=["federation"]) for i in range(10)]
            middle = await b.post(session, wb, "B writes in the middle")
            private = await a.post(session, wa, "A keeps this to itself", scope="local")
            took = await wait_until(lambda: converged(session, nodes), 60, "three nodes to converge")
            print(f"converged after the first writes in {took:.2f}s")

            # Latency: one record from one end to the other, through B.
            probe = await a.post(session, wa, "latency probe")
            seconds = await wait_until(lambda: c.has(session, probe), 30, "the probe to reach C")
            print(f"A -> B -> C latency: {seconds:.2f}s")

            # A link across nodes: C answers A's entry; both the entry link and a link record resolve on A.
            reply = await c.post(
                session, wc, "C supports A's first finding", links=[{"target": left[0], "link_type": "supports"}]
            )
            await c.call(
                session,
                "POST",
                "/v1/links",
                {"source": right[0], "target": left[1], "link_type": "derived_from"},
                headers=wc,
            )
            await wait_until(lambda: converged(session, nodes), 30, "links to converge")
            around = await a.call(session, "GET", f"/v1/entries/{left[0]}?hops=1&direction=both")
            linked = {e["record_hash"] for e in around["entries"]}
            if reply not in linked:
                raise ScenarioFailed("C's entry linking to A's entry is not connected on A")
            around = await a.call(session, "GET", f"/v1/entries/{right[0]}?hops=1&direction=both")
            if left[1] not in {e["record_hash"] for e in around["entries"]}:
                raise ScenarioFailed("C's link record between C's and A's entries does not resolve on A")

            # Everything written anywhere is everywhere, except the local entry.
            for n in nodes:
                for h in [*left, *right, middle, probe, reply]:
                    if not await n.has(session, h):
                        raise ScenarioFailed(f"{n.name} lacks {h}")
            for n in (b, c):
                if await n.has(session, private):
                    raise ScenarioFailed(f"the scope:local entry leaked to {n.name}")
            peers = await b.call(session, "GET", "/v1/peers")
            for p in peers["peers"]:
                counters = p["counters"]
                if counters["invalid"] or p["last_error"]:
                    raise ScenarioFailed(f"unexpected peer state on B: {p}")
            count, sha = await a.digest(session)
            print(f"all three nodes hold {count} federated records, digest {sha}")
            same_records(nodes)
            print(bbs("peers", "--data", str(b.data)), end="")
        finally:
            for n in nodes:
                n.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgresql", action="store_true", help="B's database on a throwaway PostgreSQL cluster")
    if not parser.parse_args().postgresql:
        return run_scenario("federation", run)
    with postgresql_databases() as new_database:
        return run_scenario("federation", lambda root: run(root, store_b=new_database()))


if __name__ == "__main__":
    sys.exit(main())
