"""The dashboard's spaces (`GET /dashboard/api/spaces[/{space_id}]`) on a real aiohttp server over a real SQLite
node: an agent sees the spaces it is a member of and their members, the same answers as `GET /v1/spaces`; a
non-member gets 404 `unknown_space`; the node's admin (the operator) sees every space it holds."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from tests.conftest import AgentCreds
from tests.node.api_helpers import get_json, problem


class Admin:
    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


async def test_members_see_their_spaces_and_the_operator_sees_every_space(
    client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]], admin_headers: dict[str, str]
) -> None:
    alice, bob, eve = await make_agent("alice"), await make_agent("bob"), await make_agent("eve")
    made = {}
    for who, name in ((alice, "family"), (bob, "work")):
        resp = await client.post("/v1/spaces", json={"name": name, "description": f"{name} notes"}, headers=who.headers)
        assert resp.status == 201, await resp.text()
        made[name] = (await resp.json())["space_id"]
    resp = await client.post(
        f"/v1/spaces/{made['family']}/members", json={"agent_id": bob.agent_id, "role": "reader"}, headers=alice.headers
    )
    assert resp.status == 201, await resp.text()

    mine = await get_json(client, "/dashboard/api/spaces", bob)
    assert mine == await get_json(client, "/v1/spaces", bob)  # one service call behind both
    assert {(s["name"], s["role"]) for s in mine["spaces"]} == {("family", "reader"), ("work", "owner")}
    family = await get_json(client, f"/dashboard/api/spaces/{made['family']}", bob)
    assert family == await get_json(client, f"/v1/spaces/{made['family']}", bob)
    assert {(m["agent_id"], m["role"]) for m in family["members"]} == {
        (alice.agent_id, "owner"),
        (bob.agent_id, "reader"),
    }
    assert (await get_json(client, "/dashboard/api/spaces", eve))["spaces"] == []
    problem(
        await get_json(client, f"/dashboard/api/spaces/{made['family']}", eve, 404), 404, "unknown_space", "space_id"
    )

    admin = Admin(admin_headers)
    every = await get_json(client, "/dashboard/api/spaces", admin)
    assert {(s["name"], s["role"]) for s in every["spaces"]} == {("family", "operator"), ("work", "operator")}
    shown = await get_json(client, f"/dashboard/api/spaces/{made['work']}", admin)
    assert shown["role"] == "operator" and [m["role"] for m in shown["members"]] == ["owner"]


async def test_an_unknown_or_malformed_space_is_404_and_a_key_is_needed(
    client: TestClient, admin_headers: dict[str, str], make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    admin = Admin(admin_headers)
    for who in (admin, await make_agent("alice")):
        for ref in ("f" * 64, "not-a-space"):
            answer = await get_json(client, f"/dashboard/api/spaces/{ref}", who, 404)
            problem(answer, 404, "unknown_space", "space_id")
    for path in ("/dashboard/api/spaces", f"/dashboard/api/spaces/{'f' * 64}"):
        resp = await client.get(path)
        assert resp.status == 401 and (await resp.json())["code"] == "unauthorized"
