"""The key fence of a node served by several processes on one PostgreSQL database (docs/decisions.md record 92): a
rotation of a key the node keeps, made through process a, is fenced in process b's folder too, by b's next write
transaction; the database restored from a dump taken before the rotation then signs nothing with the rotated-out
keys through b, as through a.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from node.ops import pg_tools
from node.ops import store as ops_store
from node.store.key_fence import KEY_FENCE_NAME, KeyFence
from tests.conftest import FakeClock
from tests.node.api_helpers import post, problem
from tests.node.multiproc.conftest import Start, TwoProcesses, stop_process
from tests.node.multiproc.test_decided_once import admin, agent, call

pytestmark = pytest.mark.postgresql


async def test_a_rotation_through_a_is_fenced_in_b_and_a_restore_from_before_signs_nothing_through_b(
    two_processes: TwoProcesses, start_process: Start, tmp_path: Path, clock: FakeClock
) -> None:
    tp = two_processes
    node_id = tp.a.node.node_id
    creds = await agent(tp, "keeper")  # its first key is its did:key
    await post(tp.b.client, creds, content="signed by the first key, through b")
    pg_tools.dump(tp.url, tmp_path / "before.dump")
    status, rotated = await call(tp.a.client, "POST", f"/v1/agents/{creds.agent_id}/signing-key", admin(tp))
    assert status == 201, rotated
    status, node_key = await call(tp.a.client, "POST", "/v1/node/key", admin(tp))
    assert status == 201, node_key
    assert KeyFence(tp.b.folder / KEY_FENCE_NAME).rotations() == []  # b has not written since

    clock.advance(1.0)  # past the credential check: b signs with the new key
    await post(tp.b.client, creds, content="signed by the new key, through b")  # b's write finds a's commits
    fenced = {
        (r["identity"], r["retired"], r["key"], r["event"]) for r in KeyFence(tp.b.folder / KEY_FENCE_NAME).rotations()
    }
    assert fenced == {
        (creds.agent_id, creds.agent_id, rotated["signing_key"], rotated["event"]),
        (node_id, node_id, node_key["signing_key"], node_key["event"]),
    }
    await post(tp.b.client, creds, content="and again")  # learned once: the file is unchanged
    assert len(KeyFence(tp.b.folder / KEY_FENCE_NAME).rotations()) == 2

    # the database restored from before both rotations; only b is started again
    for p in (tp.a, tp.b):
        await stop_process(p)
    pg_tools.restore(tmp_path / "before.dump", tp.url, ops_store.CLEAR_SCHEMA_PG)
    b = await start_process(tp.b.folder)
    refused = await post(b.client, creds, None, content="by the rotated-out key, after the restore")
    problem(refused, 409, "signing_key_rotated_out")
    status, blocked = await call(b.client, "POST", "/v1/node/key", admin(tp))
    assert (status, blocked["code"]) == (409, "node_key_rotated_out"), blocked
    assert b.node.node_keys.state().blocked is not None
