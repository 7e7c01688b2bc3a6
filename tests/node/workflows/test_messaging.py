"""node/workflows/messaging.py: the bus on the node's one `Bus`, called directly (REST: test_messages.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from node.errors import Forbidden, InvalidInput
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import self_signer
from tests.node.workflows.helpers import count_records
from wire.workflows import MessageQuery, PostMessage

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def test_the_same_message_twice_in_one_millisecond_is_two_messages(node: Node, make_agent: MakeAgent) -> None:
    """The second send's record would be the first's: it is signed again 1 ms later (the one hash-retry loop)."""
    alice = await make_agent("alice")
    body = PostMessage(message_type="status", body="still working")
    first, created = await node.bus.post_message(alice.agent_id, body)
    second, created_again = await node.bus.post_message(alice.agent_id, body)
    assert created and created_again and second.id != first.id
    assert second.record_hash != first.record_hash and second.created_at > first.created_at
    page = await node.bus.messages(MessageQuery(), viewer=None)
    assert {m.id for m in page.messages} == {first.id, second.id}


async def test_a_message_key_replays_and_a_sender_is_only_itself(node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    first, _ = await node.bus.post_message(alice.agent_id, PostMessage(message_type="note", body="once"), "k")
    again, created = await node.bus.post_message(alice.agent_id, PostMessage(message_type="note", body="x"), "k")
    assert (again.id, created, again.body) == (first.id, False, "once")
    with pytest.raises(Forbidden):
        await node.bus.post_message(alice.agent_id, PostMessage(message_type="note", from_agent=bob.agent_id))
    signer = await self_signer(node, "own")
    with pytest.raises(InvalidInput) as unsigned:
        await node.bus.post_message(signer.agent_id, PostMessage(message_type="note"))
    assert unsigned.value.code == "agent_signs_own_records"
    assert await count_records(node, "message") == 1
