"""One body per address across real `bbs serve` processes (issue 23): an author signs two versions of one address
(tags differ) and a local/federation pair of another, and posts them to different nodes of a chain A - B - C.
Digests converge, every node shows the same winner and agrees on `equivocated` (the local twin is flagged only
where it lives), search agrees, and once converged the peer counters stop moving (nothing is re-fetched)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent import identity_file
from identity import canonical, records
from scenarios.fednet import ServedNode, bbs, converged, wait_until
from tests.node.api_helpers import entry_record

pytestmark = pytest.mark.slow


async def submit(session: aiohttp.ClientSession, node: ServedNode, api_key: str, record: dict[str, Any]) -> None:
    headers = {"Authorization": f"Bearer {api_key}"}
    async with session.post(node.url + "/v1/entries", json={"record": record}, headers=headers) as resp:
        assert resp.status == 201, await resp.text()


async def entry(session: aiohttp.ClientSession, node: ServedNode, address: str) -> dict[str, Any]:
    found: dict[str, Any] = await node.call(session, "GET", f"/v1/entries/{address}")
    return dict(found["entries"][0])


async def test_versions_posted_to_different_nodes_converge(tmp_path: Path) -> None:
    nodes = [ServedNode(name, tmp_path / name) for name in ("a", "b", "c")]
    for node in nodes:
        node.init()
    a, b, c = nodes
    created = json.loads(bbs("agent", "create", "eve", "--data", str(a.data), "--json"))
    ident_path = tmp_path / "eve.identity"
    bbs("agent", "export", "eve", "--data", str(a.data), "--out", str(ident_path))
    api_keys = {"a": created["api_key"]}
    for node in (b, c):
        imported = json.loads(bbs("agent", "import", str(ident_path), "--data", str(node.data), "--json"))
        api_keys[node.name] = imported["api_key"]
    key = identity_file.load(ident_path).key
    async with aiohttp.ClientSession() as session:
        try:
            for node in nodes:
                await node.start(session)
            for x, y in ((a, b), (b, a), (b, c), (c, b)):
                await x.peer(session, y)
            now = 1_767_323_045_000
            tagged = [
                entry_record(key, "one claim, two bodies", created_ms=now, tags=[t]) for t in ("from-a", "from-c")
            ]
            local = entry_record(key, "scoped twice", created_ms=now, scope="local", tags=["mine"])
            shared = entry_record(key, "scoped twice", created_ms=now, tags=["ours"])
            await submit(session, a, api_keys["a"], tagged[0])
            await submit(session, c, api_keys["c"], tagged[1])
            await submit(session, b, api_keys["b"], local)
            await submit(session, a, api_keys["a"], shared)
            await wait_until(lambda: converged(session, nodes), 60, "digests to converge")
            claim, scoped = records.compute_hash(tagged[0]), records.compute_hash(shared)
            winner = min(tagged, key=lambda r: canonical.sha256_hex(canonical.canonical_bytes(r)))

            async def agreed() -> bool:
                seen = [await entry(session, n, claim) for n in nodes]
                return all((e["tags"], e["equivocated"]) == (winner["tags"], True) for e in seen)

            await wait_until(agreed, 30, "every node to show the winner, equivocated")
            for node in nodes:
                e = await entry(session, node, scoped)
                assert (e["tags"], e["scope"], e["equivocated"]) == (["ours"], "federation", node is b)
                found = await node.call(session, "GET", "/v1/search?q=bodies&fresh=true")
                assert [(f["record_hash"], f["tags"]) for f in found["entries"]] == [(claim, winner["tags"])]
            before = [await node.call(session, "GET", "/v1/peers") for node in nodes]
            await asyncio.sleep(6)  # longer than the scenario's reconcile interval (5 s)
            after = [await node.call(session, "GET", "/v1/peers") for node in nodes]
            assert [[p["counters"] for p in x["peers"]] for x in after] == [
                [p["counters"] for p in x["peers"]] for x in before
            ]
            assert all(p["reconciliations"] > 0 for x in after for p in x["peers"])
            authors = (await b.call(session, "GET", "/v1/peers"))["equivocating_authors"]
            assert authors == [{"author_id": key.did, "equivocations": 2}]
        finally:
            for node in nodes:
                node.kill()
                if node.log is not None:
                    node.log.close()
