"""The operator's purge (`POST /v1/admin/purges`, `bbs purge`): a record, or every entry, link and message of an
author, removed from this node alone, no tombstone, never stored again; counted by `bbs doctor`. A real server on
loopback and a real data folder."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.cli import main
from node.features import LOG
from node.ops import doctor
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import count, entry_record, get_json, hash_of, ingest, link, post, self_signer
from tests.store_dump import dump

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
WF = "/v1/agent-workflows"


async def purge(client: TestClient, headers: dict[str, str], status: int, **body: Any) -> dict[str, Any]:
    resp = await client.post("/v1/admin/purges", json=body, headers=headers)
    data: dict[str, Any] = await resp.json(content_type=None)
    assert resp.status == status, data
    return data


async def test_a_purged_record_is_gone_without_a_tombstone_and_never_stored_again(
    client: TestClient, node: Node, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    author = await self_signer(node, "author")
    record = entry_record(author.key, "illegal words", created_ms=node.now_ms() - 5000)
    address = hash_of(record)
    assert await ingest(node, record) == "saved"
    done = await purge(client, admin_headers, 200, target=address, reason="court order")
    assert done == {"purged": [address]}
    gone = await get_json(client, f"/v1/entries/{address}", author, status=404)
    assert gone["code"] == "entry_not_found"  # no tombstone: the operator's purge is not the author's redaction
    assert await ingest(node, record) == "void"  # a peer cannot bring it back
    resp = await client.post("/v1/entries", json={"record": record}, headers=author.headers)
    assert resp.status == 409 and (await resp.json())["code"] == "purged"
    assert await purge(client, admin_headers, 200, target="e" * 64) == {"purged": []}  # nothing held: nothing done
    assert "illegal words" not in await node.db.read(dump)


async def test_bad_purges_are_refused_and_agents_may_not_purge(
    client: TestClient, node: Node, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    alice = await make_agent("alice")
    address = (await post(client, alice, content="kept"))["record_hash"]
    resp = await client.post(f"{WF}/tasks", json={"key": "t", "title": "T"}, headers=alice.headers)
    assert resp.status == 201
    task_event = await node.db.read(
        lambda c: str(c.execute("SELECT hash FROM records WHERE kind = 'task_event'").fetchone()[0])
    )
    before = await count(node)
    assert (await purge(client, admin_headers, 422))["code"] == "purge_target"
    both = await purge(client, admin_headers, 422, target=address, author=alice.agent_id)
    assert both["code"] == "purge_target"
    assert (await purge(client, admin_headers, 422, target=task_event))["code"] == "not_purgeable"
    assert (await purge(client, admin_headers, 422, author="not-a-did"))["field"] == "$.author"
    assert (await purge(client, alice.headers, 403, target=address))["code"] == "admin_required"
    assert await count(node) == before


async def test_purging_an_author_removes_its_entries_links_and_messages_in_one_command(
    client: TestClient,
    node: Node,
    make_agent: MakeAgent,
    data_dir: tuple[Path, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    spammer, bob = await make_agent("spammer"), await make_agent("bob")
    mine = [(await post(client, spammer, content=f"spam {i}"))["record_hash"] for i in range(3)]
    kept = (await post(client, bob, content="bob's note"))["record_hash"]
    linked = await link(client, spammer, source=mine[1], target=kept, link_type="supports")
    resp = await client.post(
        f"{WF}/messages", json={"message_type": "status", "body": "buy now"}, headers=spammer.headers
    )
    assert resp.status == 201
    message = (await resp.json())["record_hash"]
    node.close()  # `bbs purge` opens the folder itself (it may also run beside a serving node)
    command = ["purge", "--author", spammer.agent_id, "--reason", "spam", "--data", str(data_dir[0]), "--json"]
    assert await asyncio.to_thread(main, command) == 0  # a command line of its own (asyncio.run inside)
    purged = json.loads(capsys.readouterr().out)["purged"]
    assert sorted(purged) == sorted([*mine, linked["origin_hash"], message])
    checks = {c.name: c for c in doctor.diagnose(data_dir[0], LOG, peer_timeout=1)}
    assert checks["redactions"].detail.startswith("0 redacted (tombstones), 5 purged by the operator (1 authors)")
    assert checks["projections"].status == "ok" and checks["redactions"].status == "ok"
    aside = data_dir[0].parent / f"{data_dir[0].name}.replaced-20261205T000000Z"  # as `bbs restore --force` leaves
    aside.mkdir()
    (aside / "bbs.db").write_bytes(b"an older copy")
    checks = {c.name: c for c in doctor.diagnose(data_dir[0], LOG, peer_timeout=1)}
    assert checks["redactions"].status == "warn" and "restore-leftovers" in checks["redactions"].detail
    node.open()
    assert (await get_json(client, f"/v1/entries/{kept}", bob))["entries"]
    assert (await get_json(client, f"/v1/entries/{mine[0]}", bob, status=404))["code"] == "entry_not_found"
    assert await asyncio.to_thread(main, ["purge", "--data", str(data_dir[0])]) != 0  # neither a hash nor --author


async def test_the_operator_lists_the_purges_newest_first_and_agents_may_not(
    client: TestClient, node: Node, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    alice = await make_agent("alice")
    first = await post(client, alice, content="first to go")
    second = await post(client, alice, content="second to go")
    kept = await post(client, alice, content="redacted, not purged")
    await purge(client, admin_headers, 200, target=first["record_hash"], reason="abuse")
    node.clock.advance(1)  # type: ignore[attr-defined]
    await purge(client, admin_headers, 200, target=second["record_hash"])
    resp = await client.post("/v1/redactions", json={"target": kept["record_hash"]}, headers=alice.headers)
    assert resp.status == 201, await resp.text()
    admin = SimpleNamespace(headers=admin_headers)
    listed = await get_json(client, "/v1/admin/purges", admin)
    assert (listed["total"], listed["authors"], listed["tombstones"]) == (2, 1, 1)
    assert [p["hash"] for p in listed["purges"]] == [second["record_hash"], first["record_hash"]]
    newest, oldest = listed["purges"]
    assert (oldest["kind"], oldest["author_id"], oldest["versions"]) == ("entry", alice.agent_id, 1)
    assert oldest["reason"] == "abuse"
    assert newest["reason"] is None and "content" not in newest
    one = await get_json(client, "/v1/admin/purges", admin, params={"limit": "1"})
    assert [p["hash"] for p in one["purges"]] == [second["record_hash"]] and one["total"] == 2
    resp = await client.get("/v1/admin/purges", headers=alice.headers)
    assert resp.status == 403 and (await resp.json())["code"] == "admin_required"
    for bad in ("limit=0", "limit=501", "limit=x", "limit=1&limit=2", "after=3"):
        resp = await client.get(f"/v1/admin/purges?{bad}", headers=admin_headers)
        problem = await resp.json()
        assert resp.status == 422, (bad, problem)
        assert problem["field"].startswith("$."), (bad, problem)
