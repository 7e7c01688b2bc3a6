"""node/entries/links.py: link records, node-signed or signed by their author, called directly (REST:
test_links_retract.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from identity import records
from node.errors import Forbidden, InvalidInput, NotFound
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import count, link_record, self_signer
from wire.api import PostEntry, PostLink, SignedSubmission

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def two_entries(node: Node, agent_id: str) -> tuple[str, str]:
    first, _ = await node.entries.post(agent_id, PostEntry("finding", "inform", "the source"), None)
    second, _ = await node.entries.post(agent_id, PostEntry("finding", "inform", "the target"), None)
    return first.record_hash, second.record_hash


async def test_a_node_signed_link_by_id_or_hash_is_stored_once(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    first, _ = await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "the source"), None)
    _, target = await two_entries(node, alice.agent_id)
    link, created = await node.links.create(
        alice.agent_id, PostLink(source=str(first.id), target=target, link_type="supports", annotation="yes"), None
    )
    assert created and (link.source, link.target, link.author_id) == (first.record_hash, target, alice.agent_id)
    assert link.resolved and not link.derived and link.annotation == "yes"
    # the same author asserting the same link again: one link
    same, created_again = await node.links.create(
        alice.agent_id, PostLink(source=first.record_hash, target=target, link_type="supports"), None
    )
    assert (same.id, created_again) == (link.id, False)


async def test_an_idempotency_key_replays_whatever_the_body(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    source, target = await two_entries(node, alice.agent_id)
    link, _ = await node.links.create(alice.agent_id, PostLink(source=source, target=target, link_type="supports"), "k")
    again, created = await node.links.create(
        alice.agent_id, PostLink(source=target, target=source, link_type="contradicts"), "k"
    )
    assert (again.id, created) == (link.id, False)
    assert await count(node, "links") == 1


async def test_link_errors_name_their_field_and_store_nothing(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    source, target = await two_entries(node, alice.agent_id)
    before = await count(node, "records")
    unknown_hash = "e" * 64
    with pytest.raises(NotFound) as no_source:
        await node.links.create(
            alice.agent_id, PostLink(source=unknown_hash, target=target, link_type="supports"), None
        )
    assert (no_source.value.code, no_source.value.field) == ("source_not_found", "$.source")
    assert str(no_source.value) == f"source entry {unknown_hash!r} is not on this node"
    with pytest.raises(NotFound) as no_target:
        await node.links.create(alice.agent_id, PostLink(source=source, target="99999", link_type="supports"), None)
    assert (no_target.value.code, no_target.value.field) == ("target_not_found", "$.target")
    assert str(no_target.value) == "target '99999' is not a known entry id or a record hash"
    with pytest.raises(InvalidInput) as itself:
        await node.links.create(alice.agent_id, PostLink(source=source, target=source, link_type="supports"), None)
    assert (itself.value.code, itself.value.field) == ("self_link", "$.target")
    assert await count(node, "records") == before
    # a well-formed hash of an entry not here yet is a fine target: the link resolves when it arrives
    pending, created = await node.links.create(
        alice.agent_id, PostLink(source=source, target=unknown_hash, link_type="supports"), None
    )
    assert created and not pending.resolved


async def test_an_author_signed_link(node: Node) -> None:
    bob = await self_signer(node, "bob")
    source, target = await two_entries(node, (await node.agents.create("carol", None)).agent_id)
    record = link_record(bob.key, source, target, "supports", created_ms=node.now_ms())
    link, created = await node.links.create(bob.agent_id, SignedSubmission(record=record), None)
    assert created and link.origin_hash == records.compute_hash(record) and link.author_id == bob.agent_id
    with pytest.raises(InvalidInput) as unsigned:
        await node.links.create(bob.agent_id, PostLink(source=source, target=target, link_type="contradicts"), None)
    assert unsigned.value.code == "agent_signs_own_records"
    itself = link_record(bob.key, source, source, "supports", created_ms=node.now_ms())
    with pytest.raises(InvalidInput) as self_link:
        await node.links.create(bob.agent_id, SignedSubmission(record=itself), None)
    assert (self_link.value.code, self_link.value.field) == ("self_link", "$.record.target")
    carol = await node.agents.create("dave", None)
    with pytest.raises(Forbidden):
        await node.links.create(carol.agent_id, SignedSubmission(record=record), None)
    # a signed link whose source is not on this node
    elsewhere = link_record(bob.key, "d" * 64, target, "supports", created_ms=node.now_ms())
    with pytest.raises(NotFound) as no_source:
        await node.links.create(bob.agent_id, SignedSubmission(record=elsewhere), None)
    assert (no_source.value.code, no_source.value.field) == ("source_not_found", "$.record.source")
