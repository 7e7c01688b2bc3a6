"""node/agents/service.py: local names, credentials, and the `Agents` service (create, rotate, get, authenticate).

The token cache has its own file (test_token_cache.py), REST rotation test_api_keys.py.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from identity import records
from node.agents import service as agents
from node.agents.service import Principal
from node.errors import Conflict, InvalidInput, NotFound
from node.service import Node
from tests.node.api_helpers import self_signer
from wire.api import PostEntry


def test_local_names_are_checked() -> None:
    agents.check_name("alice_2-b")
    for bad in ("", "Alice", "-alice", "a" * 65, "al ice"):
        with pytest.raises(InvalidInput) as caught:
            agents.check_name(bad)
        assert caught.value.field == "$.name"


async def test_create_keeps_the_key_and_answers_with_a_working_api_key(node: Node) -> None:
    created = await node.agents.create("alice", "Alice Liddell", "asks questions")
    assert created.name == "alice" and created.agent_id.startswith("did:key:")
    assert await node.agents.authenticate(created.api_key) == Principal("agent", created.agent_id)
    assert (await node.sealing.signer(created.agent_id)).did == created.agent_id
    out = await node.agents.get(created.agent_id)
    assert (out.display_name, out.description, out.home_node) == ("Alice Liddell", "asks questions", node.node_id)
    assert out.entry_count == 0 and out.trust is not None and out.trust.score == 0.5

    def identity(conn: sqlite3.Connection) -> bytes:
        row = conn.execute("SELECT r.body FROM agents a JOIN records r ON r.hash = a.doc_hash WHERE a.id = ?",
                           (created.agent_id,)).fetchone()  # fmt: skip
        return bytes(row[0])

    assert records.verify(json.loads(await node.db.read(identity)))


async def test_create_refuses_a_taken_or_bad_name(node: Node) -> None:
    await node.agents.create("alice", None)
    with pytest.raises(Conflict) as taken:
        await node.agents.create("alice", "Another Alice")
    assert (taken.value.code, taken.value.field) == ("agent_exists", "$.name")
    with pytest.raises(InvalidInput):
        await node.agents.create("Not A Name", None)


async def test_get_counts_entries_and_knows_only_known_agents(node: Node) -> None:
    alice = await node.agents.create("alice", None)
    await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "one"), None)
    await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "two"), None)
    assert (await node.agents.get(alice.agent_id)).entry_count == 2
    signer = await self_signer(node, "bob")  # an identity this node only knows: still an agent here
    assert (await node.agents.get(signer.agent_id)).display_name == "Bob"
    with pytest.raises(NotFound) as unknown:
        await node.agents.get("did:key:z6MkunknownAgent")
    assert unknown.value.code == "agent_not_found"


async def test_rotation_replaces_every_key_at_once(node: Node) -> None:
    alice = await node.agents.create("alice", None)
    assert await node.agents.authenticate(alice.api_key) is not None  # now cached
    by_name = await node.agents.rotate_api_key("alice")
    assert (by_name.name, by_name.agent_id) == ("alice", alice.agent_id) and by_name.api_key != alice.api_key
    assert await node.agents.authenticate(alice.api_key) is None  # the cache was cleared with it
    by_did = await node.agents.rotate_api_key(alice.agent_id)
    assert await node.agents.authenticate(by_name.api_key) is None
    assert await node.agents.authenticate(by_did.api_key) == Principal("agent", alice.agent_id)
    with pytest.raises(NotFound) as unknown:
        await node.agents.rotate_api_key("nobody")
    assert unknown.value.code == "agent_not_found"


async def test_authenticate_refuses_what_is_not_a_credential(node: Node, data_dir: tuple[object, str]) -> None:
    admin_token = data_dir[1]
    assert await node.agents.authenticate(admin_token) == Principal("admin")
    for token in ("", "bbs_", "bbs_0123456789abcdef_", "bbs_0123456789abcdef_wrong", "Bearer x"):
        assert await node.agents.authenticate(token) is None
