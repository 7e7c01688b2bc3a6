"""node.store.agent_docs: the identity document an agent shows is the newest by its key history (docs/format-v3.md
3.8), on a real node over real SQLite, records from a registered peer through the node's sync ingest, real keys."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from identity import canonical, keys, records
from node.agents import portable
from node.errors import Conflict, Forbidden, InvalidInput
from node.federation.store import add_peer_txn
from node.service import Node
from node.store import projections
from sync.store import Verified
from sync.verify import verify_record
from tests.node.agents.test_key_events import page, rotation, signed
from wire.time import format_ms
from wire.workflows import DeclareTask, PeerLeaseIn


def document(author: keys.SigningKey, signer: keys.SigningKey, name: str, home: str, ms: int) -> dict[str, Any]:
    """An identity document of `author` signed by `signer` (naming it when it is not the first key)."""
    body = {
        "kind": "agent",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": author.did,
        "created_at": format_ms(ms),
        "display_name": name,
        "description": "",
        "home_node": home,
    }
    return signed(body, signer)


async def ingest(node: Node, *batch: dict[str, Any]) -> list[str]:
    """Ingest records on `node` as from a registered peer (checked by the verify workers' checks): the outcomes."""
    peer = "did:key:z6MkpTHR8VNsBxYAAWHut2Geadd9jSwuBV8xRoAnwWsdvktH"
    await node.db.write(lambda c: add_peer_txn(c, "http://127.0.0.1:9", peer, node.now_ms()))
    checked = []
    for record in batch:
        verified = verify_record(canonical.canonical_bytes(record), records.compute_hash(record))
        assert isinstance(verified, Verified), verified
        checked.append(verified)
    return [o.outcome for o in await node.sync.ingest(peer, checked, [], None)]


async def shown(node: Node, agent_id: str) -> tuple[str, str]:
    """(display name, home node) of the document the agents table shows."""
    row = await node.db.read(
        lambda c: c.execute("SELECT display_name, home_node FROM agents WHERE id = ?", (agent_id,)).fetchone()
    )
    return str(row[0]), str(row[1])


OWNER_HOME = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
THIEF_HOME = "did:key:z6MknGc3ocHs3zdPiJbnaaqDi58NGb4pk1Sp9WXV5CXNyRdG"


async def test_a_thiefs_forward_dated_document_stops_being_shown_once_the_revocation_is_held(node: Node) -> None:
    owner, new = keys.SigningKey.generate(), keys.SigningKey.generate()
    now = node.now_ms()
    first = document(owner, owner, "Owner", OWNER_HOME, now - 10_000)
    assert await ingest(node, first) == ["saved"]
    assert await shown(node, owner.did) == ("Owner", OWNER_HOME)
    thiefs = document(owner, owner, "Thief", THIEF_HOME, now + 60_000)  # forward-dated, the first key's copy
    assert await ingest(node, thiefs) == ["saved"]
    assert await shown(node, owner.did) == ("Thief", THIEF_HOME)  # today's rule: the newest created_at

    # the owner rotates, vouching for its own document only: the thief's is void once the page is held
    vouched = [records.compute_hash(first)]
    event = rotation(owner.did, owner, new, vouched, created_ms=now)
    assert await ingest(node, event) == ["saved"]
    assert await shown(node, owner.did) == ("Thief", THIEF_HOME)  # its page is not held: undecided, as stored
    assert await ingest(node, page(owner.did, owner, event, vouched)) == ["saved"]
    assert await shown(node, owner.did) == ("Owner", OWNER_HOME)

    # a document by the new key wins over the older key's, whatever its date
    renamed = document(owner, new, "Owner, rotated", OWNER_HOME, now - 20_000)
    assert await ingest(node, renamed) == ["saved"]
    assert await shown(node, owner.did) == ("Owner, rotated", OWNER_HOME)
    # the first key after the rotation, not vouched for: void, never shown
    late = document(owner, owner, "Thief again", THIEF_HOME, now + 120_000)
    assert await ingest(node, late) == ["void"]
    assert await shown(node, owner.did) == ("Owner, rotated", OWNER_HOME)

    # the agents table is derived data: a rebuild shows the same document
    def rebuilt(conn: sqlite3.Connection) -> bool:  # in the writer's transaction
        before = projections.snapshot(conn)["agents"]
        projections.rebuild(conn)
        return bool(projections.snapshot(conn)["agents"] == before)

    assert await node.db.write(rebuilt)


async def test_importing_an_identity_whose_document_its_history_voids_is_refused(node: Node) -> None:
    owner, new = keys.SigningKey.generate(), keys.SigningKey.generate()
    now = node.now_ms()
    first = document(owner, owner, "Owner", OWNER_HOME, now - 10_000)
    event = rotation(owner.did, owner, new, [records.compute_hash(first)], created_ms=now)
    pages = page(owner.did, owner, event, [records.compute_hash(first)])
    assert await ingest(node, first, event, pages) == ["saved", "saved", "saved"]
    stale = document(owner, owner, "Copied file", THIEF_HOME, now + 1_000)  # signed by the rotated-out key
    # a file holding the rotated-out key is older than the rotation (recovery's check, record 59)
    with pytest.raises(Conflict) as outdated:
        await portable.import_identity(node, "owner", owner, stale)
    assert outdated.value.code == "identity_key_outdated"
    # with the current key, the document must still be one its history lets stand: the stale one is void
    with pytest.raises(InvalidInput) as refused:
        await portable.import_identity(node, "owner", new, stale, agent_id=owner.did, history=[event])
    assert refused.value.code == "not_current_key"
    assert await node.db.read(lambda c: c.execute("SELECT count(*) FROM local_agents").fetchone()[0]) == 0
    # the document the rotation vouches for is still the identity's: importing it registers the agent
    created = await portable.import_identity(node, "owner", new, first, agent_id=owner.did, history=[event])
    assert created.agent_id == owner.did
    assert await shown(node, owner.did) == ("Owner", OWNER_HOME)


async def test_lease_forwarding_never_trusts_the_home_node_of_a_document_the_history_voids(node: Node) -> None:
    """The home node decides a forwarded lease by the newest document by key history: a thief's forward-dated copy
    signed by the revoked key, presented by the thief's node, is refused; the owner's new key's is honoured."""
    owner, new = keys.SigningKey.generate(), keys.SigningKey.generate()
    now = node.now_ms()
    first = document(owner, owner, "Owner", OWNER_HOME, now - 10_000)
    vouched = [records.compute_hash(first)]
    event = rotation(owner.did, owner, new, vouched, created_ms=now)
    assert await ingest(node, first, event, page(owner.did, owner, event, vouched)) == ["saved"] * 3
    creator = await node.agents.create("planner", "Planner")
    await node.workflows.declare(creator.agent_id, DeclareTask(key="t1", title="a task homed here"))

    def add_peers(conn: sqlite3.Connection) -> None:
        for peer in (OWNER_HOME, THIEF_HOME):
            add_peer_txn(conn, "http://127.0.0.1:9", peer, node.now_ms())

    await node.db.write(add_peers)

    def asking(request_id: str, doc: dict[str, Any] | None) -> PeerLeaseIn:
        return PeerLeaseIn(task_key="t1", agent_id=owner.did, request_id=request_id, agent_document=doc)

    thiefs = document(owner, owner, "Thief", THIEF_HOME, now + 60_000)
    with pytest.raises(InvalidInput) as refused:
        await node.workflows.grant_for_peer(THIEF_HOME, asking("thief-request-1", thiefs))
    assert refused.value.code == "not_current_key"
    with pytest.raises(Forbidden) as not_home:  # without a document: the one held names the owner's node
        await node.workflows.grant_for_peer(THIEF_HOME, asking("thief-request-2", None))
    assert not_home.value.code == "not_agent_home"
    # the owner's node presents a document by the new key, dated before the thief's: it is the newest, honoured
    moved = document(owner, new, "Owner", OWNER_HOME, now - 20_000)
    key, granted, grant = await node.workflows.grant_for_peer(OWNER_HOME, asking("owner-request-1", moved))
    assert key == "t1" and granted and grant["holder"] == owner.did
