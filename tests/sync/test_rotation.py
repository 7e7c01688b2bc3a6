"""A key rotation on one node propagating by sync (issue 36, first slice): two real nodes on loopback.

Node A rotates a node-kept agent's key (`POST /v1/agents/{id}/signing-key`); the agent posts with the new key; B
pulls from A and holds the key event, its vouch page and every record with the same verdicts as A. A record the old
key signs after the rotation, not vouched for, is refused on A (REST: 422 `not_current_key`) and on B (from a peer:
`void`), and neither node stores it.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

from identity import canonical, keys, records
from identity.vouching import vouch
from node.agents import service as agents
from node.federation.store import add_peer_txn
from node.store import waiting
from sync.store import Verified
from sync.verify import verify_record
from tests.node.federation.v3_story import A0, A4, A, address, key_event, post, verified
from tests.sync.conftest import PeerNode, signed_entry


async def kinds(peer: PeerNode) -> dict[str, list[dict[str, Any]]]:
    """The records a node holds, by kind."""

    def run(conn: sqlite3.Connection) -> list[bytes]:
        return [bytes(r[0]) for r in conn.execute("SELECT body FROM records ORDER BY seq")]

    out: dict[str, list[dict[str, Any]]] = {}
    for body in await peer.node.db.read(run):
        record = json.loads(body)
        out.setdefault(record["kind"], []).append(record)
    return out


async def from_a_peer(peer: PeerNode, record: dict[str, Any]) -> str:
    """Ingest `record` on `peer` as from a registered peer of its own (verified by the verify workers' checks)."""
    other = keys.SigningKey.generate().did
    await peer.node.db.write(lambda c: add_peer_txn(c, "http://127.0.0.1:9", other, peer.node.now_ms()))
    checked = verify_record(canonical.canonical_bytes(record), records.compute_hash(record))
    assert isinstance(checked, Verified), checked
    (outcome,) = await peer.node.sync.ingest(other, [checked], [], None)
    return outcome.outcome


async def test_a_rotation_on_a_reaches_b_with_the_same_verdicts(make_peer) -> None:  # type: ignore[no-untyped-def]
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    writer = await a.agent()
    before = await a.post(writer, "signed by the first key")
    old_key = await a.node.db.read(lambda c: agents.signing_key(c, writer))
    assert old_key is not None
    async with a.session.post(f"{a.url}/v1/agents/{writer}/signing-key", headers=a.admin) as resp:
        rotated = await resp.json()
        assert resp.status == 201, rotated
    after = await a.post(writer, "signed by the new key")
    report = await b.puller().pull_once(a.config)
    outcomes = {o.hash: o.outcome for o in report.outcomes}
    assert outcomes[rotated["event"]] == "saved"
    assert outcomes[before] == "saved" and outcomes[after] == "saved"
    assert set(outcomes.values()) == {"saved"}
    held_a, held_b = await kinds(a), await kinds(b)
    assert held_a == held_b  # the same records, byte for byte, so the same verdicts
    assert [e["key"] for e in held_b["key_event"]] == [rotated["signing_key"]]
    assert len(held_b["vouch_page"]) == 1
    (newest,) = [e for e in held_b["entry"] if e["content"] == "signed by the new key"]
    assert newest["signing_key"] == rotated["signing_key"] and newest["author_id"] == writer
    assert await a.digest() == await b.digest()
    async with b.session.get(f"{b.url}/v1/agents/{writer}", headers=b.admin) as resp:
        shown = await resp.json()
    assert shown["key_history"]["current_key"] == rotated["signing_key"]
    assert [e["in_chain"] for e in shown["key_history"]["events"]] == [True]

    # The old key after the rotation, not vouched for: refused on A (a client's record never waits) and on B.
    thief = signed_entry(old_key, "the old key, after the rotation")
    assert thief["author_id"] == writer
    creds = await a.node.agents.rotate_api_key(writer)
    async with a.session.post(
        f"{a.url}/v1/entries", json={"record": thief}, headers={"Authorization": f"Bearer {creds.api_key}"}
    ) as resp:
        refused = await resp.json()
    assert resp.status == 422 and refused["code"] == "not_current_key", refused
    assert await from_a_peer(b, thief) == "void"
    thief_hash = records.compute_hash(thief)
    assert thief_hash not in await a.hashes() and thief_hash not in await b.hashes()
    # ... and a record of the new key that B holds stays valid there: B pulling again changes nothing
    again = await b.puller().pull_once(a.config)
    assert [o.outcome for o in again.outcomes] == []
    assert await a.digest() == await b.digest()


async def test_b_holding_the_rotation_takes_a_new_key_record_that_waited_for_it(make_peer) -> None:  # type: ignore[no-untyped-def]
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    writer = await a.agent()
    async with a.session.post(f"{a.url}/v1/agents/{writer}/signing-key", headers=a.admin) as resp:
        rotated = await resp.json()
        assert resp.status == 201, rotated
    new_key = await a.node.db.read(lambda c: agents.signing_key(c, writer))
    assert new_key is not None and new_key.did == rotated["signing_key"]
    early = signed_entry(new_key, "reached B before the rotation")  # author_id is the new key's: rebuild it
    body = {**records.unsigned(early), "author_id": writer, "signing_key": new_key.did}
    early = {**body, "signature": new_key.sign(canonical.canonical_bytes(body))}
    assert await from_a_peer(b, early) == "waiting"  # B has no key event installing the key yet
    report = await b.puller().pull_once(a.config)
    assert {o.hash: o.outcome for o in report.outcomes}[rotated["event"]] == "saved"
    assert records.compute_hash(early) in await b.hashes()  # re-checked in the key event's transaction


async def test_records_a_cap_dropped_come_back_at_once_when_their_key_event_is_stored(  # type: ignore[no-untyped-def]
    make_peer, monkeypatch
) -> None:
    """docs/format-v3.md 7.3: B drops records from A (a small author cap), then stores the rotation they waited for
    (from another peer); B reconciles with A at once, not at the 300 s round, and holds them within seconds."""
    monkeypatch.setattr(waiting, "MAX_PER_AUTHOR", 2)
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    rotation = key_event(A0, "rotate", 1, installs=A4, vouches=[vouch(A0.did, [])])
    posts = [post(A, A4, f"by the new key {i}") for i in range(5)]
    puller = b.puller(wait_ms=500, reconcile_every_s=300.0)
    loop = asyncio.create_task(puller.run_peer(a.config))
    try:
        # B's first reconciliation with A is behind it: the next round is 300 s away
        for _ in range(200):
            (status,) = await b.sync.store.statuses()
            if status.reconciliations:
                break
            await asyncio.sleep(0.05)
        assert status.reconciliations == 1
        # A holds the rotation and the posts as sent by B: its feed leaves them out for B (echo suppression)
        await a.node.sync.ingest(b.node_id, [verified(r) for r in [rotation, *posts]], [], None)
        assert {address(r) for r in [rotation, *posts]} <= await a.hashes()
        # B gets the posts from A before the rotation: two wait, a full author cap drops the other three
        got = await b.node.sync.ingest(a.node_id, [verified(r) for r in posts], [], None)
        assert sorted(o.outcome for o in got) == ["dropped_waiting"] * 3 + ["waiting"] * 2
        assert await from_a_peer(b, rotation) == "saved"  # the two waiting ones are stored in its transaction
        assert len({address(r) for r in posts} & await b.hashes()) == 2
        for _ in range(200):  # 10 s at most; without the wake-up they would wait for the 300 s round
            (status,) = [s for s in await b.sync.store.statuses() if s.node_id == a.node_id]
            # the round stores its records, then counts itself: wait for both
            if {address(r) for r in posts} <= await b.hashes() and status.reconciliations >= 2:
                break
            await asyncio.sleep(0.05)
        assert {address(r) for r in posts} <= await b.hashes()
        assert status.reconciliations == 2
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
