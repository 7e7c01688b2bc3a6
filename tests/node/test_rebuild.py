"""`bbs rebuild`: projections are derived data. Rebuilding from the log reproduces them exactly."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from node.app import create_app
from node.ops.datadir import DataDir
from node.service import Node
from node.store import db
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import entry_record, get_json, hash_of, link, post, self_signer

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def bbs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args], capture_output=True, text=True, timeout=120, check=False
    )


async def everything(client: TestClient, who: AgentCreds, ids: list[int]) -> list[Any]:
    """What clients see: each entry with its full neighbourhood, and a few searches (`fresh`: the search index
    covers every entry, though it follows the log a moment behind)."""
    seen: list[Any] = []
    for entry_id in ids:
        seen.append(await get_json(client, f"/v1/entries/{entry_id}", who, params={"hops": "3"}))
    for params in [{"q": "entry"}, {"tags": "t1"}, {"q": "retracted claim"}, {"author": who.agent_id}]:
        seen.append(await get_json(client, "/v1/search", who, params={**params, "limit": "200", "fresh": "true"}))
    return seen


def without_caches(value: Any) -> Any:
    """Drop community_confidence: a trust cache refreshed in the background, not a projection of the log."""
    if isinstance(value, dict):
        return {k: without_caches(v) for k, v in value.items() if k != "community_confidence"}
    if isinstance(value, list):
        return [without_caches(v) for v in value]
    return value


async def test_rebuild_reproduces_projections(
    aiohttp_client: Callable[..., Awaitable[TestClient]],
    client: TestClient,
    make_agent: MakeAgent,
    node: Node,
    clock: FakeClock,
    data_dir: tuple[Path, str],
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    carol = await self_signer(node, "carol")
    ids: list[int] = []
    for i in range(6):
        e = await post(client, alice if i % 2 else bob, content=f"entry {i}", tags=[f"t{i % 3}"], confidence=i / 10)
        ids.append(e["id"])
        clock.advance(1)
    old = await post(client, alice, content="a retracted claim")
    retract = await post(
        client,
        alice,
        performative="retract",
        content="withdrawn",
        links=[{"target": old["record_hash"], "link_type": "supersedes"}],
    )
    # a retraction stored in one run with an entry that links: the run's links are numbered as a replay does
    old2 = await post(client, alice, content="another claim to withdraw")
    beside = [
        {"entry_type": "finding", "performative": "retract", "content": "withdrawn too",
         "links": [{"target": old2["record_hash"], "link_type": "supersedes"}]},
        {"entry_type": "finding", "performative": "inform", "content": "entry beside a retraction",
         "links": [{"target": str(ids[0]), "link_type": "supports"}]},
    ]  # fmt: skip
    resp = await client.post("/v1/entries/batch", json={"entries": beside}, headers=alice.headers)
    assert resp.status == 201
    batched = [r["entry"]["id"] for r in (await resp.json())["results"]]
    future = entry_record(carol.key, "carol arrives late", created_ms=node.now_ms())
    pending = await post(
        client,
        bob,
        content="entry citing carol before she posts",
        directed_to=[alice.agent_id],
        links=[{"target": hash_of(future), "link_type": "supports"}],
    )
    await link(client, alice, source=str(ids[1]), target=str(ids[0]), link_type="contradicts", annotation="no")
    await link(client, bob, source=str(ids[2]), target=str(ids[1]), link_type="supports")
    resp = await client.post("/v1/entries", json={"record": future}, headers=carol.headers)
    assert resp.status == 201
    arrived = await resp.json()
    ids += [old["id"], retract["id"], pending["id"], arrived["id"], old2["id"], *batched]
    before = await everything(client, alice, ids)
    assert before[ids.index(old["id"])]["entries"][0]["retracted"] is True
    node.close()

    path = data_dir[0]
    result = bbs("rebuild", "--data", str(path))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # the result alone on stdout; progress on stderr, as plain lines off a TTY
    assert f"replaying the log: {report['records_replayed']}/{report['records_replayed']} (100%)" in result.stderr
    assert report == {
        "records_replayed": report["records_replayed"],
        "projections_matched_log": True,
        "search_index_entries": report["search_index_entries"],
        "search_index": "ok",
    }
    conn = db.connect_store(DataDir(path).store)  # the node's database on its engine (SQLite or PostgreSQL)
    try:
        assert report["search_index_entries"] == conn.execute("SELECT count(*) FROM entries").fetchone()[0]
    finally:
        conn.close()
    assert report["records_replayed"] >= len(ids) + 3 + 2  # entries, agents, link records

    # Damage the projections by hand: rebuild notices, repairs, and a second rebuild finds them equal.
    conn = db.connect_store(DataDir(path).store)
    try:
        conn.execute("BEGIN")
        conn.execute("DELETE FROM entry_tags WHERE tag = 't1'")
        conn.execute("DELETE FROM links WHERE link_type = 'retracted_by'")
        conn.execute("COMMIT")
    finally:
        conn.close()
    damaged = bbs("rebuild", "--data", str(path))
    assert damaged.returncode == 1 and json.loads(damaged.stdout)["projections_matched_log"] is False
    again = bbs("rebuild", "--data", str(path))
    assert again.returncode == 0 and json.loads(again.stdout)["projections_matched_log"] is True

    reopened = Node(path, clock=clock)
    reopened.open()
    try:
        client2 = await aiohttp_client(create_app(reopened))
        assert without_caches(await everything(client2, alice, ids)) == without_caches(before)
        # the FTS index was rebuilt too: full-text search still finds every entry
        body = await get_json(client2, "/v1/search", alice, params={"q": "entry", "limit": "200"})
        assert len(body["entries"]) == 8
    finally:
        reopened.close()
