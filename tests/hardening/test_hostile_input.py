"""Inputs that once produced a 500, slipped past a check or named the wrong field (found by probing a real
node with hostile requests). Each is now a 4xx problem with a stable code and field, and stores nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from identity import records
from node.service import Node
from sync import messages
from sync.client import PeerClient, SyncError
from sync.verify import verify_record
from tests.conftest import AgentCreds
from tests.hardening.test_hostile_peers import _hostile_key_on, _signed
from tests.node.api_helpers import count, entry_record, problem, self_signer
from tests.sync.conftest import PeerNode

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
DID = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"


async def raw_exchange(port: int, head: bytes, body: bytes = b"") -> tuple[int, dict[str, Any]]:
    """Send bytes as they are (headers that are not valid UTF-8 cannot go through aiohttp's client)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if b"\r\nHost:" not in head:
        head += b"Host: 127.0.0.1\r\n"
    writer.write(head + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    await writer.drain()
    response = await reader.read()
    writer.close()
    status_line, _, rest = response.partition(b"\r\n")
    payload = rest.split(b"\r\n\r\n", 1)[1]
    return int(status_line.split()[1]), json.loads(payload)


async def test_a_bearer_token_that_is_not_utf8_is_401(client: TestClient, make_agent: MakeAgent) -> None:
    await make_agent("alice")
    assert client.port is not None
    for token in (b"\xff", b"bbss_0123456789abcdef_\xff", b"bbs_abc_\xc3\xa9t\xc3\xa9"):
        head = b"GET /v1/search HTTP/1.1\r\nAuthorization: Bearer " + token + b"\r\n"
        status, body = await raw_exchange(client.port, head)
        problem(body, 401, "unauthorized")
        assert status == 401


async def test_an_idempotency_key_header_must_be_printable_ascii(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    alice = await make_agent("alice")
    assert client.port is not None
    before = await count(node)
    body = b'{"entry_type":"finding","performative":"inform","content":"x"}'
    for key in (b"\xff", "ключ".encode(), b"tab\there"):
        head = (
            b"POST /v1/entries HTTP/1.1\r\nContent-Type: application/json\r\nIdempotency-Key: " + key + b"\r\n"
            b"Authorization: Bearer " + alice.api_key.encode() + b"\r\n"
        )
        status, answer = await raw_exchange(client.port, head, body)
        assert status == 422
        problem(answer, 422, "validation_error", "Idempotency-Key")
    assert await count(node) == before


@pytest.mark.parametrize(
    "path, fields, field",
    [
        (
            "/v1/entries",
            {"entry_type": "finding", "performative": "inform", "content": "x", "directed_to": [DID + "\n"]},
            "$.directed_to[0]",
        ),
        ("/v1/subscriptions", {"authors": [DID + "\n"]}, "$.authors[0]"),
        ("/v1/agent-workflows/messages", {"message_type": "note", "to_agent": DID + "\n"}, "$.to_agent"),
        ("/v1/agent-workflows/tasks", {"key": "t2\n", "title": "a task"}, "$.key"),
    ],
)
async def test_a_trailing_newline_does_not_pass_a_pattern(
    client: TestClient, make_agent: MakeAgent, node: Node, path: str, fields: dict[str, Any], field: str
) -> None:
    alice = await make_agent("alice")
    before = await count(node)
    resp = await client.post(path, json=fields, headers=alice.headers)
    problem(await resp.json(), 422, "validation_error", field)
    assert await count(node) == before
    assert await count(node, "subscriptions") == 0


async def test_signed_entries_cannot_assert_retracted_by_or_link_to_themselves(client: TestClient, node: Node) -> None:
    alice = await self_signer(node, "alice")
    bob = await self_signer(node, "bob")
    bobs = entry_record(bob.key, "bob's entry", created_ms=node.now_ms())
    resp = await client.post("/v1/entries", json={"record": bobs}, headers=bob.headers)
    assert resp.status == 201
    bobs_hash = (await resp.json())["record_hash"]
    before = await count(node)
    forged = entry_record(
        alice.key,
        "alice claims bob retracted",
        created_ms=node.now_ms(),
        links=[{"target": bobs_hash, "link_type": "retracted_by", "annotation": ""}],
    )
    resp = await client.post("/v1/entries", json={"record": forged}, headers=alice.headers)
    problem(await resp.json(), 422, "record_schema", "$.record.links[0].link_type")
    unsigned = entry_record(alice.key, "alice links to herself", created_ms=node.now_ms())
    own_hash = records.compute_hash(unsigned)
    unsigned["links"] = [{"target": own_hash, "link_type": "supports", "annotation": ""}]
    selfish = records.sign({k: v for k, v in unsigned.items() if k != "signature"}, alice.key)
    resp = await client.post("/v1/entries", json={"record": selfish}, headers=alice.headers)
    problem(await resp.json(), 422, "record_schema", "$.record.links[0].target")
    assert await count(node) == before


async def test_errors_in_signed_records_name_the_field_inside_record(client: TestClient, node: Node) -> None:
    alice = await self_signer(node, "alice")
    bob = await self_signer(node, "bob")
    bobs = entry_record(bob.key, "bob's entry", created_ms=node.now_ms())
    bobs_hash = (await (await client.post("/v1/entries", json={"record": bobs}, headers=bob.headers)).json())[
        "record_hash"
    ]
    no_target = entry_record(alice.key, "withdrawn", created_ms=node.now_ms(), performative="retract")
    resp = await client.post("/v1/entries", json={"record": no_target}, headers=alice.headers)
    problem(await resp.json(), 422, "retract_without_target", "$.record.links")
    not_own = entry_record(
        alice.key,
        "withdrawn too",
        created_ms=node.now_ms(),
        performative="retract",
        links=[{"target": bobs_hash, "link_type": "supersedes", "annotation": ""}],
    )
    resp = await client.post("/v1/entries", json={"record": not_own}, headers=alice.headers)
    problem(await resp.json(), 403, "retract_not_own", "$.record.links[0].target")
    resp = await client.post("/v1/entries/batch", json={"entries": [{"record": not_own}]}, headers=alice.headers)
    problem(await resp.json(), 403, "retract_not_own", "$.entries[0].record.links[0].target")

    def link(source: str, target: str) -> dict[str, Any]:
        return records.sign(
            {
                "kind": "link",
                "schema_version": "v1",
                "author_id": alice.agent_id,
                "created_at": bobs["created_at"],
                "source": source,
                "target": target,
                "link_type": "supports",
                "annotation": "",
            },
            alice.key,
        )

    resp = await client.post("/v1/links", json={"record": link(bobs_hash, bobs_hash)}, headers=alice.headers)
    problem(await resp.json(), 422, "self_link", "$.record.target")
    resp = await client.post("/v1/links", json={"record": link("a" * 64, bobs_hash)}, headers=alice.headers)
    problem(await resp.json(), 404, "source_not_found", "$.record.source")


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/default-mode/simulate-future", {"goal": "   "}),
        ("/v1/default-mode/incubate", {"problem": "\n"}),
        ("/v1/default-mode/stakeholder-simulation", {"stakeholder": " ", "proposal": "\t"}),
        ("/v1/default-mode/reflect-session", {"transcript": "   "}),
    ],
)
async def test_default_mode_text_must_not_be_blank(
    client: TestClient, make_agent: MakeAgent, node: Node, path: str, body: dict[str, Any]
) -> None:
    alice = await make_agent("alice")
    before = await count(node)
    resp = await client.post(path, json=body, headers=alice.headers)
    answer = await resp.json()
    problem(answer, 422, "validation_error")
    assert answer["field"].startswith("$.")
    assert await count(node) == before


async def test_peer_urls_the_sync_client_cannot_call_are_refused(make_peer: Callable[..., Any]) -> None:
    node: PeerNode = await make_peer("a")
    for url in ("http://[::1", "http://h:99999999", "http://h:0", "http://%zz", "http://u:p@h", "http://h/\n"):
        async with node.session.post(
            node.url + "/v1/peers", json={"url": url, "node_id": DID}, headers=node.admin
        ) as resp:
            answer = await resp.json()
            assert resp.status == 422, (url, answer)
            assert answer["field"] == "$.url" and answer["code"] in ("invalid_peer_url", "validation_error")
    async with node.session.get(node.url + "/v1/peers", headers=node.admin) as resp:
        assert (await resp.json())["peers"] == []


async def test_sync_routes_answer_a_bad_host_header_with_400(make_peer: Callable[..., Any]) -> None:
    node: PeerNode = await make_peer("a")
    port = int(node.url.rsplit(":", 1)[1])
    for host in (b"h:99999", b"\xff"):
        status, answer = await raw_exchange(port, b"GET /v1/sync/changes HTTP/1.1\r\nHost: " + host + b"\r\n")
        problem(answer, 400, "invalid_host", "Host")
        assert status == 400


async def test_a_deeply_nested_body_from_a_peer_is_too_deep(make_peer: Callable[..., Any]) -> None:
    node: PeerNode = await make_peer("a")
    key = await _hostile_key_on(node)
    nested = b"[" * 5000 + b"]" * 5000
    for path in ("/v1/sync/fetch", "/v1/agent-workflows/peer/lease"):
        status, answer = await _signed(node, key, "POST", path, nested)
        assert status == 400, (path, answer)
        problem(answer, 400, "too_deep")


def test_a_deeply_nested_record_or_reply_from_a_peer_is_refused() -> None:
    """Deeper than the decoder recurses: a verdict (record) or a SyncError (reply), never a RecursionError."""
    deep = b"[" * 50_000 + b"]" * 50_000
    verdict = verify_record(deep, None)
    assert getattr(verdict, "reason", None) == "malformed"
    peer = PeerClient.__new__(PeerClient)  # only its reply decoding is exercised
    peer.node_id = DID
    item = b'{"hash":"' + b"a" * 64 + b'","record":' + deep + b"}"
    reply = b'{"type":"records","node_id":"x","items":[' + item + b'],"missing":[]}'
    with pytest.raises(SyncError):
        peer._decode(messages.RECORDS_DECODER, reply)


async def test_routes_without_query_parameters_refuse_them(client: TestClient, make_agent: MakeAgent) -> None:
    """As routes with parameters refuse unknown ones; a few (node, agents, default-mode drafts, the dashboard's
    API) answered 200 and ignored them, `?scope=` on a draft included."""
    alice = await make_agent("alice")
    for path in ("/v1/node?foo=1", f"/v1/agents/{alice.agent_id}?x=", "/dashboard/api/session?x=1"):
        resp = await client.get(path, headers=alice.headers)
        answer = await resp.json()
        assert resp.status == 422, (path, answer)
        problem(answer, 422, "validation_error")
        assert answer["field"].startswith("$.")
    resp = await client.get("/v1/node", headers=alice.headers)
    assert resp.status == 200
