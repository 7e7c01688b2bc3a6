"""node.workflows.store.leases: the ids of forwarded lease requests (each once, forgotten when old), an agent's
home node and identity document, and a peer's URL."""

from __future__ import annotations

import json

from identity import keys
from node.workflows.store import leases
from tests.node.store.test_projections import agent_record
from tests.node.workflows.store.helpers import T0, Store, append


async def test_a_request_id_is_recorded_once_and_forgotten_when_old(db: Store) -> None:
    assert await db.write(lambda c: leases.insert_request_txn(c, "r1", "did:key:peer", T0))
    assert not await db.write(lambda c: leases.insert_request_txn(c, "r1", "did:key:other", T0 + 5))  # a replay
    assert await db.write(lambda c: leases.insert_request_txn(c, "r2", "did:key:peer", T0 + 10))
    await db.write(lambda c: leases.forget_requests_txn(c, T0 + 10))  # before T0 + 10: r1 only
    kept = await db.read(lambda c: [tuple(r) for r in c.execute("SELECT * FROM peer_lease_requests")])
    assert kept == [("r2", "did:key:peer", T0 + 10)]
    assert await db.write(lambda c: leases.insert_request_txn(c, "r1", "did:key:peer", T0 + 20))  # new once more


async def test_an_agents_home_and_document(db: Store) -> None:
    worker, home = keys.SigningKey.generate(), keys.SigningKey.generate()
    signed = agent_record(worker, "Worker", T0, home.did)
    await append(db, signed)
    assert await db.read(lambda c: leases.agent_home(c, worker.did)) == (home.did, T0)
    document = await db.read(lambda c: leases.agent_document(c, worker.did))
    assert document is not None and json.loads(document) == signed  # the signed bytes, as stored
    assert await db.read(lambda c: leases.agent_home(c, "did:key:nobody")) is None
    assert await db.read(lambda c: leases.agent_document(c, "did:key:nobody")) is None


async def test_a_peers_url(db: Store) -> None:
    await db.write(
        lambda c: c.execute(
            "INSERT INTO peers (node_id, url, added_ms) VALUES (?, ?, ?)", ("did:key:peer", "http://peer:8080/", T0)
        )
    )
    assert await db.read(lambda c: leases.peer_url(c, "did:key:peer")) == "http://peer:8080/"
    assert await db.read(lambda c: leases.peer_url(c, "did:key:stranger")) is None
