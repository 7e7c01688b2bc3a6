"""Spaces over REST on a real aiohttp server on loopback: create, list, show, add, change and remove members, and
every class of bad input answered 4xx problem+json with its code and field, nothing stored."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from identity import canonical, records
from node.service import Node
from node.spaces.service import nonce
from tests.conftest import AgentCreds
from tests.node.api_helpers import self_signer

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
PROBLEM = "application/problem+json"


async def record_count(node: Node) -> int:
    return await node.db.read(lambda conn: int(conn.execute("SELECT count(*) FROM records").fetchone()[0]))


async def call(
    client: TestClient, method: str, path: str, who: AgentCreds, status: int, body: Any = None
) -> dict[str, Any]:
    resp = await client.request(method, path, json=body, headers=who.headers)
    assert resp.status == status, await resp.text()
    if status >= 400:
        assert resp.content_type == PROBLEM
    out: dict[str, Any] = await resp.json()
    return out


async def test_create_add_list_show_and_remove(client: TestClient, make_agent: MakeAgent) -> None:
    owner, bob = await make_agent("owner"), await make_agent("bob")
    made = await call(client, "POST", "/v1/spaces", owner, 201, {"name": "family", "description": "notes"})
    space = made["space_id"]
    added = await call(client, "POST", f"/v1/spaces/{space}/members", owner, 201,
                       {"agent_id": bob.agent_id, "role": "writer"})  # fmt: skip
    assert added["created"] and added["address"]
    listed = await call(client, "GET", "/v1/spaces", bob, 200)
    assert [(s["space_id"], s["role"], s["name"]) for s in listed["spaces"]] == [(space, "writer", "family")]
    shown = await call(client, "GET", f"/v1/spaces/{space}", bob, 200)
    assert {(m["agent_id"], m["role"]) for m in shown["members"]} == {
        (owner.agent_id, "owner"), (bob.agent_id, "writer")
    }  # fmt: skip
    await call(client, "DELETE", f"/v1/spaces/{space}/members/{bob.agent_id}", owner, 201)
    assert (await call(client, "GET", "/v1/spaces", bob, 200))["spaces"] == []
    problem = await call(client, "GET", f"/v1/spaces/{space}", bob, 404)  # a removed member reads nothing
    assert problem["code"] == "unknown_space"


async def test_a_self_signing_agent_sends_its_space_record(client: TestClient, node: Node) -> None:
    who = await self_signer(node, "rover")
    unsigned = {
        "kind": "space",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": who.agent_id,
        "created_at": canonical.now_created_at(),
        "name": "rover's",
        "description": "",
        "nonce": nonce(),
    }
    record = records.sign(unsigned, who.key)
    made = await call(client, "POST", "/v1/spaces", who.creds, 201, {"record": record})
    assert made["space_id"] == records.compute_hash(record)
    assert not (await call(client, "POST", "/v1/spaces", who.creds, 200, {"record": record}))["created"]
    problem = await call(client, "POST", "/v1/spaces", who.creds, 422, {"name": "kept by the node?"})
    assert problem["code"] == "agent_signs_own_records"  # the node keeps no key for it


async def test_every_bad_input_is_a_problem_and_stores_nothing(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, bob, eve = await make_agent("owner"), await make_agent("bob"), await make_agent("eve")
    space = (await call(client, "POST", "/v1/spaces", owner, 201, {"name": "family"}))["space_id"]
    await call(client, "POST", f"/v1/spaces/{space}/members", owner, 201, {"agent_id": bob.agent_id, "role": "reader"})
    before = await record_count(node)
    members = f"/v1/spaces/{space}/members"
    cases: list[tuple[str, str, AgentCreds, Any, int, str, str | None]] = [
        ("POST", "/v1/spaces", owner, {"name": ""}, 422, "validation_error", "$.name"),
        ("POST", "/v1/spaces", owner, {}, 422, "validation_error", "$.name"),
        ("POST", "/v1/spaces", owner, {"name": "x", "colour": 1}, 422, "validation_error", "$.colour"),
        ("POST", "/v1/spaces", owner, {"record": {"kind": "entry"}}, 422, "record_malformed", "$.record.kind"),
        ("POST", members, owner, {"agent_id": "bob", "role": "reader"}, 422, "validation_error", "$.agent_id"),
        ("POST", members, owner, {"agent_id": eve.agent_id}, 422, "validation_error", "$.role"),
        ("POST", members, owner, {"agent_id": eve.agent_id, "role": "owner"}, 422, "validation_error", "$.role"),
        ("POST", members, bob, {"agent_id": eve.agent_id, "role": "reader"}, 403, "not_a_space_admin", None),
        ("POST", members, eve, {"agent_id": eve.agent_id, "role": "reader"}, 404, "unknown_space", "space_id"),
        (
            "POST",
            f"/v1/spaces/{'0' * 64}/members",
            owner,
            {"agent_id": eve.agent_id, "role": "reader"},
            404,
            "unknown_space",
            "space_id",
        ),
        ("GET", "/v1/spaces/not-a-space", owner, None, 404, "unknown_space", "space_id"),
        ("GET", f"/v1/spaces/{space}", eve, None, 404, "unknown_space", "space_id"),
        ("DELETE", f"{members}/{owner.agent_id}", owner, None, 409, "owner_role_fixed", "agent_id"),
        ("DELETE", f"{members}/nobody", owner, None, 422, "validation_error", "agent_id"),
        ("POST", members, owner, {"record": {"space": "1" * 64}}, 422, "space_mismatch", "$.record.space"),
    ]
    for method, path, who, body, status, code, field in cases:
        problem = await call(client, method, path, who, status, body)
        assert problem["code"] == code, (method, path, body, problem)
        if field is not None:
            assert problem["field"] == field, (method, path, body, problem)
    assert await record_count(node) == before
    resp = await client.post("/v1/spaces", json={"name": "x"})  # no credentials
    assert resp.status == 401


async def test_a_signed_fork_is_a_conflict(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    owner, bob = await make_agent("owner"), await make_agent("bob")
    space = (await call(client, "POST", "/v1/spaces", owner, 201, {"name": "family"}))["space_id"]
    await call(client, "POST", f"/v1/spaces/{space}/members", owner, 201, {"agent_id": bob.agent_id, "role": "reader"})
    key = await node.sealing.signing_key(owner.agent_id)
    assert key is not None
    fork = records.sign(
        {
            "kind": "space_member",
            "schema_version": canonical.SCHEMA_VERSION,
            "author_id": owner.agent_id,
            "created_at": canonical.now_created_at(),
            "space": space,
            "member": bob.agent_id,
            "role": "writer",
            "seq": 1,
        },
        key,
    )
    before = await record_count(node)
    problem = await call(client, "POST", f"/v1/spaces/{space}/members", owner, 409, {"record": fork})
    assert (problem["code"], problem["field"]) == ("prior_conflict", "$.record.prior")
    assert await record_count(node) == before
