"""node/workflows/service.py: tasks and leases on the node's one `Workflows`, called directly (REST: the
other files of this folder)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from identity import keys, records
from node.errors import Forbidden, InvalidInput
from node.service import Node
from node.spaces.sight import OPERATOR
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import self_signer
from tests.node.workflows.helpers import count_records
from wire.api import SignedSubmission
from wire.time import format_ms
from wire.workflows import DeclareTask, FinishIn, LeaseIn

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def test_declare_lease_and_complete_a_task(node: Node, make_agent: MakeAgent, clock: FakeClock) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    task, created = await node.workflows.declare(alice.agent_id, DeclareTask(key="write-adr", title="Write the ADR"))
    assert created and task.status == "pending" and task.home_node == node.node_id
    same, created_again = await node.workflows.declare(alice.agent_id, DeclareTask(key="write-adr"))
    assert (same.id, created_again) == (task.id, False)
    assert [t.key for t in (await node.workflows.ready(OPERATOR)).tasks] == ["write-adr"]

    leased, granted = await node.workflows.lease(bob.agent_id, "write-adr", LeaseIn(seconds=60))
    assert granted and leased.lease is not None and leased.lease.holder == bob.agent_id
    assert (await node.workflows.ready(OPERATOR)).tasks == []
    with pytest.raises(Forbidden) as for_other:
        await node.workflows.lease(alice.agent_id, "write-adr", LeaseIn(agent="bob"))
    assert for_other.value.code == "lease_for_other"

    assert leased.lease is not None
    finish = FinishIn(checkpoint={"pages": 3}, lease=leased.lease.lease_id)
    done = await node.workflows.complete(bob.agent_id, str(task.id), finish, "done-1")
    assert done.status == "done" and done.lease is None and done.checkpoint == {"pages": 3}
    events = await count_records(node, "task_event")
    assert (await node.workflows.complete(bob.agent_id, "write-adr", FinishIn(), "done-1")).status == "done"
    assert await count_records(node, "task_event") == events  # a retry of the same key appends nothing
    clock.advance(120)
    assert (await node.workflows.task("write-adr", OPERATOR)).status == "done"


async def test_a_task_event_its_agent_signed(node: Node) -> None:
    signer = await self_signer(node, "own")
    declared = {
        "kind": "task_event",
        "schema_version": "v1",
        "author_id": signer.agent_id,
        "created_at": format_ms(node.now_ms()),
        "task_key": "signed-task",
        "event": "declare",
        "node_id": node.node_id,
        "title": "Signed by its agent",
    }
    record = records.sign(declared, signer.key)
    task, created = await node.workflows.declare(signer.agent_id, SignedSubmission(record=record))
    assert created and task.title == "Signed by its agent"
    elsewhere = records.sign(dict(declared, task_key="other", node_id=keys.SigningKey.generate().did), signer.key)
    with pytest.raises(InvalidInput) as wrong_node:
        await node.workflows.declare(signer.agent_id, SignedSubmission(record=elsewhere))
    assert (wrong_node.value.code, wrong_node.value.field) == ("wrong_node", "$.record.node_id")
