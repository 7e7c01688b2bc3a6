"""A task of an agent holding its own key, across a rotation of that key (docs/format-v3.md 3.5, 3.6): its task
events after the rotation name the new key (`signing_key`) and keep the lease and the fold; one by the old key
that the rotation does not vouch for is refused. A real server, real SQLite, real keys."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from identity import keys, records
from node.service import Node
from tests.node.agents.test_key_events import identity_document, page, rotation, signed, version_of
from tests.node.agents.test_key_events import submit as submit_key_event
from tests.node.api_helpers import self_signer
from tests.node.workflows.helpers import lease
from tests.node.workflows.test_signed import submit, task_event


def by(signer: keys.SigningKey, record: dict[str, Any]) -> dict[str, Any]:
    """`record` (of the first key's author) signed instead by `signer`, naming it."""
    return signed(records.unsigned(record), signer)


async def test_a_lease_held_across_a_rotation_is_released_and_completed_by_the_new_key(
    client: TestClient, node: Node
) -> None:
    carol = await self_signer(node, "carol")
    now = node.now_ms()
    declare = task_event(carol.key, now, "declare", node_id=node.node_id, title="Job")
    status, _ = await submit(client, carol, "/tasks", declare)
    assert status == 201
    status, leased = await lease(client, carol.creds, "signed-job", seconds=60)
    assert status == 201
    lease_id = leased["lease"]["lease_id"]
    new = keys.SigningKey.generate()
    vouched = [version_of(declare), version_of(await identity_document(node, carol.agent_id))]
    event = rotation(carol.agent_id, carol.key, new, vouched, created_ms=now + 2)
    await submit_key_event(client, carol, event, [page(carol.agent_id, carol.key, event, vouched)], 201)

    # the old key after the rotation, not vouched for: refused, whatever it says
    stale = task_event(carol.key, now + 3, "release", lease=lease_id)
    status, problem = await submit(client, carol, "/tasks/signed-job/release", stale)
    assert (status, problem["code"]) == (422, "not_current_key"), problem
    stranger = by(keys.SigningKey.generate(), task_event(carol.key, now + 3, "release", lease=lease_id))
    status, problem = await submit(client, carol, "/tasks/signed-job/release", stranger)
    assert (status, problem["code"]) == (422, "unknown_signing_key"), problem

    # the new key: the lease the node granted before the rotation is still the fencing token
    release = by(new, task_event(carol.key, now + 3, "release", lease=lease_id, checkpoint={"step": 2}))
    status, released = await submit(client, carol, "/tasks/signed-job/release", release)
    assert status == 200 and released["lease"] is None and released["checkpoint"] == {"step": 2}, released
    complete = by(new, task_event(carol.key, now + 4, "complete"))
    status, done = await submit(client, carol, "/tasks/signed-job/complete", complete)
    assert status == 200 and done["status"] == "done", done
