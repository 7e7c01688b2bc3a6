"""The key fence of a node served by several processes on one PostgreSQL database (docs/decisions.md record 92): a
rotation of a key the node keeps, made through process a, is fenced in process b's folder too, by b's next write
transaction; the database restored (`bbs restore`: a new store epoch) from a backup taken before the rotation then
signs nothing with the rotated-out keys through b, as through a. A thief's rotation by a stolen kept key is not
fenced: the recovery built on the kept key goes through either process.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from identity import keys
from node import cli
from node.agents import recovery_file
from node.agents import service as agents
from node.ops import backup
from node.store.key_fence import KEY_FENCE_NAME, SETTLE_AFTER_MS, KeyFence
from tests.conftest import FakeClock
from tests.node.agents.test_key_events import record_body, rotation, submit
from tests.node.api_helpers import SelfSigner, post, problem
from tests.node.multiproc.conftest import Start, TwoProcesses, second_folder, stop_process
from tests.node.multiproc.test_decided_once import admin, agent, call

pytestmark = pytest.mark.postgresql


def fenced(folder: Path) -> set[tuple[str, str, str, str]]:
    """(identity, key taken out, key installed, event) of every rotation the folder's key fence file lists."""
    return {(r["identity"], r["retired"], r["key"], r["event"]) for r in KeyFence(folder / KEY_FENCE_NAME).rotations()}


async def test_a_rotation_through_a_is_fenced_in_b_and_a_restore_from_before_signs_nothing_through_b(
    two_processes: TwoProcesses, start_process: Start, tmp_path: Path, clock: FakeClock
) -> None:
    tp = two_processes
    node_id = tp.a.node.node_id
    creds = await agent(tp, "keeper")  # its first key is its did:key
    await post(tp.b.client, creds, content="signed by the first key, through b")
    backup.backup(tp.a.folder, tmp_path / "before.tar")
    status, rotated = await call(tp.a.client, "POST", f"/v1/agents/{creds.agent_id}/signing-key", admin(tp))
    assert status == 201, rotated
    status, node_key = await call(tp.a.client, "POST", "/v1/node/key", admin(tp))
    assert status == 201, node_key
    assert fenced(tp.b.folder) == set()  # b has not written since

    clock.advance(1.0)  # past the credential check: b signs with the new key
    await post(tp.b.client, creds, content="signed by the new key, through b")  # b's write finds a's commits
    both = {
        (creds.agent_id, creds.agent_id, rotated["signing_key"], rotated["event"]),
        (node_id, node_id, node_key["signing_key"], node_key["event"]),
    }
    assert fenced(tp.b.folder) == fenced(tp.a.folder) == both
    await post(tp.b.client, creds, content="and again")  # learned once
    assert len(KeyFence(tp.b.folder / KEY_FENCE_NAME).rotations()) == 2

    # the database restored from before both rotations, through b's folder (a new store epoch); only b started, well
    # after the rotations (a fence entry of the same epoch whose event the database lacks would be forgotten by now)
    for p in (tp.a, tp.b):
        await stop_process(p)
    backup.restore(tmp_path / "before.tar", tp.b.folder, force=True)
    clock.advance(SETTLE_AFTER_MS / 1000 + 60)
    b = await start_process(tp.b.folder)
    assert fenced(tp.b.folder) == both  # carried by the restore, kept by the start
    refused = await post(b.client, creds, None, content="by the rotated-out key, after the restore")
    problem(refused, 409, "signing_key_rotated_out")
    status, blocked = await call(b.client, "POST", "/v1/node/key", admin(tp))
    assert (status, blocked["code"]) == (409, "node_key_rotated_out"), blocked
    assert b.node.node_keys.state().blocked is not None


async def test_a_thiefs_rotation_is_not_fenced_and_the_recovery_goes_through_the_other_process(
    two_processes: TwoProcesses, clock: FakeClock
) -> None:
    tp = two_processes
    creds = await agent(tp, "keeper")
    status, first = await call(tp.a.client, "POST", f"/v1/agents/{creds.agent_id}/signing-key", admin(tp))
    assert status == 201, first  # sets the node's recovery key in the history
    name = recovery_file.FILE_NAME  # b's folder holds it too, as `bbs init --join` copies it
    shutil.copy2(tp.a.folder / name, tp.b.folder / name)
    kept = await tp.a.node.db.read(lambda c: agents.signing_key(c, creds.agent_id))
    assert kept is not None and kept.did == first["signing_key"]
    # a thief with a copy of the kept key rotates the identity to its own key, through a
    thief = keys.SigningKey.generate()
    theft = rotation(creds.agent_id, kept, thief, [], seq=2, prior=first["event"], created_ms=tp.a.node.now_ms())
    await submit(tp.a.client, SelfSigner(creds, kept), theft, [], 201)
    clock.advance(1.0)
    status, recovered = await call(tp.b.client, "POST", f"/v1/agents/{creds.agent_id}/recovery", admin(tp), {})
    assert status == 201, recovered  # b's write transaction learned the fence first: not the thief's rotation
    assert recovered["event_kind"] == "recover" and recovered["removed_key"] == kept.did
    rotated_here = (creds.agent_id, creds.agent_id, first["signing_key"], first["event"])
    recovery = (creds.agent_id, kept.did, recovered["signing_key"], recovered["event"])
    assert fenced(tp.a.folder) == {rotated_here}
    assert fenced(tp.b.folder) == {rotated_here, recovery}
    await post(tp.a.client, creds, content="through a, after the recovery")  # a learns the recovery b made
    assert fenced(tp.a.folder) == {rotated_here, recovery}


async def test_a_learn_that_fails_is_made_again_by_the_next_write(
    two_processes: TwoProcesses, clock: FakeClock
) -> None:
    """b's first write after a's rotation cannot write its fence file: that write fails whole (nothing of it is
    acknowledged), b's authority cache is dropped, and b's next write learns the rotation (record 92)."""
    tp = two_processes
    creds = await agent(tp, "keeper")
    await post(tp.b.client, creds, content="through b, before the rotation")
    status, rotated = await call(tp.a.client, "POST", f"/v1/agents/{creds.agent_id}/signing-key", admin(tp))
    assert status == 201, rotated
    clock.advance(1.0)
    in_the_way = tp.b.folder / KEY_FENCE_NAME
    in_the_way.mkdir()  # the fence file's rename into place fails
    failed = await post(tp.b.client, creds, None, content="through b, its fence not writable")
    problem(failed, 503, "key_fence_unwritable")
    in_the_way.rmdir()
    await post(tp.b.client, creds, content="through b, its fence writable again")
    assert fenced(tp.b.folder) == {(creds.agent_id, creds.agent_id, rotated["signing_key"], rotated["event"])}
    count = await tp.a.node.db.read(
        lambda c: c.execute("SELECT count(*) FROM entries WHERE content LIKE '%not writable%'").fetchone()[0]
    )
    assert count == 0


async def test_a_cli_rotation_through_a_folder_no_process_serves_reaches_every_serving_process(
    two_processes: TwoProcesses, tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bbs agent rotate-signing-key` refuses only a folder a process serves (its datalock); through a third folder of
    the node, unserved, it commits on the one database, and the serving processes see it at their next write (the
    write clock, record 90): they sign with the new key and fence the retired one (record 92)."""
    tp = two_processes
    creds = await agent(tp, "keeper")
    await post(tp.b.client, creds, content="signed by the first key, through b")
    third = tmp_path / "c"
    second_folder(tp.a.folder, third)
    args = ["agent", "rotate-signing-key", "keeper", "--data", str(third), "--json"]
    assert await asyncio.to_thread(cli.main, args) == 0
    rotated = json.loads(capsys.readouterr().out)
    clock.advance(1.0)  # past the credential check
    for p in (tp.a, tp.b):
        posted = await post(p.client, creds, content=f"after the rotation, through {p.folder.name}")
        signed = await record_body(p.node, posted["record_hash"])
        assert signed.get("signing_key") == rotated["signing_key"], signed
        assert fenced(p.folder) == {(creds.agent_id, creds.agent_id, rotated["signing_key"], rotated["event"])}
