"""`bbs doctor`: each check finds what it is for, and never modifies the live store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from node.features import LOG
from node.ops import doctor
from node.ops.datadir import DataDir
from node.store import db, projections
from tests.conftest import AgentCreds

REPO = Path(__file__).parents[3]
MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def statuses(root: Path) -> dict[str, str]:
    return {c.name: c.status for c in doctor.diagnose(root, LOG, peer_timeout=2)}


def tamper(root: Path, sql: str) -> None:
    """One statement run on the folder's database (either engine), committed."""
    conn = db.connect_store(DataDir(root).store)
    try:
        conn.execute(sql)
    finally:
        conn.close()


def contents(root: Path) -> dict[str, Any]:
    """What the folder's database holds: the log, the node's identity, every projection table, the identities the
    database hands out next (a trial rebuild on PostgreSQL truncates and refills those tables, then rolls back)."""
    conn = db.connect_store(DataDir(root).store, log=LOG)
    try:
        found: dict[str, Any] = projections.snapshot(conn)
        found["records"] = [tuple(r) for r in conn.execute("SELECT seq, hash FROM records ORDER BY seq")]
        found["node_meta"] = [tuple(r) for r in conn.execute("SELECT key, value FROM node_meta ORDER BY key")]
        return found
    finally:
        conn.close()


async def seeded(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    for i in range(3):
        resp = await client.post(
            "/v1/entries",
            json={"entry_type": "finding", "performative": "inform", "content": f"doctor {i}"},
            headers=alice.headers,
        )
        assert resp.status == 201


async def test_healthy_store_passes_while_serving(
    client: TestClient, make_agent: MakeAgent, data_dir: tuple[Path, str]
) -> None:
    await seeded(client, make_agent)
    sqlite_file = data_dir[0] / "bbs.db"
    before = sqlite_file.stat().st_mtime_ns if sqlite_file.exists() else None
    held = contents(data_dir[0])
    got = statuses(data_dir[0])
    assert set(got.values()) == {"ok"}, got
    assert {"node_key", "schema", "integrity", "identity", "search_index", "projections"} <= set(got)
    assert contents(data_dir[0]) == held
    assert (sqlite_file.stat().st_mtime_ns if sqlite_file.exists() else None) == before


async def test_projection_drift_is_found(client: TestClient, make_agent: MakeAgent, data_dir: tuple[Path, str]) -> None:
    await seeded(client, make_agent)
    await client.close()
    tamper(data_dir[0], "DELETE FROM agents")
    got = statuses(data_dir[0])
    assert got["projections"] == "fail" and got["integrity"] == "ok"
    # the live store was not repaired by the check: the drift is still there
    assert contents(data_dir[0])["agents"] == []


def test_key_permissions_and_missing_key(data_dir: tuple[Path, str]) -> None:
    key = data_dir[0] / "node.key"
    os.chmod(key, 0o644)
    assert statuses(data_dir[0])["node_key"] == "fail"
    key.unlink()
    got = statuses(data_dir[0])
    assert got["node_key"] == "fail" and got["integrity"] == "ok"


def test_missing_folder_and_database(tmp_path: Path, data_dir: tuple[Path, str]) -> None:
    assert statuses(tmp_path / "nowhere") == {"data_folder": "fail"}
    data = DataDir(data_dir[0])
    url = data.store_url
    if url is None:
        data.db_path.unlink()
    else:  # the database the folder names is not there (dropped, or a server without it)
        named = url.split("@/", 1)[1].split("?", 1)[0]
        data.store_url_path.write_text(url.replace(f"@/{named}?", "@/bbs_no_such_database?") + "\n")
    found = {c.name: c for c in doctor.diagnose(data_dir[0], LOG, peer_timeout=2)}
    assert found["database"].status == "fail"
    assert "does not exist" in found["database"].detail
    assert url is None or "postgresql://" not in found["database"].detail  # the URL (a password, maybe) is not shown


def test_peers_reachable_or_not(data_dir: tuple[Path, str], tmp_path: Path) -> None:
    root = data_dir[0]
    other = tmp_path / "other"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "node.cli", "serve", "--data", str(other), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
        env=env,
    )
    try:
        line = ""
        while "serving" not in line:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, "node exited"
        other_id = line.split()[1]
        dead = _free_port()
        conn = db.connect_store(DataDir(root).store)
        try:
            conn.execute(
                "INSERT INTO peers (node_id, url, added_ms) VALUES (?, ?, 0)", (other_id, f"http://127.0.0.1:{port}")
            )
            conn.execute(
                "INSERT INTO peers (node_id, url, added_ms) VALUES ('did:key:zGone', ?, 0)",
                (f"http://127.0.0.1:{dead}",),
            )
        finally:
            conn.close()
        deadline = time.monotonic() + 30
        while True:
            got = {c.name: c for c in doctor.diagnose(root, LOG, peer_timeout=2)}
            if got[f"peer http://127.0.0.1:{port}"].status == "ok" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert got[f"peer http://127.0.0.1:{port}"].status == "ok"
        assert got[f"peer http://127.0.0.1:{dead}"].status == "warn"
        assert doctor.exit_status(list(got.values())) == 0  # an unreachable peer warns; it is not damage
        run = subprocess.run(
            [sys.executable, "-m", "node.cli", "doctor", "--data", str(root), "--json", "--peer-timeout", "2"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
        assert {c["name"] for c in json.loads(run.stdout)} >= {"integrity", "search_index", "projections"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_cli_exit_status_on_damage(data_dir: tuple[Path, str]) -> None:
    os.chmod(data_dir[0] / "node.key", 0o640)
    run = subprocess.run(
        [sys.executable, "-m", "node.cli", "doctor", "--data", str(data_dir[0])],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert run.returncode == 1
    assert "fail  node_key" in run.stdout


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
