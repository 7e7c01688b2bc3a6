"""Lifecycle of a real `bbs serve` process: graceful SIGTERM, and refusal of a newer schema."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from node.features import LOG
from node.ops import doctor
from node.ops.datadir import initialise
from scenarios.bench.harness import listens
from scenarios.fednet import free_port

pytestmark = pytest.mark.slow
REPO = Path(__file__).parents[2]
BBS = [sys.executable, "-m", "node.cli"]  # this checkout's code, however the venv was installed


async def wait_healthy(url: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                async with session.get(url + "/healthz") as resp:
                    if resp.status == 200 and listens(proc.pid, int(url.rsplit(":", 1)[1])):
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("node did not start")


async def test_sigterm_finishes_in_flight_writes_and_exits_cleanly(tmp_path: Path) -> None:
    data = tmp_path / "node"
    initialise(data)
    created = subprocess.run(
        [*BBS, "agent", "create", "alice", "--data", str(data), "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    api_key = json.loads(created.stdout)["api_key"]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*BBS, "serve", "--data", str(data), "--port", str(port), "--log-format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        await wait_healthy(url, proc)
        acknowledged: list[str] = []
        headers = {"Authorization": f"Bearer {api_key}"}

        async def write(session: aiohttp.ClientSession, i: int) -> None:
            body = {"entry_type": "finding", "performative": "inform", "content": f"write {i}"}
            try:
                async with session.post(url + "/v1/entries", json=body, headers=headers) as resp:
                    if resp.status == 201:
                        acknowledged.append((await resp.json())["record_hash"])
            except (TimeoutError, aiohttp.ClientError):
                pass  # refused or cut after the signal: not acknowledged, so nothing was promised

        async with aiohttp.ClientSession() as session:
            first = [asyncio.create_task(write(session, i)) for i in range(40)]
            deadline = time.monotonic() + 60
            while not acknowledged:
                assert not all(task.done() for task in first), "none of the first 40 writes was acknowledged"
                assert time.monotonic() < deadline, "no write acknowledged within 60 s"
                await asyncio.sleep(0.005)
            proc.send_signal(signal.SIGTERM)
            rest = [asyncio.create_task(write(session, i)) for i in range(40, 80)]
            await asyncio.gather(*first, *rest)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    conn = sqlite3.connect(data / "bbs.db")
    stored = {row[0] for row in conn.execute("SELECT hash FROM records")}
    conn.close()
    assert acknowledged and set(acknowledged) <= stored  # every acknowledged write survived the shutdown
    assert doctor.exit_status(doctor.diagnose(data, LOG, peer_timeout=1)) == 0
    access = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert sum(1 for line in access if line.get("logger") == "bbs.access" and line.get("status") == 201) == len(
        acknowledged
    )


def _newer_schema(tmp_path: Path) -> Path:
    data = tmp_path / "node"
    initialise(data)
    conn = sqlite3.connect(data / "bbs.db")
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    return data


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["rebuild"], ["agent", "create", "x"]])
def test_a_newer_schema_is_refused_with_a_clear_message(tmp_path: Path, command: list[str]) -> None:
    data = _newer_schema(tmp_path)
    run = subprocess.run([*BBS, *command, "--data", str(data)], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert run.returncode == 1
    assert "bbs: schema_too_new: database schema version 999 is newer than this software supports" in run.stderr
    assert "upgrade agent-bbs" in run.stderr and "Traceback" not in run.stderr
    conn = sqlite3.connect(data / "bbs.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 999  # untouched
    conn.close()


def test_doctor_reports_a_newer_schema(tmp_path: Path) -> None:
    data = _newer_schema(tmp_path)
    checks = doctor.diagnose(data, LOG)
    assert [c.name for c in checks if c.status == "fail"] == ["schema"]
    assert os.path.exists(data / "bbs.db")


async def test_a_served_folder_refuses_a_second_node_and_a_restore(tmp_path: Path) -> None:
    data = tmp_path / "node"
    initialise(data)
    archive = tmp_path / "backup.tar"
    subprocess.run([*BBS, "backup", "--data", str(data), "--out", str(archive)], check=True, cwd=REPO, timeout=60)
    port = free_port()
    proc = subprocess.Popen(
        [*BBS, "serve", "--data", str(data), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        await wait_healthy(f"http://127.0.0.1:{port}", proc)
        second = subprocess.run(
            [*BBS, "serve", "--data", str(data), "--port", str(free_port())],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
        )
        assert second.returncode == 1 and "data_in_use" in second.stderr
        restore = subprocess.run(
            [*BBS, "restore", "--data", str(data), "--from", str(archive), "--force"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
        )
        assert restore.returncode == 1 and "data_in_use" in restore.stderr
        assert not list(tmp_path.glob("node.replaced-*"))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    # once the node has stopped, the restore goes through
    restore = subprocess.run(
        [*BBS, "restore", "--data", str(data), "--from", str(archive), "--force"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert restore.returncode == 0, restore.stderr
