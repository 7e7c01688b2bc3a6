"""node.workflows.relay: which changes go to a task's home node, how they are drafted, and storing them after."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from identity import canonical, keys, records
from node.errors import NotFound
from node.service import Node
from node.spaces.sight import OPERATOR
from node.store import projections
from node.workflows import relay
from tests.conftest import AgentCreds
from tests.node.workflows.helpers import count_records
from wire.time import parse_ms
from wire.workflows import DeclareTask


async def _remote_task(node: Node, key: str) -> str:
    """A task first declared on another node (its home), as sync would bring it here; returns that node's id."""
    elsewhere, author = keys.SigningKey.generate(), keys.SigningKey.generate()
    record = records.sign(
        {
            "kind": "task_event",
            "schema_version": "v1",
            "author_id": author.did,
            "created_at": canonical.now_created_at(),
            "event": "declare",
            "task_key": key,
            "node_id": elsewhere.did,
        },
        author,
    )
    record_hash, decoded = records.check(record)
    await node.db.write(
        lambda c: projections.append(c, record, record_hash, decoded, origin=elsewhere.did, now_ms=node.now_ms())
    )
    return elsewhere.did


async def test_which_tasks_and_fields_the_home_node_decides(node: Node, make_agent: Any) -> None:
    home = await _remote_task(node, "remote")
    await node.workflows.declare((await make_agent("boss")).agent_id, DeclareTask(key="here"))
    read = node.db.read
    assert await read(lambda c: relay.homed_elsewhere(c, "remote", None, None, node.node_id)) == ("remote", home)
    assert await read(lambda c: relay.homed_elsewhere(c, "here", None, None, node.node_id)) is None
    with pytest.raises(NotFound):
        await read(lambda c: relay.homed_elsewhere(c, "missing", None, None, node.node_id))
    for fields, expected in (
        ({"task_key": "remote", "title": "T", "depends_on": []}, None),  # anyone's to change, here
        ({"task_key": "remote", "status": "cancelled"}, home),
        ({"task_key": "remote", "checkpoint": {"a": 1}}, home),
        ({"task_key": "here", "status": "cancelled"}, None),  # homed here: decided here
        ({"task_key": "new", "status": "done"}, None),  # a new task is homed where it is declared
    ):
        assert await read(partial(relay.declared_elsewhere, fields=fields, node_id=node.node_id)) == expected


async def test_drafts_are_dated_after_every_event_held_and_stored_once(node: Node, make_agent: Any) -> None:
    await _remote_task(node, "remote")
    worker: AgentCreds = await make_agent("worker")
    signer = await node.sealing.signer(worker.agent_id)
    newest = await node.db.read(
        lambda c: c.execute("SELECT max(created_ms) FROM task_events WHERE task_key = 'remote'").fetchone()[0]
    )
    sealed = await relay.sign_event(node.db, signer, "remote", "complete", {"checkpoint": {"n": 1}}, newest - 5_000)
    assert sealed[0]["author_id"] == worker.agent_id and sealed[0]["event"] == "complete"
    assert parse_ms(sealed[0]["created_at"]) > newest  # the clock ran behind: still after the newest event
    before = await count_records(node, "task_event")
    now = node.now_ms()
    await node.db.write(lambda c: relay.store_txn(c, sealed, worker.agent_id, ("key-1", "task_complete"), now))
    await node.db.write(lambda c: relay.store_txn(c, sealed, worker.agent_id, ("key-1", "task_complete"), now))
    assert await count_records(node, "task_event") == before + 1
    assert (await node.workflows.task("remote", OPERATOR)).status == "done"
