"""node.federation.node_key: `bbs node rotate-key` on a real data folder (in-process through main), the signing-key
state in `node_meta`, `bbs peers` naming which peer holds the rotation, and a second rotation signed by the first's
key. The federation across a rotation, with real servers: tests/sync/test_node_key_rotation.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from identity import key_files, key_history, keys
from node.cli import main
from node.errors import Conflict
from node.federation import node_key
from node.federation import store as sync_store
from node.ops.datadir import DataDir
from node.service import Node
from node.store import db
from node.store.authority import key_events_of
from node.store.key_fence import KEY_FENCE_NAME, KeyFence

PEER = keys.SigningKey.generate().did


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_state_round_trips_through_node_meta() -> None:
    one, two = keys.SigningKey.generate(), keys.SigningKey.generate()
    raw = node_key.dump_state([one, two], ["e1"], {"p"})
    found, events, holders = node_key.parse_state(raw)
    assert ([k.did for k in found], events, holders) == ([one.did, two.did], ["e1"], {"p"})
    assert node_key.parse_state(None) == ([], [], set())


def test_rotate_key_twice_on_a_folder(data_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    root = data_dir[0]
    data = str(root)
    first = key_files.load_key(root / "node.key")
    assert run(capsys, "peer", "add", "http://10.0.0.2:8420", "--key", PEER, "--data", data)[0] == 0
    code, out, _ = run(capsys, "node", "rotate-key", "--data", data, "--json")
    assert code == 0
    one = json.loads(out)
    assert (one["node_id"], one["previous_key"]) == (first.did, first.did) and one["signing_key"] != first.did
    code, out, _ = run(capsys, "peers", "--data", data)
    assert code == 0 and f"node key {one['signing_key']}: not pulled yet (signed with the key before)" in out
    code, out, _ = run(capsys, "node", "rotate-key", "--data", data, "--json")
    two = json.loads(out)
    assert code == 0 and two["previous_key"] == one["signing_key"]  # signed by the first rotation's key
    path = DataDir(root).store
    found, events, holders = node_key.parse_state(db.read_sync(path, sync_store.node_keys_meta))
    assert [k.did for k in found] == [one["signing_key"], two["signing_key"]]
    assert (events, holders) == ([one["event"], two["event"]], set())
    history = key_history.resolve(first.did, db.read_sync(path, lambda c: key_events_of(c, first.did)))
    assert history.chain == (one["event"], two["event"]) and history.state.key == two["signing_key"]
    assert key_history.request_key_verdict(history, two["signing_key"]) == "valid"
    assert key_history.request_key_verdict(history, first.did) == "void"
    assert key_history.request_key_verdict(history, keys.SigningKey.generate().did) == "undecided"
    rotations = KeyFence(root / KEY_FENCE_NAME).rotations()
    assert [(r["retired"], r["key"]) for r in rotations] == [
        (first.did, one["signing_key"]),
        (one["signing_key"], two["signing_key"]),
    ]

    async def started() -> tuple[str, str, str | None]:
        node = Node(root)  # a start loads the newest key and signs with it
        node.open(search_index=False)
        try:
            return node.node_id, node.node_keys.signer.current.did, node.node_keys.state().blocked
        finally:
            node.close()

    assert asyncio.run(started()) == (first.did, two["signing_key"], None)


def test_a_refused_rotation_writes_no_fence(data_dir: tuple[Path, str]) -> None:
    root = data_dir[0]

    async def rotate_with_a_stranger_key() -> str | None:
        node = Node(root)
        node.open(search_index=False)
        try:
            node.node_keys.signer.keys = [keys.SigningKey.generate()]  # not the key the node's history ends with
            with pytest.raises(Conflict) as refused:
                await node.node_keys.rotate()
            return refused.value.code
        finally:
            node.close()

    assert asyncio.run(rotate_with_a_stranger_key()) == "key_not_current"
    assert KeyFence(root / KEY_FENCE_NAME).rotations() == []
    assert db.read_sync(DataDir(root).store, sync_store.node_keys_meta) is None


def test_a_peer_holding_the_key_never_writes_back_keys_another_process_replaced(
    data_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The holders of the newest key are written against the state as stored: a rotation stored by another process
    of the node (written here straight into `node_meta`) is kept, not replaced by this process's keys; for the same
    keys, holders another process recorded are kept, and once every peer holds the key the key before is dropped."""
    root = data_dir[0]
    other_peer = keys.SigningKey.generate().did
    for n, peer in enumerate((PEER, other_peer)):
        assert run(capsys, "peer", "add", f"http://10.0.0.{n + 2}:8420", "--key", peer, "--data", str(root))[0] == 0

    async def scenario() -> tuple[list[str], set[str], list[str], set[str]]:
        node = Node(root)
        node.open(search_index=False)
        try:
            node_keys = node.node_keys
            rotated = await node_keys.rotate()
            new = node_keys.signer.keys[-1]
            # another process recorded that the other peer holds it
            held_there = node_key.dump_state(node_keys.signer.keys, node_keys.events, {other_peer})
            await node.db.write(lambda c: sync_store.set_node_keys_txn(c, held_there))
            await node_keys.signer.accepted(PEER, new)  # every peer holds it now
            found, _, holders = node_key.parse_state(await node.db.read(sync_store.node_keys_meta))
            merged = ([k.did for k in found], holders)
            assert merged[0] == [rotated.signing_key] == [k.did for k in node_keys.signer.keys]
            # another process rotated again (state as stored); this one has not seen it yet
            newer = keys.SigningKey.generate()
            theirs = node_key.dump_state([new, newer], [*node_keys.events, "e-there"], set())
            await node.db.write(lambda c: sync_store.set_node_keys_txn(c, theirs))
            node_keys.signer.keys = [keys.SigningKey.generate(), new]  # as if its memory still held two keys
            node_keys.signer.holders = set()
            await node_keys.signer.accepted(other_peer, new)
            found, _, holders = node_key.parse_state(await node.db.read(sync_store.node_keys_meta))
            return merged[0], merged[1], [k.did for k in found], holders
        finally:
            node.close()

    merged_keys, merged_holders, kept_keys, kept_holders = asyncio.run(scenario())
    assert merged_holders == {PEER, other_peer} and len(merged_keys) == 1
    assert len(kept_keys) == 2 and kept_keys[0] == merged_keys[0] and kept_holders == set()


def test_a_holder_recorded_elsewhere_that_refused_the_key_here_since_does_not_count(
    data_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A peer another process recorded as holding the newest key, which then refused it here (put back from a
    backup, say), is not counted: the key before stays until it holds the newest again."""
    root = data_dir[0]
    restored_peer = keys.SigningKey.generate().did
    for n, peer in enumerate((PEER, restored_peer)):
        assert run(capsys, "peer", "add", f"http://10.0.0.{n + 2}:8420", "--key", peer, "--data", str(root))[0] == 0

    async def scenario() -> tuple[int, set[str], int]:
        node = Node(root)
        node.open(search_index=False)
        try:
            node_keys = node.node_keys
            await node_keys.rotate()
            new = node_keys.signer.keys[-1]
            held_there = node_key.dump_state(node_keys.signer.keys, node_keys.events, {restored_peer})
            await node.db.write(lambda c: sync_store.set_node_keys_txn(c, held_there))
            assert node_keys.signer.refused(restored_peer, new, "unknown_node_key")  # it lacks the key now
            await node_keys.signer.accepted(PEER, new)
            found, _, holders = node_key.parse_state(await node.db.read(sync_store.node_keys_meta))
            return len(found), holders, len(node_keys.signer.keys)
        finally:
            node.close()

    assert asyncio.run(scenario()) == (2, {PEER}, 2)
