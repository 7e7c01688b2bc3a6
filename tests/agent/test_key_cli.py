"""agent.key_cli: `bbs agent rotate-signing-key|revoke|recover --identity FILE --node URL`, the real `bbs` command
in subprocesses against a real `bbs serve`."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from agent import identity_file, key_lifecycle
from tests.agent.conftest import BBS, ServedNode

pytestmark = pytest.mark.slow


def bbs(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*BBS, *args], capture_output=True, text=True, env=dict(os.environ), stdin=subprocess.DEVNULL)
    assert done.returncode == code, done.stderr
    return done


def held(served_node: ServedNode, tmp_path: Path) -> Path:
    """An identity file of an agent registered on `served_node` that holds its own key."""
    home, out = tmp_path / "home", tmp_path / "roamer.id"
    bbs("init", "--data", str(home))
    bbs("agent", "create", "roamer", "--data", str(home))
    bbs("agent", "export", "roamer", "--data", str(home), "--out", str(out))
    bbs("agent", "import", str(out), "--data", str(served_node.data))
    return out


def test_an_identity_file_is_rotated_revoked_and_recovered_from_the_command_line(
    served_node: ServedNode, tmp_path: Path
) -> None:
    path = held(served_node, tmp_path)
    did = identity_file.load(path).did
    node = ["--identity", str(path), "--node", served_node.url]
    rotated = json.loads(bbs("agent", "rotate-signing-key", *node, "--json").stdout)
    recovery = key_lifecycle.recovery_key_path(path)
    assert stat.S_IMODE(recovery.stat().st_mode) == 0o600
    assert rotated["key_history"]["recovery"] == identity_file_key(recovery)
    assert identity_file.load(path).key.did == rotated["key_history"]["current_key"] != did
    # revoke: not a terminal and no --yes signs nothing; a wrong --key is refused
    refused = bbs("agent", "revoke", *node, code=1)
    assert "vouches for 0 records" in refused.stderr and "--yes" in refused.stderr
    assert "not the identity file's signing key" in bbs("agent", "revoke", *node, "--key", did, "--yes", code=1).stderr
    revoked = json.loads(bbs("agent", "revoke", *node, "--yes", "--json").stdout)
    assert [e["event"] for e in revoked["key_history"]["events"]] == ["rotate", "revoke"]
    assert identity_file.load(path).key.did == revoked["key_history"]["current_key"]
    # a thief with a copy rotates to its own key; the owner recovers with the recovery key
    stolen = tmp_path / "stolen.id"
    shutil.copy(path, stolen)
    bbs("agent", "rotate-signing-key", "--identity", str(stolen), "--node", served_node.url)
    out = bbs("agent", "recover", *node, "--yes", "--json").stdout
    recovered = json.loads(out)["key_history"]
    # seq 3 holds the thief's rotation and the recovery (listed by address): the recovery wins the place
    assert sorted((e["seq"], e["event"], e["in_chain"]) for e in recovered["events"]) == [
        (1, "rotate", True), (2, "revoke", True), (3, "recover", True), (3, "rotate", False)
    ]  # fmt: skip
    assert recovered["current_key"] == identity_file.load(path).key.did
    # without its recovery key file an identity cannot be revoked
    recovery.unlink()
    assert "no recovery key" in bbs("agent", "revoke", *node, "--yes", code=1).stderr
    assert "NAME" in bbs("agent", "revoke", "--yes", code=1).stderr


def identity_file_key(path: Path) -> str:
    from identity import keys

    return keys.load_key(path).did
