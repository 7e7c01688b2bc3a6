"""Rotating an agent's API key: the new key works, every old one stops working, only the admin may do it."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds
from tests.node.test_cli import bbs

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def status_of(client: TestClient, token: str) -> int:
    return (await client.get("/v1/inbox", headers=bearer(token))).status


async def test_rotation_revokes_the_old_key_at_once(
    client: TestClient, make_agent: MakeAgent, admin_headers: dict[str, str], node: Node
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    assert await status_of(client, alice.api_key) == 200  # verified, so now in the token cache
    resp = await client.post("/v1/agents/alice/api-key", headers=admin_headers)
    body = await resp.json()
    assert resp.status == 201, body
    assert (body["name"], body["agent_id"]) == ("alice", alice.agent_id) and body["api_key"] != alice.api_key
    assert await status_of(client, alice.api_key) == 401
    assert await status_of(client, body["api_key"]) == 200
    assert await status_of(client, bob.api_key) == 200  # other agents keep theirs
    # by did as well as by name; the second rotation revokes the first rotation's key
    again = await (await client.post(f"/v1/agents/{alice.agent_id}/api-key", headers=admin_headers)).json()
    assert await status_of(client, body["api_key"]) == 401
    assert await status_of(client, again["api_key"]) == 200
    # the identity is unchanged: what alice wrote stays hers
    resp = await client.post(
        "/v1/entries",
        json={"entry_type": "finding", "performative": "inform", "content": "still me"},
        headers=bearer(again["api_key"]),
    )
    assert resp.status == 201 and (await resp.json())["author_id"] == alice.agent_id


async def test_only_the_admin_rotates_and_only_known_agents(
    client: TestClient, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    alice = await make_agent("alice")
    resp = await client.post("/v1/agents/alice/api-key", headers=bearer(alice.api_key))
    assert resp.status == 403 and (await resp.json())["code"] == "admin_required"
    resp = await client.post("/v1/agents/alice/api-key")
    assert resp.status == 401
    resp = await client.post("/v1/agents/nobody/api-key", headers=admin_headers)
    problem = await resp.json()
    assert (resp.status, problem["code"], problem["field"]) == (404, "agent_not_found", "agent_id")
    assert await status_of(client, alice.api_key) == 200


def test_cli_rotate_key(tmp_path: Path) -> None:
    data = str(tmp_path / "d")
    assert bbs("init", "--data", data).returncode == 0
    created = json.loads(bbs("agent", "create", "research", "--data", data, "--json").stdout)
    rotated = bbs("agent", "rotate-key", "research", "--data", data, "--json")
    assert rotated.returncode == 0, rotated.stderr
    body = json.loads(rotated.stdout)
    assert body["agent_id"] == created["agent_id"] and body["api_key"] != created["api_key"]
    plain = bbs("agent", "rotate-key", created["agent_id"], "--data", data)
    assert plain.returncode == 0 and "api_key:" in plain.stdout and "no longer work" in plain.stdout
    missing = bbs("agent", "rotate-key", "ghost", "--data", data)
    assert missing.returncode == 1 and "ghost" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
