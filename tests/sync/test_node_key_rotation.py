"""Rotating a node's key (issue 36, "Node keys"; docs/decisions.md record 60): two real nodes on loopback.

Node A rotates its key (`POST /v1/node/key`): sync keeps running both ways. Toward B, which has not pulled the
rotation, A first signs with the new key (`keyid="<A>#<new key>"`), is refused `unknown_node_key` and signs again
with the key before; once B has pulled the rotation, A's request with the key before is refused
`rotated_node_key`, A signs with the new key, B holds it, and the key before is dropped. A lease granted by A's
old key stays valid on B (the rotation vouches for it), and a lease A forwards to B's home task is signed by the
new key. A restore of A's database from before the rotation signs nothing (`node_key_rotated_out`), and a
node-kept agent's key rotated out before the restore signs nothing either (409 `signing_key_rotated_out`).
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from identity import keys
from node.errors import BBSError
from node.features import LOG
from node.federation.node_key import parse_state
from node.federation.store import node_keys_meta, store_epoch
from node.ops import backup, doctor
from node.ops.datadir import initialise
from node.store.key_fence import KEY_FENCE_NAME, KeyFence
from node.workflows import forward
from sync.auth import sign_headers
from sync.client import SyncError
from tests.sync.conftest import PeerNode, stop
from tests.sync.test_rotation import kinds


async def rotate(peer: PeerNode) -> dict[str, Any]:
    """Rotate the node key of `peer` through its REST route."""
    async with peer.session.post(f"{peer.url}/v1/node/key", headers=peer.admin) as resp:
        body = await resp.json()
        assert resp.status == 201, body
    return body


async def node_key_state(peer: PeerNode) -> dict[str, Any]:
    async with peer.session.get(f"{peer.url}/v1/node/key", headers=peer.admin) as resp:
        body = await resp.json()
        assert resp.status == 200, body
    return body


async def signed_get(peer: PeerNode, key: keys.SigningKey, node_id: str) -> tuple[int, dict[str, Any]]:
    """GET `peer`'s changes feed signed by `key` for `node_id` (as the previous release signs: no boot id)."""
    url = f"{peer.url}/v1/sync/changes?since=0&limit=1&wait_ms=0&v=3"
    headers = sign_headers(key, "GET", url, node_id=node_id)
    async with peer.session.get(url, headers=headers) as resp:
        return resp.status, await resp.json()


async def declare(peer: PeerNode, key: str) -> None:
    agent = await peer.node.agents.create(f"boss-{key}", "Boss")
    async with peer.session.post(
        peer.url + "/v1/agent-workflows/tasks", json={"key": key}, headers={"Authorization": f"Bearer {agent.api_key}"}
    ) as resp:
        assert resp.status == 201, await resp.text()


async def test_sync_continues_both_ways_across_a_rotation_of_the_node_key(make_peer) -> None:  # type: ignore[no-untyped-def]
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    writer = await a.agent()
    await a.post(writer, "before the node key rotation")
    first = a.node.key
    rotated = await rotate(a)
    assert rotated["node_id"] == a.node_id == first.did and rotated["previous_key"] == first.did
    new_key = rotated["signing_key"]
    assert new_key != first.did
    state = await node_key_state(a)
    assert (state["signing_key"], state["previous_key"], state["peers_holding"]) == (new_key, first.did, [])
    (event,) = [e for e in (await kinds(a))["key_event"] if e["author_id"] == a.node_id]
    assert event["key"] == new_key and "signing_key" not in event  # signed by the node's first key

    # B has not pulled the rotation: the new key is unknown there, the key before still works
    signer = a.node.node_keys.signer
    status, problem = await signed_get(b, signer.keys[-1], a.node_id)
    assert (status, problem["code"]) == (401, "unknown_node_key"), problem
    status, _ = await signed_get(b, first, a.node_id)
    assert status == 200
    await a.post(writer, "after the rotation, before B has it")
    await b.post(await b.agent(), "on B")
    report = await a.puller().pull_once(b.config)  # new key refused, signed again with the key before
    assert {o.outcome for o in report.outcomes} == {"saved"}
    assert b.node_id not in signer.holders

    report = await b.puller().pull_once(a.config)  # B's own key: A verifies it as before
    assert rotated["event"] in {o.hash for o in report.outcomes if o.outcome == "saved"}
    # B holds the rotation: the key before is refused there, the new key accepted, whatever keyid says
    status, problem = await signed_get(b, first, a.node_id)
    assert (status, problem["code"]) == (401, "rotated_node_key"), problem
    status, _ = await signed_get(b, signer.keys[-1], a.node_id)
    assert status == 200
    stranger = keys.SigningKey.generate()
    status, problem = await signed_get(b, stranger, a.node_id)
    assert (status, problem["code"]) == (401, "unknown_node_key"), problem

    await b.post(await b.agent("second"), "on B, after B holds the rotation")
    report = await a.puller().pull_once(b.config)  # the key before refused now: signed again with the new key
    assert [o.outcome for o in report.outcomes] == ["saved", "saved"]  # the agent's document and its entry
    assert signer.holders == {b.node_id}
    assert [k.did for k in signer.keys] == [new_key]  # every peer holds it: the key before signs no more
    state = await node_key_state(a)
    assert (state["signing_key"], state["previous_key"], state["peers_holding"]) == (new_key, None, [b.node_id])
    stored = await a.node.db.read(node_keys_meta)
    found, events, holders = parse_state(stored)
    assert ([k.did for k in found], events, holders) == ([new_key], [rotated["event"]], {b.node_id})
    await b.puller().pull_once(a.config)
    assert await a.digest() == await b.digest()


async def test_leases_across_a_rotation_of_the_node_key(make_peer) -> None:  # type: ignore[no-untyped-def]
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    await declare(a, "homed-on-a")
    worker = await a.agent("worker")
    _, granted, grant = await a.node.workflows.grant(worker, "homed-on-a", 600)
    assert granted and grant["author_id"] == a.node_id and "signing_key" not in grant
    rotated = await rotate(a)
    assert rotated["vouched"] >= 1  # the grant is among the old key's records the rotation vouches for
    report = await b.puller().pull_once(a.config)
    outcomes = {o.hash: o.outcome for o in report.outcomes}
    assert set(outcomes.values()) == {"saved"}, outcomes
    held = await kinds(b)
    assert grant in held["task_event"]  # the old key's grant, vouched for: valid on B after the rotation
    assert await a.digest() == await b.digest()
    # a grant by the new key needs a `signing_key` on task events (not in format v3 yet): refused, never old-signed
    await declare(a, "another-on-a")
    with pytest.raises(BBSError) as refused:
        await a.node.workflows.grant(worker, "another-on-a", 600)
    assert (refused.value.status, refused.value.code) == (422, "rotated_key_unsupported")

    # a lease A forwards to B's home task is signed by A's new key, which B holds
    await declare(b, "homed-on-b")
    other = await a.agent("other")
    record, granted = await forward.request_lease(
        a.node.db, a.node.node_keys.signer, b.node_id, "homed-on-b", other, 120
    )
    assert granted and record["author_id"] == b.node_id and record["holder"] == other
    assert a.node.node_keys.signer.holders == {b.node_id}


async def test_a_restore_from_before_a_rotation_signs_with_no_rotated_out_key(make_peer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    kept = await a.agent("kept")
    await a.post(kept, "by the agent's first key")
    archive = tmp_path / "before.tar"
    backup.backup(a.node.data.root, archive)  # taken before both rotations
    async with a.session.post(f"{a.url}/v1/agents/{kept}/signing-key", headers=a.admin) as resp:
        assert resp.status == 201, await resp.text()
    await rotate(a)
    await b.puller().pull_once(a.config)  # B holds both rotations
    assert (a.node.data.root / KEY_FENCE_NAME).exists()
    await stop(a)  # closes the node too

    restored = backup.restore(archive, a.node.data.root, force=True)  # carries the key fence, as the lease fence
    assert restored.replaced is not None and (a.node.data.root / KEY_FENCE_NAME).exists()
    checks = {c.name: c for c in doctor.diagnose(a.node.data.root, LOG, peer_timeout=1)}
    assert checks["key_fence"].status == "fail" and "restored from a backup" in checks["key_fence"].detail
    assert a.node.key.did in checks["key_fence"].detail and kept in checks["key_fence"].detail
    again = await make_peer("a-restored", data=a.node.data.root)
    assert again.node_id == a.node_id
    again.token = a.token  # the backup's admin credential
    state = await node_key_state(again)
    assert state["signing_key"] == a.node.key.did and "rotated out" in (state["blocked"] or "")
    # no sync request is signed with the rotated-out node key
    with pytest.raises(SyncError) as refused:
        await again.puller().pull_once(b.config)
    assert refused.value.code == "node_key_rotated_out", refused.value
    # nor a record of the node-kept agent with its rotated-out key
    creds = await again.node.agents.rotate_api_key(kept)
    async with again.session.post(
        f"{again.url}/v1/entries",
        json={"entry_type": "finding", "performative": "inform", "content": "by the old seed"},
        headers={"Authorization": f"Bearer {creds.api_key}"},
    ) as resp:
        problem = await resp.json()
    assert (resp.status, problem["code"]) == (409, "signing_key_rotated_out"), problem
    async with again.session.post(f"{again.url}/v1/node/key", headers=again.admin) as resp:
        problem = await resp.json()
    assert (resp.status, problem["code"]) == (409, "node_key_rotated_out"), problem


async def test_a_rotation_that_never_committed_is_forgotten_by_the_next_start(make_peer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "crashed"
    token = initialise(root)
    assert token is not None
    first = keys.load_key(root / "node.key")
    conn = sqlite3.connect(root / "bbs.db")
    try:
        epoch = store_epoch(conn)
    finally:
        conn.close()
    fence = KeyFence(root / KEY_FENCE_NAME)
    # the fence written, then the process died before the rotation committed: this store epoch, no such event
    fence.record(first.did, first.did, keys.SigningKey.generate().did, "0" * 64, epoch, 0)  # long ago
    fence.record("did:key:z6MkOther", "did:key:z6MkOld", "did:key:z6MkNew", "1" * 64, "another-epoch", 0)  # restored
    b = await make_peer("b")
    a = await make_peer("crashed", data=root)
    a.token = token
    await a.add_peer(b)
    await b.add_peer(a)
    assert a.node.node_keys.state().blocked is None
    assert [r["epoch"] for r in KeyFence(root / KEY_FENCE_NAME).rotations()] == ["another-epoch"]
    await b.post(await b.agent(), "from B")
    report = await a.puller().pull_once(b.config)  # signed with the first key, as no rotation happened
    assert {o.outcome for o in report.outcomes} == {"saved"}
