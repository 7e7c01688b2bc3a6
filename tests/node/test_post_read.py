"""Post and read through a real server: node-signed and author-signed entries, reads by id, hash and ids=."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from identity import canonical, keys, records
from node.service import Node
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import (
    count,
    entry_record,
    get_json,
    hash_of,
    ingest,
    link,
    post,
    problem,
    self_signer,
    stored_body,
)

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def test_node_signed_post_returns_a_verifiable_entry(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    alice = await make_agent("alice")
    other = keys.SigningKey.generate().did
    entry = await post(
        client,
        alice,
        content="  WAL lets readers proceed\r\nwhile one writer commits  ",
        confidence=0.83333,
        tags=["sqlite", "db", "sqlite"],
        directed_to=[other],
        metadata={"source": "docs", "weight": 1.0},
    )
    assert entry["author_id"] == alice.agent_id
    assert entry["content"] == "  WAL lets readers proceed\nwhile one writer commits"
    assert entry["confidence"] == 0.8333
    assert entry["tags"] == ["db", "sqlite"]
    assert entry["directed_to"] == [other]
    assert entry["metadata"] == {"source": "docs", "weight": 1}
    assert entry["retracted"] is False and entry["superseded"] is False
    assert entry["record_hash"] == canonical.record_hash(
        alice.agent_id, entry["created_at"], "finding", "inform", entry["content"]
    )
    assert entry["content_fingerprint"] == canonical.content_fingerprint(entry["content"])
    # Any node can verify the stored record with nothing but the record.
    record = json.loads(await stored_body(node, entry["record_hash"]))
    assert records.verify(record) == entry["record_hash"]
    assert record["signature"] == entry["signature"]


async def test_author_signed_record_is_stored_byte_for_byte(client: TestClient, node: Node) -> None:
    bob = await self_signer(node, "bob")
    record = entry_record(bob.key, "signed by bob himself", created_ms=node.now_ms(), tags=["a", "b"])
    resp = await client.post("/v1/entries", json={"record": record}, headers=bob.headers)
    entry = await resp.json()
    assert resp.status == 201, entry
    assert entry["record_hash"] == hash_of(record)
    assert entry["signature"] == record["signature"]
    assert await stored_body(node, entry["record_hash"]) == canonical.canonical_bytes(record)
    # Submitting the same record again stores nothing new.
    resp = await client.post("/v1/entries", json={"record": record}, headers=bob.headers)
    assert resp.status == 200
    assert (await resp.json())["id"] == entry["id"]


async def test_self_signing_agent_cannot_send_unsigned_fields(client: TestClient, node: Node) -> None:
    bob = await self_signer(node, "bob")
    before = await count(node)
    problem(await post(client, bob, 422, content="unsigned"), 422, "agent_signs_own_records")
    assert await count(node) == before


async def test_agent_cannot_submit_a_record_authored_by_someone_else(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    alice = await make_agent("alice")
    bob = await self_signer(node, "bob")
    record = entry_record(bob.key, "bob's words", created_ms=node.now_ms())
    before = await count(node)
    resp = await client.post("/v1/entries", json={"record": record}, headers=alice.headers)
    problem(await resp.json(), 403, "forbidden", "$.record.author_id")
    assert await count(node) == before


async def test_bad_signed_records_are_refused_and_nothing_is_stored(client: TestClient, node: Node) -> None:
    bob = await self_signer(node, "bob")
    now = node.now_ms()
    good = entry_record(bob.key, "original words", created_ms=now)
    tampered = {**good, "content": "changed words"}
    unsorted_tags = entry_record(bob.key, "tags out of order", created_ms=now, tags=["b", "a"])
    future = entry_record(bob.key, "from the future", created_ms=now + 3600_000)
    bad_time = {**good, "created_at": good["created_at"].replace("Z", "+00:00")}
    link_kind = {**good, "kind": "link"}
    unknown_field = records.sign({**records.unsigned(good), "colour": "blue"}, bob.key)
    cases = [
        (tampered, 422, "record_bad_signature", "$.record.signature"),
        (unsorted_tags, 422, "record_not_canonical", "$.record.tags"),
        (future, 422, "clock_skew", "$.record.created_at"),
        (bad_time, 422, "record_not_canonical", "$.record.created_at"),
        (link_kind, 422, "record_malformed", "$.record.kind"),
        (unknown_field, 422, "record_schema", "$.record.colour"),
        ({**good, "signature": 7}, 422, "record_bad_signature", "$.record.signature"),
    ]
    before = await count(node)
    for record, status, code, field in cases:
        resp = await client.post("/v1/entries", json={"record": record}, headers=bob.headers)
        problem(await resp.json(), status, code, field)
    assert await count(node) == before


async def test_read_by_id_hash_and_ids(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    first = await post(client, alice, content="first entry")
    second = await post(client, alice, content="second entry")
    by_id = await get_json(client, f"/v1/entries/{first['id']}", alice)
    by_hash = await get_json(client, f"/v1/entries/{first['record_hash']}", alice)
    assert by_id["entries"] == by_hash["entries"] == [first]
    missing_hash = "f" * 64
    many = await get_json(
        client,
        "/v1/entries",
        alice,
        params={"ids": f"{first['id']},{second['record_hash']},{missing_hash},999999,999999,{first['id']}"},
    )
    assert [e["id"] for e in many["entries"]] == [first["id"], second["id"]]
    assert many["missing"] == [missing_hash, "999999"]
    # repeated parameters work like a comma list
    repeated = await get_json(
        client, "/v1/entries", alice, params=[("ids", str(first["id"])), ("ids", str(second["id"]))]
    )
    assert [e["id"] for e in repeated["entries"]] == [first["id"], second["id"]]


async def test_read_unknown_entry_is_404(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    for ref in ["12345", "a" * 64, "not-an-id"]:
        problem(await get_json(client, f"/v1/entries/{ref}", alice, 404), 404, "entry_not_found")


async def test_odd_entry_refs_never_500(client: TestClient, make_agent: MakeAgent) -> None:
    """Unicode digits and ids beyond SQLite's integer range are unknown entries, not server errors."""
    alice = await make_agent("alice")
    entry = await post(client, alice, content="one")
    for ref in ["²", "١", "9" * 30, "0" * 40 + str(entry["id"])]:
        resp = await client.get(f"/v1/entries/{ref}", headers=alice.headers)
        assert resp.status == 404, (ref, await resp.text())
    for ref in ["²", "9" * 30]:
        problem(
            await post(client, alice, 404, content=f"link to {ref}", links=[{"target": ref, "link_type": "supports"}]),
            404,
            "target_not_found",
            "$.links[0].target",
        )
    resp = await client.get("/v1/entries", params={"ids": "²,99999999999999999999"}, headers=alice.headers)
    assert resp.status == 200
    assert (await resp.json())["missing"] == ["²", "99999999999999999999"]


async def test_admin_can_read_and_get_agent(client: TestClient, make_agent: MakeAgent, admin_headers: dict) -> None:
    alice = await make_agent("alice")
    entry = await post(client, alice, content="visible to the admin")
    resp = await client.get(f"/v1/entries/{entry['id']}", headers=admin_headers)
    assert resp.status == 200
    resp = await client.get(f"/v1/agents/{alice.agent_id}", headers=admin_headers)
    agent = await resp.json()
    assert agent["agent_id"] == alice.agent_id and agent["entry_count"] == 1 and agent["display_name"] == "Alice"
    resp = await client.get("/v1/agents/did:key:zUnknown", headers=alice.headers)
    problem(await resp.json(), 404, "agent_not_found")


async def test_node_info_and_health(client: TestClient, node: Node) -> None:
    info = await (await client.get("/v1/node")).json()
    assert info["node_id"] == node.node_id
    assert info["limits"]["max_hops"] == 3 and info["limits"]["max_page"] == 200
    assert await (await client.get("/healthz")).json() == {"status": "ok"}


async def test_same_content_later_is_a_new_entry(client: TestClient, make_agent: MakeAgent, clock: FakeClock) -> None:
    """created_at is part of the hash: the same words a second later are a second entry with the same fingerprint."""
    alice = await make_agent("alice")
    first = await post(client, alice, content="repeated words")
    clock.advance(1)
    second = await post(client, alice, content="repeated words")
    assert second["id"] != first["id"] and second["record_hash"] != first["record_hash"]
    assert second["content_fingerprint"] == first["content_fingerprint"]


async def test_same_words_same_millisecond_different_fields_are_two_entries(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    """The record hash covers author, time, type, performative and content only. Two different node-signed
    posts that would share a hash (the clock did not move) must not collapse into the first one."""
    alice = await make_agent("alice")
    target = await post(client, alice, content="some target")
    first = await post(client, alice, content="+1", performative="confirm", tags=["x"])
    second = await post(
        client,
        alice,
        content="+1",
        performative="confirm",
        tags=["y"],
        links=[{"target": target["record_hash"], "link_type": "supports"}],
    )
    assert second["id"] != first["id"] and second["tags"] == ["y"] and first["tags"] == ["x"]
    assert second["created_at"] > first["created_at"]
    # an identical repeat in the same millisecond is the same record: answered with the original
    resp = await client.post(
        "/v1/entries",
        json={"entry_type": "finding", "performative": "confirm", "content": "+1", "tags": ["x"]},
        headers=alice.headers,
    )
    assert resp.status == 200 and (await resp.json())["id"] == first["id"]
    record = json.loads(await stored_body(node, second["record_hash"]))
    assert records.verify(record) == second["record_hash"]


async def test_tags_and_annotations_are_projected_exactly(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    """Projected rows hold each value whole, a NUL or an emoji included (never cut by a JSON round trip). A client
    may not submit a NUL (node/store/submission.py), but a peer may still bring one: this record arrives as sync's
    do."""
    alice = await make_agent("alice")
    target = await post(client, alice, content="target")
    link = {"target": target["record_hash"], "link_type": "supports", "annotation": "x\x00y"}
    record = entry_record(
        keys.SigningKey.generate(),
        "odd labels",
        created_ms=node.now_ms(),
        tags=sorted(["a\x00b", "a", "café 😀"]),
        links=[link],
    )
    assert await ingest(node, record) == "saved"
    entry = {
        "id": await node.db.read(
            lambda c: c.execute("SELECT id FROM entries WHERE content = 'odd labels'").fetchone()[0]
        ),
        "record_hash": hash_of(record),
    }

    def rows(conn: sqlite3.Connection) -> tuple[list[str], list[str]]:
        tags = conn.execute("SELECT tag FROM entry_tags WHERE entry_id = ? ORDER BY tag", (entry["id"],))
        notes = conn.execute("SELECT annotation FROM links WHERE origin_hash = ?", (entry["record_hash"],))
        return [r[0] for r in tags], [r[0] for r in notes]

    assert await node.db.read(rows) == (["a", "a\x00b", "café 😀"], ["x\x00y"])


async def test_a_post_answers_what_a_read_of_it_returns(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    """The writer renders a new entry's answer from its sealed record and its state in the transaction, not
    from a read of its row: for every kind of field and state, the answer is exactly what a read returns."""
    alice, bob = await make_agent("alice"), await make_agent("bob")
    trusted = bob.agent_id
    await node.db.write(
        lambda c: c.execute("INSERT INTO trust_scores VALUES (?, 3, 1, 0.66, 0.7071, 3.0, 1.0)", (trusted,))
    )
    target = await post(client, alice, content="to be retracted")
    supersedes = [{"target": target["record_hash"], "link_type": "supersedes"}]
    answers = [
        await post(client, alice, content="integral one", confidence=1),
        await post(client, alice, content="integral zero", confidence=0),
        await post(
            client,
            alice,
            content="ünïcödé\nlines  ",
            confidence=0.33333,
            tags=["é", "b", "a"],
            directed_to=[trusted],
            metadata={"z": {"b": [1, {"y": 2, "x": 1.5}], "a": None}, "a": "first", "m": True},
            truth_state="simulation",
            scope="local",
        ),
        await post(client, bob, content="the author has a trust score"),
        await post(
            client,
            bob,
            content="claims to supersede",
            links=supersedes,
        ),
        await post(
            client,
            alice,
            performative="retract",
            content="withdrawn",
            links=supersedes,
        ),
    ]
    signer = await self_signer(node, "carol")
    record = entry_record(signer.key, "signed by carol", created_ms=node.now_ms(), tags=["x"], confidence=1)
    # links to carol's entry stored before it is: its answer carries their state
    await link(
        client, bob, source=answers[4]["record_hash"], target=records.compute_hash(record), link_type="supersedes"
    )
    await link(
        client, bob, source=answers[3]["record_hash"], target=records.compute_hash(record), link_type="contradicts"
    )
    resp = await client.post("/v1/entries", json={"record": record}, headers=signer.headers)
    assert resp.status == 201
    answers.append(await resp.json())
    assert answers[-1]["superseded_claims"] == [answers[4]["record_hash"]]
    resp = await client.post(
        "/v1/entries/batch",
        json={"entries": [{"entry_type": "finding", "performative": "inform", "content": f"in a batch {i}",
                           "metadata": {"i": i, "b": [i]}} for i in range(3)]},
        headers=alice.headers,
    )  # fmt: skip
    assert resp.status == 201
    answers += [item["entry"] for item in (await resp.json())["results"]]
    assert answers[3]["community_confidence"] == 0.7071
    assert answers[4]["superseded"] is False
    for answer in answers:
        # compared as JSON text: key order (metadata's too) and number spelling (1 against 1.0) count
        path = f"/v1/entries/{answer['id']}?include_synthetic=true"
        assert [json.dumps(answer)] == [json.dumps(e) for e in (await get_json(client, path, alice))["entries"]]
