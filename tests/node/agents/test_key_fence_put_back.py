"""The key fence against a database put back by hand from before a rotation (docs/decisions.md record 93): the file
copied over bbs.db, or on PostgreSQL a dump restored over the node's database. Either keeps the store epoch, so the
fence's entry looks like a rotation that never committed; its `committed` mark keeps it, a minute on and more, and
the node signs nothing with the key the rotation took out. Restarts are real (a Node closed and opened again on the
same folder); time moves on the fake clock."""

from __future__ import annotations

from pathlib import Path

from node.store.key_fence import KEY_FENCE_NAME, SETTLE_AFTER_MS, KeyFence
from tests.conftest import FakeClock
from tests.node.api_helpers import problem
from tests.node.workflows.test_fence import Serve, _copy_db, _put_back, serve, stop

__all__ = ["serve"]  # the fixture, used by name


async def test_a_database_put_back_by_hand_from_before_a_rotation_signs_nothing_with_the_retired_keys(
    serve: Serve, data_dir: tuple[Path, str], tmp_path: Path, clock: FakeClock
) -> None:
    root, token = data_dir
    admin = {"Authorization": f"Bearer {token}"}
    n, c = await serve()
    created = await n.agents.create("keeper", "Keeper")
    agent = {"Authorization": f"Bearer {created.api_key}"}
    post = {"entry_type": "finding", "performative": "inform", "content": "signed by the first key"}
    assert (await c.post("/v1/entries", json=post, headers=agent)).status == 201
    _copy_db(root, tmp_path / "old.db")  # the copy: before both rotations
    resp = await c.post(f"/v1/agents/{created.agent_id}/signing-key", json={}, headers=admin)
    assert resp.status == 201, await resp.text()
    resp = await c.post("/v1/node/key", headers=admin)
    assert resp.status == 201, await resp.text()
    assert {r["committed"] for r in KeyFence(root / KEY_FENCE_NAME).rotations()} == {"1"}

    await stop(n, c)
    _put_back(tmp_path / "old.db", root)  # by hand: the store epoch is the one the rotations were made in
    clock.advance(SETTLE_AFTER_MS / 1000 + 60)  # past the minute after which an unmarked entry is forgotten
    n, c = await serve()
    assert len(KeyFence(root / KEY_FENCE_NAME).rotations()) == 2  # the start forgot neither
    post["content"] = "by the rotated-out key, after the put-back"
    resp = await c.post("/v1/entries", json=post, headers=agent)
    problem(await resp.json(), 409, "signing_key_rotated_out")
    resp = await c.post("/v1/node/key", headers=admin)
    problem(await resp.json(), 409, "node_key_rotated_out")
