"""node.workflows.store.leases: the ids of forwarded lease requests (each once, forgotten when old), an agent's
home node and identity document, and a peer's URL."""

from __future__ import annotations

import json

from node.service import Node
from node.store.db import Database
from node.workflows.store import leases
from tests.node.workflows.store.helpers import T0


async def test_a_request_id_is_recorded_once_and_forgotten_when_old(db: Database) -> None:
    assert await db.write(lambda c: leases.insert_request_txn(c, "r1", "did:key:peer", T0))
    assert not await db.write(lambda c: leases.insert_request_txn(c, "r1", "did:key:other", T0 + 5))  # a replay
    assert await db.write(lambda c: leases.insert_request_txn(c, "r2", "did:key:peer", T0 + 10))
    await db.write(lambda c: leases.forget_requests_txn(c, T0 + 10))  # before T0 + 10: r1 only
    kept = await db.read(lambda c: [tuple(r) for r in c.execute("SELECT * FROM peer_lease_requests")])
    assert kept == [("r2", "did:key:peer", T0 + 10)]
    assert await db.write(lambda c: leases.insert_request_txn(c, "r1", "did:key:peer", T0 + 20))  # new once more


async def test_an_agents_home_and_document(node: Node) -> None:
    created = await node.agents.create("worker", "Worker")
    home = await node.db.read(lambda c: leases.agent_home(c, created.agent_id))
    assert home is not None and home[0] == node.node_id
    document = await node.db.read(lambda c: leases.agent_document(c, created.agent_id))
    assert document is not None
    record = json.loads(document)
    assert record["kind"] == "agent" and record["author_id"] == created.agent_id
    assert record["home_node"] == node.node_id
    assert await node.db.read(lambda c: leases.agent_home(c, "did:key:nobody")) is None
    assert await node.db.read(lambda c: leases.agent_document(c, "did:key:nobody")) is None


async def test_a_peers_url(db: Database) -> None:
    await db.write(
        lambda c: c.execute(
            "INSERT INTO peers (node_id, url, added_ms) VALUES (?, ?, ?)", ("did:key:peer", "http://peer:8080/", T0)
        )
    )
    assert await db.read(lambda c: leases.peer_url(c, "did:key:peer")) == "http://peer:8080/"
    assert await db.read(lambda c: leases.peer_url(c, "did:key:stranger")) is None
