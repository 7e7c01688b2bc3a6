"""Spaces on one node through the service (a real Node on a real SQLite file, real Ed25519 keys): creation, roles
from resolve, refusals that store nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from identity import canonical, keys, records, vouching
from node.errors import Conflict, Forbidden, InvalidInput, NotFound
from node.service import Node
from node.spaces.service import nonce
from tests.conftest import AgentCreds

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def record_count(node: Node) -> int:
    return await node.db.read(lambda conn: int(conn.execute("SELECT count(*) FROM records").fetchone()[0]))


async def key_of(node: Node, agent: AgentCreds) -> keys.SigningKey:
    key = await node.sealing.signing_key(agent.agent_id)
    assert key is not None
    return key


def member_record(key: keys.SigningKey, space: str, member: str, role: str, seq: int, **more: Any) -> dict[str, Any]:
    body = {
        "kind": "space_member",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": key.did,
        "created_at": canonical.now_created_at(),
        "space": space,
        "member": member,
        "role": role,
        "seq": seq,
        **more,
    }
    return records.sign(body, key)


async def test_the_owner_creates_a_space_and_gives_roles(node: Node, make_agent: MakeAgent) -> None:
    owner, bob, carol = await make_agent("owner"), await make_agent("bob"), await make_agent("carol")
    made = await node.spaces.create(owner.agent_id, "family", "the household's notes")
    assert made.created and made.address == made.space_id
    await node.spaces.set_role(owner.agent_id, made.space_id, bob.agent_id, "writer")
    await node.spaces.set_role(owner.agent_id, made.space_id, carol.agent_id, "admin")
    shown = await node.spaces.show(bob.agent_id, made.space_id)
    assert shown.role == "writer" and shown.name == "family"
    assert {(m.agent_id, m.role) for m in shown.members or []} == {
        (owner.agent_id, "owner"), (bob.agent_id, "writer"), (carol.agent_id, "admin")
    }  # fmt: skip
    # an admin lowers a writer to reader (a lowering: the record vouches for bob's posts, none here)
    await node.spaces.set_role(carol.agent_id, made.space_id, bob.agent_id, "reader")
    assert (await node.spaces.show(bob.agent_id, made.space_id)).role == "reader"
    await node.spaces.set_role(owner.agent_id, made.space_id, carol.agent_id, "none")
    assert [s.space_id for s in (await node.spaces.list_of(carol.agent_id)).spaces] == []
    assert [s.role for s in (await node.spaces.list_of(owner.agent_id)).spaces] == ["owner"]


async def test_a_space_is_hidden_from_non_members(node: Node, make_agent: MakeAgent) -> None:
    owner, eve = await make_agent("owner"), await make_agent("eve")
    made = await node.spaces.create(owner.agent_id, "finance", "")
    with pytest.raises(NotFound) as shown:
        await node.spaces.show(eve.agent_id, made.space_id)
    with pytest.raises(NotFound) as unknown:
        await node.spaces.show(eve.agent_id, "0" * 64)
    assert shown.value.code == unknown.value.code == "unknown_space"  # existence not revealed
    assert await node.spaces.readable(eve.agent_id) == frozenset()
    assert await node.spaces.readable(owner.agent_id) == {made.space_id}


async def test_a_non_admin_changes_nothing(node: Node, make_agent: MakeAgent) -> None:
    owner, bob, eve = await make_agent("owner"), await make_agent("bob"), await make_agent("eve")
    made = await node.spaces.create(owner.agent_id, "family", "")
    await node.spaces.set_role(owner.agent_id, made.space_id, bob.agent_id, "writer")
    before = await record_count(node)
    with pytest.raises(NotFound):  # eve cannot see the space: she learns nothing of it
        await node.spaces.set_role(eve.agent_id, made.space_id, eve.agent_id, "writer")
    with pytest.raises(Forbidden) as refused:  # a writer signs no membership (docs/format-v3.md 4.2)
        await node.spaces.set_role(bob.agent_id, made.space_id, eve.agent_id, "reader")
    assert refused.value.code == "not_a_space_admin"
    eve_key = await key_of(node, eve)  # eve signs her own addition: she learns nothing of the space
    with pytest.raises(NotFound) as hidden:
        await node.spaces.submit(eve.agent_id, member_record(eve_key, made.space_id, eve.agent_id, "writer", 1))
    assert hidden.value.code == "unknown_space"
    bob_key = await key_of(node, bob)  # bob, a writer, signs eve's addition: not an admin of the space
    with pytest.raises(Forbidden) as forged:
        await node.spaces.submit(bob.agent_id, member_record(bob_key, made.space_id, eve.agent_id, "writer", 1))
    assert forged.value.code == "not_a_space_admin" and forged.value.field == "$.record.author_id"
    assert await record_count(node) == before


async def test_only_the_owner_makes_admins(node: Node, make_agent: MakeAgent) -> None:
    owner, carol, dave = await make_agent("owner"), await make_agent("carol"), await make_agent("dave")
    made = await node.spaces.create(owner.agent_id, "team", "")
    await node.spaces.set_role(owner.agent_id, made.space_id, carol.agent_id, "admin")
    with pytest.raises(Forbidden) as refused:
        await node.spaces.set_role(carol.agent_id, made.space_id, dave.agent_id, "admin")
    assert refused.value.code == "not_a_space_admin"
    await node.spaces.set_role(carol.agent_id, made.space_id, dave.agent_id, "writer")  # an admin adds writers
    assert (await node.spaces.show(dave.agent_id, made.space_id)).role == "writer"


async def test_chain_conflicts_and_bad_records_store_nothing(node: Node, make_agent: MakeAgent) -> None:
    owner, bob = await make_agent("owner"), await make_agent("bob")
    made = await node.spaces.create(owner.agent_id, "family", "")
    await node.spaces.set_role(owner.agent_id, made.space_id, bob.agent_id, "reader")
    key = await key_of(node, owner)
    before = await record_count(node)
    with pytest.raises(Conflict) as fork:  # a second seq 1: it loses to the reader (the more restrictive role)
        await node.spaces.submit(owner.agent_id, member_record(key, made.space_id, bob.agent_id, "writer", 1))
    assert (fork.value.code, fork.value.field) == ("prior_conflict", "$.record.prior")
    with pytest.raises(Conflict) as unknown_prior:
        await node.spaces.submit(
            owner.agent_id, member_record(key, made.space_id, bob.agent_id, "writer", 2, prior="a" * 64)
        )
    assert unknown_prior.value.code == "unknown_prior"
    with pytest.raises(NotFound) as no_space:
        await node.spaces.submit(owner.agent_id, member_record(key, "b" * 64, bob.agent_id, "writer", 1))
    assert no_space.value.code == "unknown_space"
    with pytest.raises(InvalidInput) as schema:  # a first record that gives no role: refused by its schema
        await node.spaces.submit(owner.agent_id, member_record(key, made.space_id, "did:key:z6Mkx", "none", 1))
    assert schema.value.code.startswith("record_")
    bob_key = await key_of(node, bob)
    with pytest.raises(Forbidden):  # the record is not the caller's
        await node.spaces.submit(bob.agent_id, member_record(key, made.space_id, bob.agent_id, "writer", 1))
    shown = await node.spaces.show(owner.agent_id, made.space_id)
    assert {(m.agent_id, m.role) for m in shown.members or []} == {(owner.agent_id, "owner"), (bob.agent_id, "reader")}
    assert await record_count(node) == before
    assert bob_key.did == bob.agent_id


async def test_a_self_signed_creation_and_removal(node: Node, make_agent: MakeAgent) -> None:
    owner, bob = await make_agent("owner"), await make_agent("bob")
    key = await key_of(node, owner)
    space = records.sign(
        {
            "kind": "space",
            "schema_version": canonical.SCHEMA_VERSION,
            "author_id": owner.agent_id,
            "created_at": canonical.now_created_at(),
            "name": "signed by its owner",
            "description": "",
            "nonce": nonce(),
        },
        key,
    )
    made = await node.spaces.submit(owner.agent_id, space)
    assert made.created and made.space_id == records.compute_hash(space)
    again = await node.spaces.submit(owner.agent_id, space)
    assert not again.created  # the same record twice is stored once
    first = member_record(key, made.space_id, bob.agent_id, "writer", 1)
    await node.spaces.submit(owner.agent_id, first)
    empty = vouching.vouch(bob.agent_id, []).as_json()
    removal = member_record(
        key, made.space_id, bob.agent_id, "none", 2, prior=records.compute_hash(first), vouches=[empty]
    )
    unvouched = member_record(key, made.space_id, bob.agent_id, "none", 2, prior=records.compute_hash(first))
    with pytest.raises(InvalidInput) as missing:  # a removal names what it still vouches for
        await node.spaces.submit(owner.agent_id, unvouched)
    assert missing.value.code == "missing_vouch"
    await node.spaces.submit(owner.agent_id, removal)
    assert await node.spaces.readable(bob.agent_id) == frozenset()
    sql = "SELECT scope, space FROM records WHERE kind LIKE 'space%'"
    scopes = await node.db.read(lambda conn: {tuple(r) for r in conn.execute(sql)})
    assert scopes == {("federation", made.space_id)}  # federated, tagged: served only to the space's hosts
