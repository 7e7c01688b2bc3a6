"""The agent admin commands run beside a serving node leave its search index alone (they never open its writer)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import aiohttp
import pytest

from node.ops.datadir import initialise
from tests.ops.test_lifecycle import BBS, REPO, free_port, wait_healthy

pytestmark = pytest.mark.slow


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """A `bbs` command of this checkout; it must succeed."""
    done = subprocess.run([*BBS, *args], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done


def assert_quiet(done: subprocess.CompletedProcess[str]) -> None:
    """Nothing said about the search index: the command did not try to open it."""
    for said in (done.stdout, done.stderr):
        assert "search index" not in said and "LockBusy" not in said and "Lockfile" not in said, said


async def test_agent_create_rotate_export_import_beside_a_serving_node(tmp_path: Path) -> None:
    served, other = tmp_path / "served", tmp_path / "other"
    initialise(served)
    initialise(other)
    run("agent", "create", "far", "--data", str(other))
    far_file = tmp_path / "far.key"
    run("agent", "export", "far", "--data", str(other), "--out", str(far_file))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*BBS, "serve", "--data", str(served), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        await wait_healthy(url, proc)  # the serving node holds its index's writer lock from here on
        created = run("agent", "create", "alice", "--data", str(served), "--json")
        rotated = run("agent", "rotate-key", "alice", "--data", str(served), "--json")
        exported = run("agent", "export", "alice", "--data", str(served), "--out", str(tmp_path / "alice.key"))
        imported = run("agent", "import", str(far_file), "--data", str(served), "--name", "far", "--json")
        for done in (created, rotated, exported, imported):
            assert_quiet(done)
        assert json.loads(imported.stdout)["agent_id"] != json.loads(created.stdout)["agent_id"]
        # the serving node's index still answers searches with words, for an agent the commands made
        headers = {"Authorization": f"Bearer {json.loads(rotated.stdout)['api_key']}"}
        body = {"entry_type": "finding", "performative": "inform", "content": "zeppelins beside the admin commands"}
        async with aiohttp.ClientSession() as session:
            async with session.post(url + "/v1/entries", json=body, headers=headers) as resp:
                assert resp.status == 201, await resp.text()
                posted = await resp.json()
            async with session.get(url + "/v1/search", params={"q": "zeppelins"}, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                found = await resp.json()
        assert [e["id"] for e in found["entries"]] == [posted["id"]]
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    assert "Traceback" not in stderr
