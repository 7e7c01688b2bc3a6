"""Redaction over REST on a real server (loopback, a real SQLite file, real keys): the author redacts its entry, link
or message and every read answers the tombstone; each refusal stores nothing."""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from identity import canonical, records
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import count, entry_record, get_json, hash_of, link, post, self_signer
from tests.store_dump import dump
from wire.time import format_ms

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
WF = "/v1/agent-workflows"


async def redact(client: TestClient, who: Any, status: int, **body: Any) -> dict[str, Any]:
    resp = await client.post("/v1/redactions", json=body, headers=who.headers)
    data: dict[str, Any] = await resp.json(content_type=None)
    assert resp.status == status, data
    return data


async def rows(node: Node, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    def run(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in conn.execute(sql, args).fetchall()]

    return await node.db.read(run)


async def test_the_author_redacts_an_entry_and_reads_answer_its_tombstone(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    resp = await client.post("/v1/subscriptions", json={"tags": ["watch"]}, headers=bob.headers)
    assert resp.status == 201
    secret = "sk-" + secrets.token_hex(16)
    posted = await post(client, alice, content=f"the key is {secret}", tags=["watch"], directed_to=[bob.agent_id])
    address = posted["record_hash"]
    other = await post(client, bob, content="noted", links=[{"target": address, "link_type": "responds_to"}])
    assert (await get_json(client, "/v1/inbox", bob))["notifications"]
    version = (await rows(node, "SELECT version FROM records WHERE hash = ?", address))[0][0]

    out = await redact(client, alice, 201, target=address, reason="a leaked key")
    assert out["created"] and out["target"] == address and "pending" not in out
    tomb = out["tombstone"]
    assert tomb["redacted"] is True and tomb["redacted_by"] == alice.agent_id and tomb["author_id"] == alice.agent_id
    assert tomb["kind"] == "entry" and tomb["versions"] == [version] and tomb["redaction"] == out["redaction"]

    read = await get_json(client, f"/v1/entries/{address}", bob)  # 200 with the tombstone, not 404 nor 410
    assert read["entries"] == [] and read["missing"] == [] and read["redacted"] == [tomb]
    # a link from another author stays, and resolves to the tombstone
    around = await get_json(client, f"/v1/entries/{other['record_hash']}", bob, params={"hops": "1"})
    assert [lk["target"] for lk in around["links"] if lk["link_type"] == "responds_to"] == [address]
    assert [t["hash"] for t in around["redacted"]] == [address]
    found = await get_json(client, "/v1/search", bob, params={"q": secret.split("-")[1], "fresh": "true"})
    assert found["entries"] == []
    # bob's notification of it went; he had polled it, so a notice of the redaction stands in its place
    notices = (await get_json(client, "/v1/inbox", bob))["notifications"]
    told = [(n["reason"], n["record_hash"], n["redaction"]) for n in notices]
    assert told == [("redacted", address, out["redaction"])]
    # nothing of the body is left in the log or the tables; no peer can bring the version back
    assert await rows(node, "SELECT seq FROM records WHERE hash = ?", address) == []
    assert await rows(node, "SELECT id FROM entries WHERE record_hash = ?", address) == []
    assert await rows(node, "SELECT version FROM refused_versions WHERE hash = ?", address) == [(version,)]
    dumped = await node.db.read(dump)
    assert secret not in dumped
    # for the node's grace only, the version is set aside, node-local (a revocation may make the redaction void:
    # docs/decisions.md record 69); the scrub deletes it (tests/node/redaction/test_scrub.py)
    assert await rows(node, "SELECT version FROM redacted_bodies WHERE hash = ?", address) == [(version,)]

    again = await redact(client, alice, 200, target=address)  # already redacted: nothing new
    assert not again["created"] and again["redaction"] == out["redaction"]


async def test_only_the_author_may_redact_and_a_refusal_stores_nothing(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    alice, mallory = await make_agent("alice"), await make_agent("mallory")
    address = (await post(client, alice, content="mine"))["record_hash"]
    before = await count(node)
    problem = await redact(client, mallory, 403, target=address)
    assert problem["code"] == "not_target_author" and problem["field"] == "$.author_id"
    assert await count(node) == before
    assert (await get_json(client, f"/v1/entries/{address}", alice))["entries"]


async def test_a_redaction_of_a_redaction_or_of_a_task_event_is_refused(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    address = (await post(client, alice, content="mine"))["record_hash"]
    first = await redact(client, alice, 201, target=address)
    before = await count(node)
    problem = await redact(client, alice, 422, target=first["redaction"])
    assert problem["code"] == "not_redactable" and problem["field"] == "$.target"
    resp = await client.post(f"{WF}/tasks", json={"key": "t", "title": "T"}, headers=alice.headers)
    assert resp.status == 201, await resp.text()
    (task_event,) = await rows(node, "SELECT hash FROM records WHERE kind = 'task_event'")
    (agent_doc,) = await rows(node, "SELECT hash FROM records WHERE kind = 'agent' AND author_id = ?", alice.agent_id)
    for target in (task_event[0], agent_doc[0]):
        problem = await redact(client, alice, 422, target=target)
        assert problem["code"] == "not_redactable"
    assert await count(node) == before + 1  # the task event only


async def test_links_and_messages_are_redactable(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    one = (await post(client, alice, content="one"))["record_hash"]
    two = (await post(client, alice, content="two"))["record_hash"]
    made = await link(client, alice, source=two, target=one, link_type="supports", annotation="why: secret-link")
    link_hash = made["origin_hash"]
    message = {"message_type": "status", "body": "secret-message", "to_agent": bob.agent_id}
    resp = await client.post(f"{WF}/messages", json=message, headers=alice.headers)
    assert resp.status == 201, await resp.text()
    message_hash = (await resp.json())["record_hash"]
    assert (await redact(client, alice, 201, target=link_hash))["tombstone"]["kind"] == "link"
    assert (await redact(client, alice, 201, target=message_hash))["tombstone"]["kind"] == "message"
    assert await rows(node, "SELECT id FROM links WHERE origin_hash = ?", link_hash) == []
    assert await rows(node, "SELECT id FROM messages WHERE record_hash = ?", message_hash) == []
    listed = await get_json(client, f"{WF}/messages", bob)
    assert all(m["record_hash"] != message_hash for m in listed["messages"])
    dumped = await node.db.read(dump)
    assert "secret-link" not in dumped and "secret-message" not in dumped


async def test_a_redaction_of_a_target_not_seen_here_is_stored_at_once_and_refuses_the_body(
    client: TestClient, node: Node
) -> None:
    author = await self_signer(node, "author")
    record = entry_record(author.key, "arrives later", created_ms=node.now_ms() - 1000)
    address = hash_of(record)
    redaction = records.sign(
        {
            "kind": "redaction",
            "schema_version": canonical.SCHEMA_VERSION,
            "author_id": author.agent_id,
            "created_at": format_ms(node.now_ms()),
            "target": address,
            "reason": "never keep it",
        },
        author.key,
    )
    out = await redact(client, author, 201, record=redaction)
    assert out["pending"] is True and "tombstone" not in out and out["redaction"] == hash_of(redaction)
    before = await count(node)
    resp = await client.post("/v1/entries", json={"record": record}, headers=author.headers)
    assert resp.status == 409 and (await resp.json())["code"] == "redacted"
    assert await count(node) == before
    assert (await get_json(client, f"/v1/entries/{address}", author, status=404))["code"] == "entry_not_found"


async def test_a_redaction_by_another_author_of_an_unseen_target_is_void_for_it(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    author, mallory = await self_signer(node, "author"), await make_agent("mallory")
    record = entry_record(author.key, "mine to keep", created_ms=node.now_ms() - 1000)
    address = hash_of(record)
    assert (await redact(client, mallory, 201, target=address))["pending"] is True
    resp = await client.post("/v1/entries", json={"record": record}, headers=author.headers)
    assert resp.status == 201, await resp.text()
    assert (await get_json(client, f"/v1/entries/{address}", author))["entries"][0]["content"] == "mine to keep"


async def test_bad_redaction_requests_get_a_problem_and_store_nothing(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    signer = await self_signer(node, "signer")
    address = (await post(client, alice, content="mine"))["record_hash"]
    before = await count(node)
    cases: list[tuple[Any, dict[str, Any], int, str | None]] = [
        (alice, {}, 422, "$.target"),
        (alice, {"target": "nothex"}, 422, "$.target"),
        (alice, {"target": address, "reason": ""}, 422, "$.reason"),
        (alice, {"target": address, "reason": "x" * 1025}, 422, "$.reason"),
        (alice, {"target": address, "extra": 1}, 422, "$.extra"),
        (alice, {"target": address, "record": {}}, 422, "$.target"),
        (signer, {"target": address}, 422, None),  # a self-signing agent must sign its record
        (signer, {"record": {"kind": "entry"}}, 422, "$.record.kind"),
    ]
    for who, body, status, field in cases:
        problem = await redact(client, who, status, **body)
        if field is not None:
            assert problem["field"] == field, (body, problem)
    unsigned = {
        "kind": "redaction",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": signer.agent_id,
        "created_at": format_ms(node.now_ms()),
        "target": address,
    }
    bad_signature = {**records.sign(unsigned, signer.key), "target": "cd" * 32}
    assert (await redact(client, signer, 422, record=bad_signature))["code"] == "record_bad_signature"
    someone_else = records.sign({**unsigned, "author_id": alice.agent_id}, await _key(node, alice))
    assert (await redact(client, signer, 403, record=someone_else))["field"] == "$.record.author_id"
    with_empty_reason = records.sign({**unsigned, "reason": ""}, signer.key)
    assert (await redact(client, signer, 422, record=with_empty_reason))["code"] == "record_schema"
    assert (await redact(client, signer, 403, record=records.sign(unsigned, signer.key)))["code"] == "not_target_author"
    assert await count(node) == before


async def _key(node: Node, agent: AgentCreds) -> Any:
    key = await node.sealing.signing_key(agent.agent_id)
    assert key is not None
    return key


async def test_default_mode_candidates_citing_a_redacted_entry_and_their_replies_are_forgotten(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    address = (await post(client, alice, content="the vault code is 99-17"))["record_hash"]
    other = (await post(client, alice, content="an unrelated note"))["record_hash"]
    body = {
        "candidates": [
            {"kind": "reflection", "text": "the vault code is 99-17, remember it", "evidence_refs": [address],
             "truth_state": "hypothesis"},
            {"kind": "reflection", "text": "notes are kept", "evidence_refs": [other], "truth_state": "hypothesis"},
        ]
    }  # fmt: skip
    headers = {**alice.headers, "Idempotency-Key": "critic-1"}
    resp = await client.post("/v1/default-mode/critic", json=body, headers=headers)
    assert resp.status == 200, await resp.text()
    await redact(client, alice, 201, target=address)
    texts = [r[0] for r in await rows(node, "SELECT text FROM dm_candidates")]
    assert texts == ["notes are kept"]  # the one citing the redacted entry is gone, the other stays
    assert "99-17" not in await node.db.read(dump)
    again = await client.post("/v1/default-mode/critic", json=body, headers=headers)  # the key was forgotten too
    assert again.status == 200, await again.text()
    assert len(await rows(node, "SELECT id FROM dm_candidates")) == 3


async def test_a_retry_of_the_request_that_stored_a_redacted_record_is_refused_not_stored_again(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    entry = {"entry_type": "finding", "performative": "inform", "content": "retry secret"}
    keyed = {**alice.headers, "Idempotency-Key": "post-1"}
    resp = await client.post("/v1/entries", json=entry, headers=keyed)
    assert resp.status == 201
    address = (await resp.json())["record_hash"]
    other = (await post(client, alice, content="another"))["record_hash"]
    link_body = {"source": other, "target": address, "link_type": "supports", "idempotency_key": "link-1"}
    resp = await client.post("/v1/links", json=link_body, headers=alice.headers)
    assert resp.status == 201
    link_hash = (await resp.json())["origin_hash"]
    message = {"message_type": "status", "body": "retry message", "to_agent": bob.agent_id}
    resp = await client.post(f"{WF}/messages", json=message, headers={**alice.headers, "Idempotency-Key": "msg-1"})
    assert resp.status == 201
    message_hash = (await resp.json())["record_hash"]
    for target in (address, link_hash, message_hash):
        await redact(client, alice, 201, target=target)
    before = await count(node)
    retries = [
        await client.post("/v1/entries", json=entry, headers=keyed),
        await client.post("/v1/links", json=link_body, headers=alice.headers),
        await client.post(f"{WF}/messages", json=message, headers={**alice.headers, "Idempotency-Key": "msg-1"}),
    ]
    for resp in retries:
        assert resp.status == 409, await resp.text()
        assert (await resp.json())["code"] == "redacted"
    assert await count(node) == before
