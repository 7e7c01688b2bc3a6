"""Idempotency keys through a real server: replays, concurrency, reuse across operations, header and body."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.errors import Conflict
from node.service import Node
from node.store import idempotency
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import count, entry_record, problem, self_signer
from tests.pg_fixtures import OpenStore

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def entry(content: str, **over: Any) -> dict[str, Any]:
    return {"entry_type": "finding", "performative": "inform", "content": content, **over}


async def send(client: TestClient, who: Any, body: Any, key: str | None = None, path: str = "/v1/entries") -> Any:
    headers = {**who.headers, **({"Idempotency-Key": key} if key else {})}
    resp = await client.post(path, json=body, headers=headers)
    return resp.status, await resp.json()


async def test_same_key_twice_returns_the_original(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    status1, first = await send(client, alice, entry("once only"), key="k-1")
    status2, second = await send(client, alice, entry("once only"), key="k-1")
    assert (status1, status2) == (201, 200)
    assert second == first
    assert await count(node, "entries") == 1
    # a different body under the same key still answers with the original and writes nothing
    status3, third = await send(client, alice, entry("something else entirely"), key="k-1")
    assert status3 == 200 and third == first
    assert await count(node, "entries") == 1


async def test_concurrent_requests_with_one_key_store_one_record(
    client: TestClient, make_agent: MakeAgent, node: Node, clock: FakeClock
) -> None:
    alice = await make_agent("alice")
    # Different content per request: only the key, not the content hash, can make them one entry.
    results = await asyncio.gather(*(send(client, alice, entry(f"racer {i}"), key="race") for i in range(8)))
    statuses = sorted(status for status, _ in results)
    assert statuses == [200] * 7 + [201]
    assert len({body["id"] for _, body in results}) == 1
    assert len({body["record_hash"] for _, body in results}) == 1
    assert await count(node, "entries") == 1
    assert await count(node, "idempotency") == 1


async def test_two_concurrent_requests_same_key_same_body(
    client: TestClient, make_agent: MakeAgent, node: Node, clock: FakeClock
) -> None:
    alice = await make_agent("alice")
    (s1, b1), (s2, b2) = await asyncio.gather(
        send(client, alice, entry("twin")), send(client, alice, entry("twin", idempotency_key="twin-key"))
    )
    assert b1["id"] == b2["id"]
    clock.advance(1)
    (s1, b1), (s2, b2) = await asyncio.gather(
        send(client, alice, entry("pair"), key="pair"), send(client, alice, entry("pair"), key="pair")
    )
    assert sorted([s1, s2]) == [200, 201] and b1 == b2
    assert await count(node, "entries") == 2


async def test_key_reused_across_operations_is_409(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    _, a = await send(client, alice, entry("target"), key="post-key")
    _, b = await send(client, alice, entry("source"))
    link_body = {"source": str(b["id"]), "target": str(a["id"]), "link_type": "supports"}
    status, body = await send(client, alice, link_body, key="post-key", path="/v1/links")
    assert status == 409
    problem(body, 409, "idempotency_key_reused")
    status, made = await send(client, alice, link_body, key="link-key", path="/v1/links")
    assert status == 201
    status, again = await send(client, alice, link_body, key="link-key", path="/v1/links")
    assert status == 200 and again == made
    status, body = await send(client, alice, entry("a post with a link's key"), key="link-key")
    assert status == 409
    problem(body, 409, "idempotency_key_reused")
    assert await count(node, "records") == 4  # alice's identity, two entries, one link
    assert await count(node, "links") == 1


async def test_a_link_replay_answers_the_original_whatever_its_body(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    """Its refs were resolved before the key was looked at: a retry whose body no longer resolves got a 404."""
    alice = await make_agent("alice")
    _, a = await send(client, alice, entry("target"))
    _, b = await send(client, alice, entry("source"))
    link_body = {"source": str(b["id"]), "target": str(a["id"]), "link_type": "supports"}
    status, made = await send(client, alice, link_body, key="link-key", path="/v1/links")
    assert status == 201
    for other in (
        {"source": "999999", "target": str(a["id"]), "link_type": "supports"},  # unknown source
        {"source": str(a["id"]), "target": str(a["id"]), "link_type": "supports"},  # a self-link
    ):
        status, again = await send(client, alice, other, key="link-key", path="/v1/links")
        assert status == 200 and again == made
    # the same link asserted again with a fresh key: that key now names the link, so it is no post's key
    status, same = await send(client, alice, link_body, key="second-key", path="/v1/links")
    assert status == 200 and same == made
    status, body = await send(client, alice, entry("a post with that key"), key="second-key")
    problem(body, 409, "idempotency_key_reused")
    assert await count(node, "links") == 1


async def test_concurrent_post_and_link_with_one_key(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    _, a = await send(client, alice, entry("first"))
    _, b = await send(client, alice, entry("second"))
    before = await count(node)
    kinds = ["supports", "responds_to", "derived_from", "depends_on", "same_as"]
    for round_, kind in enumerate(kinds):  # a new link each round: an existing equal link is answered without a key
        key = f"mixed-{round_}"
        link_body = {"source": str(b["id"]), "target": str(a["id"]), "link_type": kind}
        (s1, p), (s2, lnk) = await asyncio.gather(
            send(client, alice, entry(f"post {round_}"), key=key),
            send(client, alice, link_body, key=key, path="/v1/links"),
        )
        assert sorted([s1, s2]) == [201, 409], (p, lnk)
        problem(p if s1 == 409 else lnk, 409, "idempotency_key_reused")
        assert await count(node) == before + round_ + 1


async def test_header_and_body_field(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    status1, first = await send(client, alice, entry("by header"), key="shared")
    status2, second = await send(client, alice, entry("by body", idempotency_key="shared"))
    assert (status1, status2) == (201, 200) and second == first
    status3, third = await send(client, alice, entry("both, same", idempotency_key="shared"), key="shared")
    assert status3 == 200 and third == first
    status4, body = await send(client, alice, entry("both, different", idempotency_key="one"), key="two")
    assert status4 == 422
    problem(body, 422, "idempotency_key_mismatch", "$.idempotency_key")
    assert await count(node, "entries") == 1


async def test_keys_belong_to_one_agent(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    s1, a = await send(client, alice, entry("alice's"), key="same")
    s2, b = await send(client, bob, entry("bob's"), key="same")
    assert (s1, s2) == (201, 201) and a["id"] != b["id"]


async def test_a_failed_request_does_not_use_up_its_key(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    status, _ = await send(client, alice, entry("bad", links=[{"target": "424242", "link_type": "supports"}]), key="k")
    assert status == 404
    status, _ = await send(client, alice, entry("good"), key="k")
    assert status == 201


async def test_signed_submission_with_a_key(client: TestClient, node: Node) -> None:
    bob = await self_signer(node, "bob")
    rec1 = entry_record(bob.key, "bob one", created_ms=node.now_ms())
    rec2 = entry_record(bob.key, "bob two", created_ms=node.now_ms())
    status1, first = await send(client, bob, {"record": rec1, "idempotency_key": "sig"})
    status2, second = await send(client, bob, {"record": rec2}, key="sig")
    assert (status1, status2) == (201, 200) and second == first
    assert await count(node, "entries") == 1


def test_the_keys_store_functions_answer_alike_on_either_engine(open_store: OpenStore) -> None:
    """remember, replayed, used and forget_record_txn, as the posting path runs them, on each engine."""
    conn = open_store(None)
    conn.execute("BEGIN")
    idempotency.remember(conn, "did:key:a", "k1", "entry", "h1", 1)
    idempotency.remember(conn, "did:key:a", "k2", "link", "h2", 1)
    idempotency.remember(conn, "did:key:b", "k1", "entry", "h3", 1)
    conn.execute("COMMIT")
    assert idempotency.replayed(conn, "did:key:a", "k1", "entry", field="$.k") == "h1"
    assert idempotency.replayed(conn, "did:key:a", "k9", "entry", field="$.k") is None
    with pytest.raises(Conflict) as reused:
        idempotency.replayed(conn, "did:key:a", "k2", "entry", field="$.k")
    assert reused.value.code == "idempotency_key_reused"
    asked = [("did:key:a", "k1"), ("did:key:b", "k1"), ("did:key:b", "k2"), ("did:key:a", "k2")]
    assert idempotency.used(conn, asked) == {
        ("did:key:a", "k1"): ("entry", "h1"),
        ("did:key:b", "k1"): ("entry", "h3"),
        ("did:key:a", "k2"): ("link", "h2"),
    }
    assert idempotency.used(conn, []) == {}
    conn.execute("BEGIN")
    idempotency.forget_record_txn(conn, "h3")
    conn.execute("COMMIT")
    with pytest.raises(Conflict) as dropped:
        idempotency.replayed(conn, "did:key:b", "k1", "entry", field="$.k")
    assert dropped.value.code == "redacted"
