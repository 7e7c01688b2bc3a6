"""node.agents.key_events: key events over REST (`POST /v1/agents/{id}/key-events`), records signed by a rotated
key (`signing_key`) on the REST write paths, and the rotation of a node-kept key (`POST /v1/agents/{id}/signing-key`,
`bbs agent rotate-signing-key`), on a real aiohttp server over a real SQLite node with real Ed25519 keys."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from identity import canonical, key_history, keys, records, vouching
from node import cli
from node.agents import key_events, portable
from node.agents import service as agents
from node.errors import InvalidInput
from node.ops import datalock
from node.ops.datadir import DataDir
from node.service import Node
from node.store import authority, db
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import SelfSigner, count, entry_record, get_json, hash_of, link_record, problem, self_signer
from tests.node.federation import v3_story
from wire import unsigned
from wire.api import KeyEventIn
from wire.time import format_ms


def signed(body: dict[str, Any], signer: keys.SigningKey) -> dict[str, Any]:
    """`body` signed by `signer`, naming it in `signing_key` when it is not the author's first key."""
    if signer.did != body["author_id"]:
        body = {**body, "signing_key": signer.did}
    return records.sign(body, signer)


def rotation(
    author: str,
    signer: keys.SigningKey,
    new: keys.SigningKey,
    vouched: list[str],
    *,
    seq: int = 1,
    prior: str | None = None,
    created_ms: int,
) -> dict[str, Any]:
    """A `rotate` key event of `author` signed by `signer`, installing `new`, vouching for `vouched`."""
    body: dict[str, Any] = {
        "kind": "key_event",
        "schema_version": "v1",
        "author_id": author,
        "created_at": format_ms(created_ms),
        "event": "rotate",
        "seq": seq,
        "key": new.did,
        "vouches": [vouching.vouch(signer.did, vouched).as_json()],
    }
    if prior is not None:
        body["prior"] = prior
    return signed(body, signer)


def page(author: str, signer: keys.SigningKey, event: dict[str, Any], versions: list[str]) -> dict[str, Any]:
    """Page 0 of `event`'s vouch for `signer` (fewer than 1,024 versions)."""
    members, proof = vouching.page(vouching.sorted_versions(versions), 0)
    body = {
        "kind": "vouch_page",
        "schema_version": "v1",
        "author_id": author,
        "created_at": event["created_at"],
        "event": hash_of(event),
        "subject": signer.did,
        "page": 0,
        "versions": members,
        "proof": proof,
    }
    return signed(body, signer)


def version_of(record: dict[str, Any]) -> str:
    body = canonical.canonical_bytes(record)
    return canonical.sha256_hex(body) if record["kind"] == "entry" else hash_of(record)


async def submit(client: TestClient, who: SelfSigner, event: dict[str, Any], pages: list[Any], status: int) -> Any:
    resp = await client.post(
        f"/v1/agents/{who.agent_id}/key-events", json={"record": event, "pages": pages}, headers=who.headers
    )
    data = await resp.json(content_type=None)
    assert resp.status == status, data
    return data


async def post_signed(client: TestClient, who: Any, record: dict[str, Any], status: int) -> Any:
    resp = await client.post("/v1/entries", json={"record": record}, headers=who.headers)
    data = await resp.json(content_type=None)
    assert resp.status == status, data
    return data


async def rotated(client: TestClient, node: Node, clock: FakeClock) -> tuple[SelfSigner, keys.SigningKey, str]:
    """A self-signing agent with one post, rotated to a new key whose event vouches for that post; (agent, new key,
    the old post's hash)."""
    who = await self_signer(node, "rover")
    now = int(clock() * 1000)
    old = entry_record(who.key, "before the rotation", created_ms=now - 1000)
    await post_signed(client, who, old, 201)
    new = keys.SigningKey.generate()
    vouched = [version_of(old), version_of(await identity_document(node, who.agent_id))]
    event = rotation(who.agent_id, who.key, new, vouched, created_ms=now)
    out = await submit(client, who, event, [page(who.agent_id, who.key, event, vouched)], 201)
    assert out["created"] is True and out["pages_stored"] == 1 and out["address"] == hash_of(event)
    assert out["key_history"]["current_key"] == new.did
    return who, new, hash_of(old)


async def identity_document(node: Node, agent_id: str) -> dict[str, Any]:
    def run(conn: sqlite3.Connection) -> bytes:
        return bytes(conn.execute("SELECT r.body FROM agents a JOIN records r ON r.hash = a.doc_hash WHERE a.id = ?",
                                  (agent_id,)).fetchone()[0])  # fmt: skip

    return dict(json.loads(await node.db.read(run)))


# ---- a client's key event ---------------------------------------------------------------------------------------


async def test_a_rotation_then_posts_by_the_new_key_are_stored_and_the_old_key_is_refused(
    client: TestClient, node: Node, clock: FakeClock
) -> None:
    who, new, old_post = await rotated(client, node, clock)
    now = int(clock() * 1000)
    fresh = signed(
        {**_unsigned(entry_record(who.key, "after, new key", created_ms=now)), "author_id": who.agent_id}, new
    )
    stored = await post_signed(client, who, fresh, 201)
    assert stored["record_hash"] == hash_of(fresh) and stored["author_id"] == who.agent_id
    link = signed(_unsigned(link_record(who.key, hash_of(fresh), old_post, "supports", created_ms=now)), new)
    resp = await client.post("/v1/links", json={"record": link}, headers=who.headers)
    assert resp.status == 201, await resp.text()
    before = await count(node)
    thief = entry_record(who.key, "after, old key", created_ms=now)  # the first key, not vouched for
    problem(await post_signed(client, who, thief, 422), 422, "not_current_key", "$.record.author_id")
    assert await count(node) == before
    declare = records.sign(
        unsigned.unsigned_declare("t1", who.agent_id, format_ms(now), node.node_id, {"title": "by the old key"}),
        who.key,
    )
    resp = await client.post("/v1/agent-workflows/tasks", json={"record": declare}, headers=who.headers)
    problem(await resp.json(), 422, "not_current_key", "$.record.author_id")
    assert await count(node) == before
    shown = await get_json(client, f"/v1/agents/{who.agent_id}", who)
    history = shown["key_history"]
    assert history["current_key"] == new.did
    assert [(e["seq"], e["event"], e["key"], e["signer"], e["in_chain"]) for e in history["events"]] == [
        (1, "rotate", new.did, who.agent_id, True)
    ]


def _unsigned(record: dict[str, Any]) -> dict[str, Any]:
    return records.unsigned(record)


async def test_a_key_event_submitted_again_is_200_and_stores_nothing(
    client: TestClient, node: Node, clock: FakeClock
) -> None:
    who, _, _ = await rotated(client, node, clock)
    (event,) = await node.db.read(lambda c: [bytes(r[0]) for r in c.execute(
        "SELECT body FROM records WHERE kind = 'key_event'")])  # fmt: skip
    before = await count(node)
    out = await submit(client, who, json.loads(event), [], 200)
    assert out["created"] is False and out["pages_stored"] == 0
    assert await count(node) == before


async def test_every_class_of_bad_key_event_is_a_422_problem_and_stores_nothing(
    client: TestClient, node: Node, clock: FakeClock
) -> None:
    who = await self_signer(node, "rover")
    now = int(clock() * 1000)
    new, stranger = keys.SigningKey.generate(), keys.SigningKey.generate()
    good = rotation(who.agent_id, who.key, new, [], created_ms=now)
    before = await count(node)
    bad_signature = {**good, "signature": rotation(who.agent_id, who.key, stranger, [], created_ms=now)["signature"]}
    cases: list[tuple[dict[str, Any], list[Any], int, str, str | None]] = [
        (bad_signature, [], 422, "record_bad_signature", "$.record.signature"),
        ({**_unsigned(good), "signing_key": who.agent_id, "signature": good["signature"]}, [], 422,
         "record_not_canonical", "$.record.signing_key"),
        (records.sign({k: v for k, v in _unsigned(good).items() if k != "vouches"}, who.key), [], 422,
         "record_schema", "$.record.vouches"),
        (entry_record(who.key, "not an event", created_ms=now), [], 422, "record_malformed", "$.record.kind"),
        (rotation(who.agent_id, stranger, new, [], created_ms=now), [], 422, "unauthorized_key_event", "$.record"),
        (rotation(who.agent_id, who.key, new, [], seq=2, prior="ab" * 32, created_ms=now), [], 422, "unknown_prior",
         "$.record.prior"),
        (rotation(who.agent_id, who.key, new, [], created_ms=now + 3_600_000), [], 422, "clock_skew",
         "$.record.created_at"),
        (good, [page(who.agent_id, stranger, good, ["cd" * 32])], 422, "bad_vouch_page", "$.pages[0]"),
        (good, [page(who.agent_id, who.key, rotation(who.agent_id, who.key, stranger, ["cd" * 32], created_ms=now),
                     ["cd" * 32])],
         422, "page_not_of_event", "$.pages[0].event"),
    ]  # fmt: skip
    for event, pages, status, code, field in cases:
        problem(await submit(client, who, event, pages, status), status, code, field)
        assert await count(node) == before, code
    other = await self_signer(node, "other")
    resp = await client.post(f"/v1/agents/{who.agent_id}/key-events", json={"record": good}, headers=other.headers)
    assert resp.status == 403
    assert await count(node) == before + 1  # only the other agent's identity document
    history = await get_json(client, f"/v1/agents/{who.agent_id}", who)
    assert history["key_history"] == {"current_key": who.agent_id, "events": [], "next": None, "recovery": None}


async def test_records_by_a_key_the_node_does_not_know_are_unknown_signing_key(
    client: TestClient, node: Node, clock: FakeClock
) -> None:
    who = await self_signer(node, "rover")
    now = int(clock() * 1000)
    unknown = keys.SigningKey.generate()
    before = await count(node)
    entry = signed(_unsigned(entry_record(who.key, "by a key no event installs", created_ms=now)), unknown)
    problem(await post_signed(client, who, entry, 422), 422, "unknown_signing_key", "$.record.signing_key")
    resp = await client.post("/v1/entries/batch", json={"entries": [{"record": entry}]}, headers=who.headers)
    problem(await resp.json(), 422, "unknown_signing_key", "$.entries[0].record.signing_key")
    forged = {**_unsigned(entry), "signature": who.key.sign(records.signing_bytes(entry))}
    problem(await post_signed(client, who, forged, 422), 422, "record_bad_signature", "$.record.signature")
    assert await count(node) == before


async def test_a_record_of_the_old_key_waits_for_no_pages_it_is_vouched_for_once_they_are_held(
    client: TestClient, node: Node, clock: FakeClock
) -> None:
    who = await self_signer(node, "rover")
    now = int(clock() * 1000)
    new = keys.SigningKey.generate()
    kept = entry_record(who.key, "signed before, vouched for", created_ms=now - 5000)
    vouched = [version_of(kept)]
    event = rotation(who.agent_id, who.key, new, vouched, created_ms=now)
    await submit(client, who, event, [], 201)  # its pages come in a later request
    problem(await post_signed(client, who, kept, 422), 422, "vouch_pages_missing", "$.record.author_id")
    out = await submit(client, who, event, [page(who.agent_id, who.key, event, vouched)], 201)
    assert out["created"] is False and out["pages_stored"] == 1
    assert (await post_signed(client, who, kept, 201))["record_hash"] == hash_of(kept)


# ---- a node-kept agent's rotation ----------------------------------------------------------------------------------


async def test_rotating_a_node_kept_key_keeps_the_id_and_signs_with_the_new_key(
    client: TestClient,
    node: Node,
    admin_headers: dict[str, str],
    make_agent: Callable[[str], Awaitable[AgentCreds]],
) -> None:
    creds = await make_agent("keeper")
    before = await post_entry(client, creds, "before the rotation")
    old_key = await node.db.read(lambda c: agents.signing_key(c, creds.agent_id))
    assert old_key is not None and old_key.did == creds.agent_id
    resp = await client.post(f"/v1/agents/{creds.agent_id}/signing-key", headers=admin_headers)
    rotated_key = await resp.json()
    assert resp.status == 201, rotated_key
    assert rotated_key["agent_id"] == creds.agent_id and rotated_key["vouched"] == 2  # its document and its post
    new_did = rotated_key["signing_key"]
    assert new_did != creds.agent_id and rotated_key["key_history"]["current_key"] == new_did
    kept = await node.db.read(lambda c: agents.signing_key(c, creds.agent_id))
    assert kept is not None and kept.did == new_did  # the old seed is forgotten
    after = await post_entry(client, creds, "after the rotation")
    body = await record_body(node, after["record_hash"])
    assert body["author_id"] == creds.agent_id and body["signing_key"] == new_did
    assert "signing_key" not in await record_body(node, before["record_hash"])
    resp = await client.post(
        "/v1/links",
        json={"source": after["record_hash"], "target": before["record_hash"], "link_type": "supports"},
        headers=creds.headers,
    )
    assert resp.status == 201, await resp.text()
    assert (await record_body(node, (await resp.json())["origin_hash"]))["signing_key"] == new_did
    resp = await client.post(
        "/v1/agent-workflows/messages", json={"message_type": "note", "body": "hello"}, headers=creds.headers
    )
    message = await resp.json()
    assert resp.status == 201, message
    (message_body,) = await node.db.read(lambda c: [bytes(r[0]) for r in c.execute(
        "SELECT body FROM records WHERE kind = 'message'")])  # fmt: skip
    assert json.loads(message_body)["signing_key"] == new_did
    # the old key's record after the rotation is refused, whoever holds it
    thief = entry_record(old_key, "a thief's", created_ms=node.now_ms())
    problem(await post_signed(client, creds, thief, 422), 422, "not_current_key", "$.record.author_id")
    # a task event is signed by the new key too, naming it (docs/format-v3.md 7.7)
    resp = await client.post("/v1/agent-workflows/tasks", json={"key": "t1", "title": "a task"}, headers=creds.headers)
    data = await resp.json()
    assert resp.status == 201, data
    (task_body,) = await node.db.read(lambda c: [bytes(r[0]) for r in c.execute(
        "SELECT body FROM records WHERE kind = 'task_event'")])  # fmt: skip
    assert json.loads(task_body)["signing_key"] == new_did
    # the identity file of a rotated agent carries its current key and the key history
    exported = await portable.export_identity(node, "keeper")
    assert (exported.agent_id, exported.key.did) == (creds.agent_id, new_did)
    assert [e["key"] for e in exported.key_history] == [new_did]
    # a second rotation builds on the first
    resp = await client.post(f"/v1/agents/{creds.agent_id}/signing-key", headers=admin_headers)
    second = await resp.json()
    assert resp.status == 201, second
    events = second["key_history"]["events"]
    assert [(e["seq"], e["signer"], e["key"], e["in_chain"]) for e in events] == [
        (1, creds.agent_id, new_did, True),
        (2, new_did, second["signing_key"], True),
    ]
    assert second["vouched"] == 4  # the post, the link, the message and the task event the first new key signed


async def test_rotation_of_an_agent_the_node_does_not_sign_for_is_refused(
    client: TestClient, node: Node, admin_headers: dict[str, str]
) -> None:
    who = await self_signer(node, "rover")
    resp = await client.post(f"/v1/agents/{who.agent_id}/signing-key", headers=admin_headers)
    problem(await resp.json(), 409, "key_not_kept")
    resp = await client.post("/v1/agents/nobody/signing-key", headers=admin_headers)
    assert resp.status == 404
    resp = await client.post(f"/v1/agents/{who.agent_id}/signing-key", headers=who.headers)
    assert resp.status == 403


async def post_entry(client: TestClient, who: AgentCreds, content: str) -> dict[str, Any]:
    resp = await client.post(
        "/v1/entries", json={"entry_type": "finding", "performative": "inform", "content": content}, headers=who.headers
    )
    data: dict[str, Any] = await resp.json()
    assert resp.status == 201, data
    return data


async def record_body(node: Node, record_hash: str) -> dict[str, Any]:
    raw = await node.db.read(lambda c: bytes(c.execute("SELECT body FROM records WHERE hash = ?", (record_hash,))
                                             .fetchone()[0]))  # fmt: skip
    return dict(json.loads(raw))


def test_bbs_agent_rotate_signing_key_on_a_data_folder(
    tmp_path: Path, capsys: Any, node_store: Callable[[], str | None]
) -> None:
    data = tmp_path / "node"
    store = node_store()
    assert cli.main(["init", "--data", str(data), *(["--store", store] if store else [])]) == 0
    assert cli.main(["agent", "create", "keeper", "--data", str(data), "--json"]) == 0
    capsys.readouterr()
    assert cli.main(["agent", "rotate-signing-key", "keeper", "--data", str(data), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["name"] == "keeper" and out["signing_key"] != out["agent_id"]

    def events(conn: sqlite3.Connection) -> list[dict[str, Any]]:
        return [json.loads(bytes(r[0])) for r in conn.execute("SELECT body FROM records WHERE kind = 'key_event'")]

    (event,) = db.read_sync(DataDir(data).store, events)
    assert event["author_id"] == out["agent_id"] and event["key"] == out["signing_key"]
    assert key_history.resolve(out["agent_id"], [(hash_of(event), event)]).state.key == out["signing_key"]


def test_bbs_agent_rotate_signing_key_refuses_a_folder_a_node_serves(
    tmp_path: Path, capsys: Any, node_store: Callable[[], str | None]
) -> None:
    data = tmp_path / "node"
    store = node_store()
    assert cli.main(["init", "--data", str(data), *(["--store", store] if store else [])]) == 0
    assert cli.main(["agent", "create", "keeper", "--data", str(data), "--json"]) == 0
    lock = datalock.hold(data)  # what `bbs serve` holds for its life
    try:
        capsys.readouterr()
        assert cli.main(["agent", "rotate-signing-key", "keeper", "--data", str(data)]) != 0
        assert "signing-key" in capsys.readouterr().err
    finally:
        lock.close()
    assert db.read_sync(DataDir(data).store, authority.authority_count) == 0  # nothing was stored


async def test_the_rest_path_gives_every_record_of_the_key_history_story_the_reference_verdict(
    client: TestClient, node: Node
) -> None:
    """tests/node/federation/v3_story.py over REST: its key events and pages submitted by the identity (those never
    allowed refused), then each of its posts; every answer is the verdict of identity.key_history and
    identity.vouching over the whole set (what sync ingest is tested against), but that nothing waits."""
    s = v3_story.story()
    expected = v3_story.whole_set_verdicts(s)
    record = agents.identity_record(v3_story.A0, "A", "", node.node_id)
    api_key = await node.db.write(
        lambda c: agents.register(c, name="a", key=v3_story.A0, keep_key=False, record=record, now_ms=node.now_ms())
    )
    who = SelfSigner(AgentCreds("a", v3_story.A, api_key), v3_story.A0)
    r = s.records
    for event, pages in (("e1", ["g1"]), ("e2", ["g2"]), ("e3", []), ("e4", ["g4", "g4b"])):
        assert expected[event] == ("void" if event == "e3" else "valid") and all(expected[p] == "valid" for p in pages)
        await submit(client, who, r[event], [r[p] for p in pages], 201)
    # e3 builds on e2, which e4 (the recovery) replaced: e3 was stored while its branch was the chain and dropped
    # from the log when e4 displaced it (docs/format-v3.md 3.4); sent again it is refused, nothing stored
    held = (await get_json(client, f"/v1/agents/{v3_story.A}", who))["key_history"]["events"]
    assert v3_story.address(r["e3"]) not in {e["address"] for e in held} and len(held) == 3
    problem(await submit(client, who, r["e3"], [], 409), 409, "losing_branch", "$.record.prior")
    assert expected["gx"] == "void"
    problem(await submit(client, who, r["e1"], [r["gx"]], 422), 422, "bad_vouch_page", "$.pages[0]")
    assert expected["x1"] == "void" and expected["x2"] == "void"
    problem(await submit(client, who, r["x1"], [], 422), 422, "unauthorized_key_event", "$.record")
    problem(await submit(client, who, r["x2"], [], 422), 422, "unknown_prior", "$.record.prior")  # x1 is not held
    answers = {"valid": 201, "void": 422, "undecided": 422}
    codes = {"void": "not_current_key", "undecided": "unknown_signing_key"}
    posts = [name for name, rec in r.items() if rec["kind"] == "entry" and rec["author_id"] == v3_story.A]
    assert {expected[name] for name in posts} == {"valid", "void", "undecided"}  # the story has each verdict
    for name in posts:
        data = await post_signed(client, who, r[name], answers[expected[name]])
        if expected[name] != "valid":
            assert data["code"] == codes[expected[name]], (name, data)
    history = (await get_json(client, f"/v1/agents/{v3_story.A}", who))["key_history"]
    reference = key_history.resolve(v3_story.A, s.events)
    assert history["current_key"] == reference.state.key == v3_story.A4.did
    assert {e["address"] for e in history["events"] if e["in_chain"]} == set(reference.chain)


async def test_a_refused_submission_leaves_no_key_in_the_cache_for_the_rest_of_its_transaction(
    node: Node, clock: FakeClock
) -> None:
    who = await self_signer(node, "rover")
    now = int(clock() * 1000)
    new, stranger = keys.SigningKey.generate(), keys.SigningKey.generate()
    event = rotation(who.agent_id, who.key, new, ["cd" * 32], created_ms=now)
    bad_page = page(who.agent_id, stranger, event, ["cd" * 32])  # not signed by the event's signer
    checked_event, checked_pages = node.key_events.check(KeyEventIn(record=event, pages=[bad_page]), who.agent_id)
    by_new_key = signed(_unsigned(entry_record(who.key, "by the key of the refused event", created_ms=now)), new)
    cache = node.key_events.authority

    def job(conn: sqlite3.Connection) -> str:
        # one job's savepoint rolled back (as the writer does for a failing job of a group), then the next job
        with pytest.raises(InvalidInput), db.savepoint(conn, "refused_submission"):
            key_events.submit_txn(conn, cache, checked_event, checked_pages, now)
        with pytest.raises(InvalidInput) as refused:
            authority.authorize_txn(conn, cache, [(by_new_key, version_of(by_new_key), "$.record")])
        return refused.value.code

    # the cache took the event before its page was refused; the count of the log tells the next decision
    assert await node.db.write(job) == "unknown_signing_key"
    assert await count(node, "records") == 1  # only the agent's identity document
