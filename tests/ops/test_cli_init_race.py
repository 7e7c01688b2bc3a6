"""Several real `bbs` processes creating the same fresh data folder at once build exactly one node.

The README flow (`bbs serve` in one terminal, `bbs agent create` in another) and a container entrypoint
running `bbs init` beside a `bbs serve` both start on a folder that does not exist yet. Each round starts
`bbs init` several times, one `bbs serve` and one `bbs agent create` together on a fresh folder, and checks
that the folder is one consistent node: node.key's did is the database's node id, exactly one process
printed the admin token, every process either succeeded or (agent create, before any node existed) was
refused in one line, and no temporary file is left.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from identity import key_files
from node.features import LOG
from node.ops import doctor

pytestmark = pytest.mark.slow
REPO = Path(__file__).parents[2]
BBS = [sys.executable, "-m", "node.cli"]
ROUNDS = 4
INITS = 4


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*BBS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True
    )


def wait_serving(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """Read serve's stdout until it says it serves (or exits), then stop it with SIGTERM; return its output."""
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if " serving http://" in line:
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    return "".join(seen) + out, err


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_concurrent_commands_on_a_fresh_folder_build_one_node(tmp_path: Path, round_: int) -> None:
    data = tmp_path / f"round-{round_}" / "data"
    procs = [start("init", "--data", str(data)) for _ in range(INITS)]
    serve = start("serve", "--data", str(data), "--port", "0")
    create = start("agent", "create", "alice", "--data", str(data), "--json")

    outputs = [p.communicate(timeout=120) for p in procs]
    create_out, create_err = create.communicate(timeout=120)
    serve_out, serve_err = wait_serving(serve)

    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert err == "" or "already initialised" in err, err
    assert serve.returncode == 0, serve_err
    assert "Traceback" not in serve_err and " serving http://" in serve_out
    if create.returncode == 0:
        assert '"agent_id":"did:key:z' in create_out.replace(" ", "")
    else:  # it ran before any process had created the node: refused, and it created nothing
        assert create.returncode == 1 and create_err.startswith("bbs: ") and "holds no node" in create_err
        assert len(create_err.splitlines()) == 1

    printed = [out for out, _err in outputs] + [serve_out]
    assert sum(out.count("Admin token") for out in printed) == 1

    node_did = key_files.load_key(data / "node.key").did
    conn = sqlite3.connect(data / "bbs.db")
    try:
        stored = conn.execute("SELECT value FROM node_meta WHERE key = 'node_id'").fetchall()
        admins = conn.execute("SELECT count(*) FROM credentials WHERE role = 'admin'").fetchone()[0]
    finally:
        conn.close()
    assert stored == [(node_did,)] and admins == 1
    assert not [p for p in data.iterdir() if p.name.endswith(".tmp") or p.name.startswith(".node.key")]
    checks = doctor.diagnose(data, LOG, peer_timeout=1)
    assert doctor.exit_status(checks) == 0, [c for c in checks if c.status != "ok"]
