"""POST /nlip: the primitives as NLIP messages, a text message as a search, NLIP errors that store nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import count


def call(op: str, **args: Any) -> dict[str, Any]:
    return {"format": "structured", "subformat": "JSON", "content": {"op": op, "args": args}}


async def send(client: TestClient, who: AgentCreds, message: Any, path: str = "/nlip") -> tuple[int, dict[str, Any]]:
    resp = await client.post(path, json=message, headers=who.headers)
    return resp.status, await resp.json()


async def test_the_primitives_through_nlip(
    client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    status, posted = await send(
        client,
        alice,
        call(
            "post",
            entry_type="finding",
            performative="request",
            content="cache hit rate fell",
            directed_to=[bob.agent_id],
        ),
    )
    assert status == 200 and posted["format"] == "structured" and posted["label"] == "post"
    entry_id = posted["content"]["id"]
    status, other = await send(client, alice, call("post", entry_type="finding", performative="inform", content="x"))
    status, linked = await send(
        client, alice, call("link", source=str(other["content"]["id"]), target=str(entry_id), link_type="supports")
    )
    assert status == 200 and linked["content"]["link_type"] == "supports"
    status, read = await send(client, bob, call("read", ids=[str(entry_id)]), "/nlip/")
    assert status == 200 and read["content"]["entries"][0]["content"] == "cache hit rate fell"
    status, found = await send(client, bob, {"format": "text", "subformat": "english", "content": "cache hit"})
    assert status == 200 and [e["id"] for e in found["content"]["entries"]] == [entry_id]
    assert found["submessages"][0]["format"] == "text"
    status, starred = await send(client, bob, {"format": "text", "subformat": "english", "content": "a* cache hit*"})
    assert status == 200 and [e["id"] for e in starred["content"]["entries"]] == []  # stars are prose: no 422
    status, sub = await send(client, bob, call("subscribe", tags=["perf"]))
    assert status == 200 and sub["content"]["tags"] == ["perf"]
    status, inbox = await send(client, bob, call("inbox"))
    [note] = inbox["content"]["notifications"]
    status, acked = await send(client, bob, call("ack", ids=[note["notification_id"]]))
    assert acked["content"] == {"acknowledged": 1}


@pytest.mark.parametrize(
    ("message", "status", "code", "field"),
    [
        ("not an object", 422, "invalid_nlip_message", "$"),
        ({"format": "text", "subformat": "english"}, 422, "invalid_nlip_message", "$.content"),
        ({"format": "smoke", "subformat": "x", "content": "a"}, 422, "invalid_nlip_format", "$.format"),
        ({"format": "text", "subformat": "english", "content": "  "}, 422, "empty_text", "$.content"),
        (
            {"format": "binary", "subformat": "image/png", "content": "AA=="},
            422,
            "unsupported_nlip_message",
            "$.format",
        ),
        (call("drop_tables"), 422, "unknown_op", "$.content.op"),
        (
            {"format": "structured", "subformat": "JSON", "content": {"op": "post", "x": 1}},
            422,
            "invalid_nlip_call",
            "$.content",
        ),
        (call("post", entry_type="finding", performative="inform"), 422, "validation_error", "$.content.args.content"),
        (
            call("post", entry_type="finding", performative="inform", content="x", extra=1),
            422,
            "validation_error",
            "$.content.args.extra",
        ),
        (call("read"), 422, "validation_error", "$.content.args.ids"),
    ],
)
async def test_bad_messages_get_nlip_errors_and_store_nothing(
    client: TestClient,
    node: Node,
    make_agent: Callable[[str], Awaitable[AgentCreds]],
    message: Any,
    status: int,
    code: str,
    field: str,
) -> None:
    alice = await make_agent("alice")
    got_status, answer = await send(client, alice, message)
    assert got_status == status, answer
    assert (answer["format"], answer["subformat"], answer["content"]) == ("error", "code", code)
    subs = {s["subformat"]: s["content"] for s in answer["submessages"]}
    assert subs.get("field") == field and subs["text"]
    assert await count(node, "entries") == 0


async def test_bodies_that_are_not_json_and_missing_credentials(
    client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice = await make_agent("alice")
    resp = await client.post("/nlip", data=b"{nope", headers={**alice.headers, "Content-Type": "application/json"})
    assert resp.status == 400 and (await resp.json())["content"] == "invalid_json"
    resp = await client.post("/nlip", data=b"{}", headers={**alice.headers, "Content-Type": "text/plain"})
    assert resp.status == 415 and (await resp.json())["content"] == "unsupported_media_type"
    resp = await client.post("/nlip", json={"format": "text", "subformat": "english", "content": "x"})
    assert resp.status == 401 and resp.content_type == "application/problem+json"  # authentication as for REST
