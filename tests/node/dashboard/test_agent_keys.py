"""The dashboard's key history of an agent (`GET /dashboard/api/agents/{agent_id}/keys`) on a real aiohttp server
over a real SQLite node with real Ed25519 keys: the key history of `GET /v1/agents/{agent_id}`, each chain event's
signer role, and the agent's void records counted for the admin only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import get_json, hash_of, problem
from tests.node.store.test_void import void_story


class Admin:
    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


async def test_the_key_chain_with_roles_and_the_void_count_of_an_agent(
    client: TestClient,
    node: Node,
    clock: FakeClock,
    make_agent: Callable[[str], Awaitable[AgentCreds]],
    admin_headers: dict[str, str],
) -> None:
    story = await void_story(client, node, clock, make_agent)  # rotate, a losing revoke, a winning recover
    author = story["declare"]["author_id"]
    admin = Admin(admin_headers)
    keys = await get_json(client, f"/dashboard/api/agents/{author}/keys", admin)
    rest = await get_json(client, f"/v1/agents/{author}", admin)
    assert keys["key_history"] == rest["key_history"]  # one service call behind both
    assert keys["agent_id"] == author and keys["display_name"] == rest["display_name"]
    events = keys["key_history"]["events"]
    chain = [(e["seq"], e["event"], e["role"]) for e in events if e["in_chain"]]
    assert chain == [(1, "rotate", "current"), (2, "recover", "recovery")]
    (lost,) = [e for e in events if not e["in_chain"]]
    assert lost["event"] == "revoke" and lost["role"] is None and lost["seq"] == 2
    (recovered,) = [e for e in events if e["in_chain"] and e["seq"] == 2]
    assert keys["key_history"]["current_key"] == recovered["key"] != lost["key"]
    assert keys["key_history"]["recovery"] is not None
    listed = await get_json(client, "/v1/admin/void-records", admin)
    assert keys["void_records"] == listed["total"] == 1
    assert listed["records"][0]["record_hash"] == hash_of(story["declare"])
    # an agent's key sees the history but not the count (the void-records listing is admin-only)
    viewer = await make_agent("viewer")
    as_agent = await get_json(client, f"/dashboard/api/agents/{author}/keys", viewer)
    assert as_agent["key_history"] == keys["key_history"] and as_agent["void_records"] is None
    # an agent with no key event and no void record
    plain = await get_json(client, f"/dashboard/api/agents/{viewer.agent_id}/keys", admin)
    assert plain["key_history"]["events"] == [] and plain["key_history"]["current_key"] == viewer.agent_id
    assert plain["void_records"] == 0
    by_name = await get_json(client, "/dashboard/api/agents/viewer/keys", admin)
    assert by_name["agent_id"] == viewer.agent_id


async def test_an_unknown_or_malformed_agent_is_a_problem_and_a_key_is_needed(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    admin = Admin(admin_headers)
    unknown = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
    problem(await get_json(client, f"/dashboard/api/agents/{unknown}/keys", admin, 404), 404, "agent_not_found")
    problem(await get_json(client, "/dashboard/api/agents/nobody/keys", admin, 404), 404, "agent_not_found")
    bad = await get_json(client, "/dashboard/api/agents/Not%20A%20Name/keys", admin, 422)
    problem(bad, 422, "invalid_agent_ref", "agent_id")
    resp = await client.get(f"/dashboard/api/agents/{unknown}/keys")
    assert resp.status == 401 and (await resp.json())["code"] == "unauthorized"
