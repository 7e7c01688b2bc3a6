"""Every class of bad input through a real server: the status, the stable code, the field, and nothing stored."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.app import MAX_BODY_BYTES
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import count, get_json, post, problem

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
PROBLEM_KEYS = {"type", "title", "status", "code", "detail"}
STORED_TABLES = ["records", "entries", "links", "idempotency", "notifications", "subscriptions"]


async def stored(node: Node) -> dict[str, int]:
    return {table: await count(node, table) for table in STORED_TABLES}


async def check_problem(resp: Any, status: int, code: str, field: str | None = None) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/problem+json"
    assert resp.headers.get("X-Request-Id")
    body: dict[str, Any] = await resp.json(content_type=None)
    assert PROBLEM_KEYS <= set(body) <= PROBLEM_KEYS | {"field"}
    problem(body, status, code, field)
    return body


async def test_problem_body_is_pinned(client: TestClient) -> None:
    resp = await client.get("/v1/inbox")
    body = await check_problem(resp, 401, "unauthorized")
    assert body == {
        "type": "https://agent-bbs.dev/problems/unauthorized",
        "title": "Authentication required",
        "status": 401,
        "code": "unauthorized",
        "detail": "send 'Authorization: Bearer <api key>'",
    }
    assert resp.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "Token abc", "Bearer bbs_0011223344556677_wrong",
     "Bearer bbs_short_secret", "Bearer not-a-key", "Bearer bbs__", "Bearer bbs_0011223344556677_"],
)  # fmt: skip
async def test_missing_or_wrong_key_is_401(client: TestClient, node: Node, authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    before = await stored(node)
    for method, path in [("GET", "/v1/inbox"), ("POST", "/v1/entries"), ("GET", "/v1/search"), ("POST", "/v1/agents")]:
        resp = await client.request(
            method, path, json={"entry_type": "finding", "performative": "inform", "content": "x"}, headers=headers
        )
        await check_problem(resp, 401, "unauthorized")
    assert await stored(node) == before


async def test_a_real_key_with_a_changed_secret_is_401(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    forged = alice.api_key[:-2] + ("AA" if not alice.api_key.endswith("AA") else "BB")
    resp = await client.get("/v1/inbox", headers={"Authorization": f"Bearer {forged}"})
    await check_problem(resp, 401, "unauthorized")


async def test_admin_token_on_an_agent_route_is_403(client: TestClient, admin_headers: dict, node: Node) -> None:
    before = await stored(node)
    resp = await client.post(
        "/v1/entries", json={"entry_type": "finding", "performative": "inform", "content": "x"}, headers=admin_headers
    )
    await check_problem(resp, 403, "agent_key_required")
    for path in ["/v1/inbox", "/v1/subscriptions"]:
        await check_problem(await client.get(path, headers=admin_headers), 403, "agent_key_required")
    assert await stored(node) == before


async def test_agent_key_on_an_admin_route_is_403(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    before = await count(node, "local_agents")
    resp = await client.post("/v1/agents", json={"name": "mallory"}, headers=alice.headers)
    await check_problem(resp, 403, "admin_required")
    assert await count(node, "local_agents") == before


async def test_admin_creates_an_agent(client: TestClient, admin_headers: dict) -> None:
    resp = await client.post("/v1/agents", json={"name": "carol", "display_name": "Carol"}, headers=admin_headers)
    created = await resp.json()
    assert resp.status == 201 and created["name"] == "carol" and created["api_key"].startswith("bbs_")
    carol = AgentCreds("carol", created["agent_id"], created["api_key"])
    assert (await post(client, carol, content="hello from carol"))["author_id"] == created["agent_id"]
    resp = await client.post("/v1/agents", json={"name": "carol"}, headers=admin_headers)
    await check_problem(resp, 409, "agent_exists", "$.name")
    resp = await client.post("/v1/agents", json={"name": "Bad Name"}, headers=admin_headers)
    await check_problem(resp, 422, "validation_error", "$.name")


def entry(**over: Any) -> dict[str, Any]:
    return {"entry_type": "finding", "performative": "inform", "content": "valid content", **over}


BAD_BODIES = [
    (entry(colour="blue"), "$.colour"),
    (entry(links=[{"target": "1", "link_type": "supports", "weight": 2}]), "$.links[0].weight"),
    (entry(links=[{"link_type": "supports"}]), "$.links[0].target"),  # a missing field: its own path
    ({"performative": "inform", "content": "x"}, "$.entry_type"),
    (entry(entry_type="essay"), "$.entry_type"),
    (entry(performative="shout"), "$.performative"),
    (entry(truth_state="rumour"), "$.truth_state"),
    (entry(scope="galaxy"), "$.scope"),
    (entry(confidence=1.01), "$.confidence"),
    (entry(confidence=-0.1), "$.confidence"),
    (entry(confidence="high"), "$.confidence"),
    (entry(confidence=True), "$.confidence"),
    (entry(tags=[f"t{i}" for i in range(33)]), "$.tags"),
    (entry(tags=[""]), "$.tags[0]"),
    (entry(tags=["x" * 65]), "$.tags[0]"),
    (entry(tags="db"), "$.tags"),
    (entry(directed_to=["Bob"]), "$.directed_to[0]"),
    (entry(links=[{"target": "1", "link_type": "supports"}] * 33), "$.links"),
    (entry(links=[{"target": "1", "link_type": "retracted_by"}]), "$.links[0].link_type"),
    (entry(content=""), "$.content"),
    (entry(content="   \n\t "), "$.content"),
    (entry(content="x" * 65_537), "$.content"),
    (entry(metadata=[1, 2]), "$.metadata"),
    (entry(idempotency_key=""), "$.idempotency_key"),
    (entry(idempotency_key="k" * 129), "$.idempotency_key"),
    ([entry()], "$"),
    ("just a string", "$"),
    ({"record": "not an object"}, "$.record"),
    ({"record": {}, "extra": 1}, "$.extra"),
]


@pytest.mark.parametrize(("body", "field"), BAD_BODIES)
async def test_invalid_entry_bodies_are_422(
    client: TestClient, make_agent: MakeAgent, node: Node, body: Any, field: str
) -> None:
    alice = await make_agent("alice")
    before = await stored(node)
    resp = await client.post("/v1/entries", json=body, headers=alice.headers)
    await check_problem(resp, 422, "validation_error", field)
    assert await stored(node) == before


async def test_oversized_record_and_metadata_are_422(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    before = await stored(node)
    resp = await client.post("/v1/entries", json=entry(metadata={"blob": "m" * 20_000}), headers=alice.headers)
    await check_problem(resp, 422, "record_too_large", "$.metadata")
    # 65,536 astral characters fit the content limit but not the record limit once escaped
    resp = await client.post("/v1/entries", json=entry(content="😀" * 65_536), headers=alice.headers)
    await check_problem(resp, 422, "record_too_large")
    assert await stored(node) == before


async def test_malformed_json_is_400(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    headers = {**alice.headers, "Content-Type": "application/json"}
    before = await stored(node)
    for raw in [b"{", b"", b"{'a': 1}", b"\xff\xfe", b'{"content": "\\ud800"}', b'{"a": 1e400}', b"[1,]"]:
        resp = await client.post("/v1/entries", data=raw, headers=headers)
        await check_problem(resp, 400, "invalid_json")
    assert await stored(node) == before


@pytest.mark.parametrize("depth", [33, 500, 1_000, 100_000])
async def test_deeply_nested_bodies_are_400_not_500(
    client: TestClient, make_agent: MakeAgent, node: Node, depth: int
) -> None:
    alice = await make_agent("alice")
    raw = '{"entry_type":"finding","performative":"inform","content":"deep","metadata":{"a":%s}}' % (
        "[" * depth + "]" * depth
    )
    before = await stored(node)
    resp = await client.post("/v1/entries", data=raw, headers={**alice.headers, "Content-Type": "application/json"})
    await check_problem(resp, 400, "too_deep")
    assert await stored(node) == before


async def test_nesting_within_the_limit_is_accepted(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    nested: Any = "leaf"
    for _ in range(28):  # body -> metadata -> 28 levels stays within MAX_JSON_DEPTH
        nested = {"n": nested}
    assert (await post(client, alice, content="nested", metadata={"a": nested}))["metadata"]["a"]["n"]


async def test_brackets_inside_strings_are_not_nesting(client: TestClient, make_agent: MakeAgent) -> None:
    # More '[' and '{' bytes than MAX_JSON_DEPTH, all inside strings: the body is shallow and accepted.
    alice = await make_agent("alice")
    text = "[{" * 40 + " brackets as text"
    entry = await post(client, alice, content=text, metadata={"note": "{[" * 40})
    assert entry["content"] == text and entry["metadata"]["note"] == "{[" * 40


async def test_wrong_content_type_is_415(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    before = await stored(node)
    for ctype in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]:
        resp = await client.post(
            "/v1/entries", data=b'{"entry_type":"finding"}', headers={**alice.headers, "Content-Type": ctype}
        )
        await check_problem(resp, 415, "unsupported_media_type", "Content-Type")
    assert await stored(node) == before


async def test_body_over_one_mib_is_413(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    before = await stored(node)
    raw = b'{"entry_type":"finding","performative":"inform","content":"' + b"x" * MAX_BODY_BYTES + b'"}'
    resp = await client.post("/v1/entries", data=raw, headers={**alice.headers, "Content-Type": "application/json"})
    await check_problem(resp, 413, "payload_too_large")
    assert await stored(node) == before


async def test_bad_read_parameters_are_422(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    e = await post(client, alice, content="x")
    for params, field in [
        ({"hops": "4"}, "$.hops"),
        ({"hops": "-1"}, "$.hops"),
        ({"hops": "two"}, "$.hops"),
        ({"direction": "up"}, "$.direction"),
        ({"link_types": "likes"}, "$.link_types[0]"),
        ({"include_links": "perhaps"}, "$.include_links"),
        ({"ids": "1"}, "$.ids"),
        ({"colour": "red"}, "$.colour"),
    ]:
        body = await get_json(client, f"/v1/entries/{e['id']}", alice, 422, params=params)
        problem(body, 422, "validation_error", field)
    problem(await get_json(client, "/v1/entries", alice, 422), 422, "validation_error", "$.ids")
    too_many = ",".join(str(i) for i in range(101))
    problem(
        await get_json(client, "/v1/entries", alice, 422, params={"ids": too_many}), 422, "validation_error", "$.ids"
    )
    problem(
        await get_json(client, "/v1/search", alice, 422, params={"limit": "500"}), 422, "validation_error", "$.limit"
    )
    problem(
        await get_json(client, "/v1/search", alice, 422, params={"since": "2026-13-01T00:00:00Z"}),
        422,
        "validation_error",
        "$.since",
    )


async def test_unknown_route_and_wrong_method(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await check_problem(await client.get("/v1/nothing-here", headers=alice.headers), 404, "not_found")
    resp = await client.put("/v1/entries", json={}, headers=alice.headers)
    await check_problem(resp, 405, "method_not_allowed")
    assert set(resp.headers["Allow"].split(",")) == {"GET", "POST"}
    resp = await client.delete("/v1/inbox", headers=alice.headers)
    await check_problem(resp, 405, "method_not_allowed")


async def test_bad_idempotency_header(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    before = await stored(node)
    for value in ["k" * 129, ""]:
        resp = await client.post("/v1/entries", json=entry(), headers={**alice.headers, "Idempotency-Key": value})
        await check_problem(resp, 422, "validation_error", "Idempotency-Key")
    assert await stored(node) == before


async def test_compressed_bodies(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    """gzip bodies are accepted; a gzip bomb is 413 on its decompressed size; a corrupt stream is 400."""
    import gzip

    alice = await make_agent("alice")
    headers = {**alice.headers, "Content-Type": "application/json", "Content-Encoding": "gzip"}
    small = b'{"entry_type":"finding","performative":"inform","content":"zipped"}'
    resp = await client.post("/v1/entries", data=gzip.compress(small), headers=headers)
    assert resp.status == 201
    before = await stored(node)
    bomb = gzip.compress(b'{"content":"' + b"x" * (8 * MAX_BODY_BYTES) + b'"}')
    assert len(bomb) < MAX_BODY_BYTES
    await check_problem(await client.post("/v1/entries", data=bomb, headers=headers), 413, "payload_too_large")
    await check_problem(await client.post("/v1/entries", data=b"not gzip at all", headers=headers), 400, "invalid_body")
    assert await stored(node) == before


@pytest.mark.parametrize("path", ["/healthz", "/v1/node", "/openapi.json", "/v1/inbox", "/v1/no-such-route"])
async def test_data_answers_are_never_sniffed_or_run(client: TestClient, path: str) -> None:
    resp = await client.get(path)
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert resp.headers["Content-Security-Policy"].startswith("default-src 'none'")
