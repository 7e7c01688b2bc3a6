"""POST /v1/entries/batch through a real server: all or nothing, per-item errors, idempotency, fan-out."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from identity import canonical, records
from node.service import Node
from node.store import projections
from node.store.sealing import POOL_MIN_RECORDS
from sync import workers
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import count, entry_record, get_json, post, self_signer, stored_body
from wire.api import MAX_BATCH

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
BATCH = "/v1/entries/batch"


def item(content: str, **over: Any) -> dict[str, Any]:
    return {"entry_type": "finding", "performative": "inform", "content": content, **over}


async def batch(
    client: TestClient, who: Any, entries: Any, status: int, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    resp = await client.post(BATCH, json={"entries": entries}, headers={**who.headers, **(headers or {})})
    data: dict[str, Any] = await resp.json(content_type=None)
    assert resp.status == status, data
    return data


async def test_node_signed_batch_stores_every_entry_in_order(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    alice = await make_agent("alice")
    out = await batch(client, alice, [item(f"batch finding {i}", tags=[f"t{i}"]) for i in range(5)], 201)
    results = out["results"]
    assert [r["created"] for r in results] == [True] * 5
    assert [r["entry"]["content"] for r in results] == [f"batch finding {i}" for i in range(5)]
    assert [r["entry"]["tags"] for r in results] == [[f"t{i}"] for i in range(5)]
    ids = [r["entry"]["id"] for r in results]
    assert ids == sorted(ids) and len(set(ids)) == 5
    for r in results:  # every stored record verifies with nothing but the record
        record = await get_json(client, f"/v1/entries/{r['entry']['record_hash']}", alice)
        assert record["entries"][0]["signature"] == r["entry"]["signature"]
        assert r["entry"]["author_id"] == alice.agent_id
    assert await count(node, "entries") == 5
    found = await get_json(client, "/v1/search", alice, params={"q": "finding"})
    assert len(found["entries"]) == 5


async def test_author_signed_records_and_their_errors(client: TestClient, node: Node, clock: FakeClock) -> None:
    bob = await self_signer(node, "bob")
    now = node.now_ms()
    first = entry_record(bob.key, "signed one", created_ms=now)
    second = entry_record(bob.key, "signed two", created_ms=now + 1)
    out = await batch(client, bob, [{"record": first}, {"record": second}], 201)
    assert [r["entry"]["record_hash"] for r in out["results"]] == [
        records.compute_hash(first),
        records.compute_hash(second),
    ]
    # the same records again: stored already, so created is false and nothing is written
    again = await batch(client, bob, [{"record": first}, {"record": second}], 200)
    assert [r["created"] for r in again["results"]] == [False, False]
    assert await count(node, "entries") == 2

    tampered = {**entry_record(bob.key, "tampered", created_ms=now + 2), "content": "changed after signing"}
    fresh = entry_record(bob.key, "would be fine", created_ms=now + 3)
    problem = await batch(client, bob, [{"record": fresh}, {"record": tampered}], 422)
    assert problem["code"] == "record_bad_signature"
    assert problem["field"].startswith("$.entries[1].record")
    # a node-signed item from an agent that holds its own key names the item
    problem = await batch(client, bob, [{"record": fresh}, item("unsigned")], 422)
    assert (problem["code"], problem["field"]) == ("agent_signs_own_records", "$.entries[1]")
    assert await count(node, "entries") == 2


async def test_one_bad_item_stores_nothing(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    cases: list[tuple[list[Any], int, str, str]] = [
        ([item("fine"), item("   ")], 422, "validation_error", "$.entries[1].content"),
        ([item("fine"), item("bad confidence", confidence=2)], 422, "validation_error", "$.entries[1].confidence"),
        ([item("fine"), {"entry_type": "finding"}], 422, "validation_error", "$.entries[1].performative"),
        ([item("fine"), item("x", colour="red")], 422, "validation_error", "$.entries[1].colour"),
        ([item("fine"), "not an object"], 422, "validation_error", "$.entries[1]"),
        (
            [item("fine"), item("dangling", links=[{"target": "999999", "link_type": "supports"}])],
            404,
            "target_not_found",
            "$.entries[1].links[0].target",
        ),
        ([item("fine", idempotency_key="k"), item("two", idempotency_key="k")], 422, "idempotency_key_repeated", ""),
    ]
    for entries, status, code, field in cases:
        problem = await batch(client, alice, entries, status)
        assert problem["code"] == code, problem
        if field:
            assert problem["field"] == field, problem
    assert await count(node, "entries") == 0


async def test_batch_shape_limits(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    for entries in ([], [item(f"n{i}") for i in range(MAX_BATCH + 1)]):
        problem = await batch(client, alice, entries, 422)
        assert (problem["code"], problem["field"]) == ("validation_error", "$.entries")
    for body in ({}, {"entries": "x"}, [item("a list is not the envelope")], {"entries": [item("a")], "extra": 1}):
        resp = await client.post(BATCH, json=body, headers=alice.headers)
        assert resp.status == 422, await resp.text()
    problem = await batch(client, alice, [item("keyed")], 422, headers={"Idempotency-Key": "k"})
    assert (problem["code"], problem["field"]) == ("idempotency_header_in_batch", "Idempotency-Key")
    resp = await client.post(BATCH, data=b"{not json", headers={**alice.headers, "Content-Type": "application/json"})
    assert resp.status == 400 and (await resp.json())["code"] == "invalid_json"
    assert await count(node, "entries") == 0
    full = await batch(client, alice, [item(f"entry {i}") for i in range(MAX_BATCH)], 201)
    assert len(full["results"]) == MAX_BATCH


async def test_auth(client: TestClient, make_agent: MakeAgent, admin_headers: dict[str, str], node: Node) -> None:
    resp = await client.post(BATCH, json={"entries": [item("x")]})
    assert resp.status == 401
    resp = await client.post(BATCH, json={"entries": [item("x")]}, headers=admin_headers)
    assert resp.status == 403 and (await resp.json())["code"] == "agent_key_required"
    # a record signed by someone else is refused, naming the item
    alice = await make_agent("alice")
    mallory = await self_signer(node, "mallory")
    foreign = entry_record(mallory.key, "not alice's", created_ms=node.now_ms())
    problem = await batch(client, alice, [item("mine"), {"record": foreign}], 403)
    assert (problem["code"], problem["field"]) == ("forbidden", "$.entries[1].record.author_id")
    assert await count(node, "entries") == 0


async def test_idempotent_retry_returns_the_originals(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    entries = [item(f"keyed {i}", idempotency_key=f"key-{i}") for i in range(3)]
    first = await batch(client, alice, entries, 201)
    retry = await batch(client, alice, entries, 200)
    assert [r["created"] for r in retry["results"]] == [False] * 3
    assert [r["entry"] for r in retry["results"]] == [r["entry"] for r in first["results"]]
    # a batch mixing a used key and a new one creates only the new entry
    mixed = await batch(client, alice, [entries[1], item("new one", idempotency_key="key-9")], 201)
    assert [r["created"] for r in mixed["results"]] == [False, True]
    assert mixed["results"][0]["entry"] == first["results"][1]["entry"]
    # keys are shared with single posts
    resp = await client.post(
        "/v1/entries", json=item("other words"), headers={**alice.headers, "Idempotency-Key": "key-0"}
    )
    assert resp.status == 200 and (await resp.json())["id"] == first["results"][0]["entry"]["id"]
    assert await count(node, "entries") == 4
    assert await count(node, "idempotency") == 4


async def test_same_words_twice_in_one_batch(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    # identical items make the identical record: one entry, the second item reports it as not created
    out = await batch(client, alice, [item("echo"), item("echo")], 201)
    assert [r["created"] for r in out["results"]] == [True, False]
    assert out["results"][0]["entry"] == out["results"][1]["entry"]
    # same words, different tags: the same record hash, so the second moves 1 ms later and is its own entry
    out = await batch(client, alice, [item("twin", tags=["a"]), item("twin", tags=["b"])], 201)
    first, second = (r["entry"] for r in out["results"])
    assert first["record_hash"] != second["record_hash"]
    assert first["created_at"] < second["created_at"]
    assert await count(node, "entries") == 3


async def test_concurrent_batches_of_the_same_words_all_land(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    """Four batches in one millisecond (the clock stands still), the same 30 contents each with other tags:
    every item of three of them collides with the first's; all of a batch's taken items move 1 ms together,
    so none runs out of retries (one item per retry did: 409 hash_taken)."""
    alice = await make_agent("alice")
    batches = [[item(f"reading {i}", tags=[f"run-{b}"]) for i in range(30)] for b in range(4)]
    outs = await asyncio.gather(*(batch(client, alice, entries, 201) for entries in batches))
    hashes = {r["entry"]["record_hash"] for out in outs for r in out["results"]}
    assert len(hashes) == 120 and await count(node, "entries") == 120


async def test_retraction_inside_a_batch_and_of_anothers_entry(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    own = await post(client, alice, content="to be withdrawn")
    out = await batch(
        client,
        alice,
        [
            item(
                "withdrawn", performative="retract", links=[{"target": own["record_hash"], "link_type": "supersedes"}]
            ),
            item("a fresh finding"),
        ],
        201,
    )
    assert out["results"][0]["entry"]["performative"] == "retract"
    read = await get_json(client, f"/v1/entries/{own['id']}", alice)
    assert read["entries"][0]["retracted"] is True
    before = await count(node, "entries")
    problem = await batch(
        client,
        bob,
        [
            item("bob's fine entry"),
            item("no", performative="retract", links=[{"target": str(own["id"]), "link_type": "supersedes"}]),
        ],
        403,
    )
    assert (problem["code"], problem["field"]) == ("retract_not_own", "$.entries[1].links[0].target")
    assert await count(node, "entries") == before


async def test_entries_of_one_batch_that_refer_to_each_other(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    """Stored in one set-based append: links, contradictions and retractions among the batch's own entries are
    decided as if the entries had come one by one, and a rebuild from the log gives the same projections."""
    alice = await make_agent("alice")
    claim = await post(client, alice, content="the cache is warm")
    bob = await self_signer(node, "bob")
    now = node.now_ms()
    answer = entry_record(
        bob.key,
        "the cache is cold",
        created_ms=now,
        links=[{"target": claim["record_hash"], "link_type": "contradicts", "annotation": ""}],
    )
    withdrawn = entry_record(bob.key, "a hasty note", created_ms=now + 1)
    retract = entry_record(
        bob.key,
        "withdrawn",
        created_ms=now + 2,
        performative="retract",
        links=[{"target": records.compute_hash(withdrawn), "link_type": "supersedes", "annotation": ""}],
    )
    out = await batch(client, bob, [{"record": r} for r in (answer, withdrawn, retract)], 201)
    assert [r["created"] for r in out["results"]] == [True, True, True]
    inbox = await get_json(client, "/v1/inbox", alice)
    assert [(n["entry_id"], n["tier"]) for n in inbox["notifications"]] == [(out["results"][0]["entry"]["id"], 1)]
    read = await get_json(client, f"/v1/entries/{out['results'][1]['entry']['id']}", bob)
    assert read["entries"][0]["retracted"] is True
    # the retraction may come first in the batch: rules that read other entries run after the append
    later = entry_record(bob.key, "another hasty note", created_ms=now + 3)
    first = entry_record(
        bob.key,
        "withdrawn too",
        created_ms=now + 4,
        performative="retract",
        links=[{"target": records.compute_hash(later), "link_type": "supersedes", "annotation": ""}],
    )
    out2 = await batch(client, bob, [{"record": first}, {"record": later}], 201)
    read = await get_json(client, f"/v1/entries/{out2['results'][1]['entry']['id']}", bob)
    assert read["entries"][0]["retracted"] is True

    def rebuilt_equals(conn: Any) -> bool:
        before = projections.snapshot(conn)
        projections.rebuild(conn)
        return before == projections.snapshot(conn)

    assert await node.db.write(rebuilt_equals)


async def test_batch_entries_reach_subscribers(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    resp = await client.post("/v1/subscriptions", json={"tags": ["watch"]}, headers=bob.headers)
    assert resp.status == 201
    await batch(
        client, alice, [item("seen", tags=["watch"]), item("unseen"), item("to bob", directed_to=[bob.agent_id])], 201
    )
    inbox = await get_json(client, "/v1/inbox", bob)
    kinds = sorted((n["tags"], n["directed_to_me"]) for n in inbox["notifications"])
    assert kinds == [([], True), (["watch"], False)]


async def test_openapi_describes_the_batch(client: TestClient) -> None:
    doc = await (await client.get("/openapi.json")).json()
    op = doc["paths"]["/v1/entries/batch"]["post"]
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    target = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    items = target["properties"]["entries"]["items"]
    assert {ref["$ref"].rsplit("/", 1)[1] for ref in items["oneOf"]} == {"PostEntry", "SignedSubmission"}
    assert target["properties"]["entries"]["maxItems"] == MAX_BATCH
    assert {"200", "201", "401", "403", "422"} <= set(op["responses"])


async def test_a_large_batch_is_signed_in_worker_processes_as_on_threads(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    """From POOL_MIN_RECORDS node-signed entries on, a batch is signed in worker processes once they are up
    (the first such batch starts them and signs on threads): the same records, refusals and errors as on threads."""
    alice = await make_agent("alice")
    pool = workers.WorkerPool(1)
    node.sealing.pool = pool
    try:
        size = max(POOL_MIN_RECORDS, 40)
        first = await batch(client, alice, [item(f"threads {i}", tags=[f"t{i}"]) for i in range(size)], 201)
        assert pool.runs == 0  # signed on threads while the workers start
        for _ in range(600):
            if pool.up:
                break
            await asyncio.sleep(0.1)
        assert pool.up
        bad = [item(f"pooled {i}", tags=[f"t{i}"]) for i in range(size)]
        bad[size - 3] = item("hidden tag", tags=["\u200b"])
        problem = await batch(client, alice, bad, 422)
        assert pool.runs == 1
        assert (problem["code"], problem["field"]) == ("invisible_only", f"$.entries[{size - 3}].tags[0]")
        second = await batch(client, alice, [item(f"pooled {i}", tags=[f"t{i}"]) for i in range(size)], 201)
        assert pool.runs == 2
    finally:
        pool.close()
    key = await node.sealing.signing_key(alice.agent_id)
    assert key is not None
    for r in first["results"] + second["results"]:
        body = await stored_body(node, r["entry"]["record_hash"])
        record = json.loads(body)
        assert records.verify(record) == r["entry"]["record_hash"]  # the signature verifies
        resigned = records.sign({k: v for k, v in record.items() if k != "signature"}, key)
        assert canonical.canonical_bytes(resigned) == body  # Ed25519 is deterministic: the bytes threads would make
    assert await count(node, "entries") == 2 * size


async def test_a_large_author_signed_batch_is_checked_in_worker_processes_as_on_threads(
    client: TestClient, node: Node, clock: FakeClock
) -> None:
    """From POOL_MIN_RECORDS records an agent signed, a batch is checked in the worker processes once they are up:
    the same entries, and each refusal (the signature, the author, the clock) as on threads, naming its item."""
    bob = await self_signer(node, "bob")
    carol = await self_signer(node, "carol")
    pool = workers.WorkerPool(1)
    node.sealing.pool = pool
    size = max(POOL_MIN_RECORDS, 40)
    now = node.now_ms()

    def signed(tag: str, offset: int) -> list[dict[str, Any]]:
        return [{"record": entry_record(bob.key, f"{tag} {i}", created_ms=now + offset + i)} for i in range(size)]

    refused = [
        ({**entry_record(bob.key, "tampered", created_ms=now), "content": "changed"}, 422, "record_bad_signature"),
        (entry_record(carol.key, "not bob's", created_ms=now), 403, "forbidden"),
        (entry_record(bob.key, "from the future", created_ms=now + 3_600_000), 422, "clock_skew"),
    ]
    try:
        on_threads = [await batch(client, bob, [*signed("threads", 0)[:-1], {"record": r}], s) for r, s, _ in refused]
        await batch(client, bob, signed("threads", 0), 201)
        assert pool.runs == 0
        for _ in range(600):
            if pool.up:
                break
            await asyncio.sleep(0.1)
        assert pool.up
        pooled = [await batch(client, bob, [*signed("pooled", 1_000)[:-1], {"record": r}], s) for r, s, _ in refused]
        assert pool.runs == len(refused)
        out = await batch(client, bob, signed("pooled", 1_000), 201)
        assert pool.runs == len(refused) + 1
    finally:
        pool.close()
    for threads, pooled_problem, (_, status, code) in zip(on_threads, pooled, refused, strict=True):
        assert pooled_problem == threads and threads["status"] == status, (pooled_problem, threads)
        assert (threads["code"], threads["field"].split(".record")[0]) == (code, f"$.entries[{size - 1}]")
    expected = [records.compute_hash(item["record"]) for item in signed("pooled", 1_000)]
    assert [r["entry"]["record_hash"] for r in out["results"]] == expected
    assert await count(node, "entries") == 2 * size
