"""Gone from disk on a real `bbs serve` process (BBS_REDACTION_GRACE_S=0, debug logs to a file beside the data
folder): after a redaction, the secret is in no file of the data folder (database, WAL, search index segments), nor
in the node's log, nor in a `bbs backup` made after; before it, the byte search finds it, so the search is real."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from node.ops.datadir import DataDir, initialise
from node.store.db import connect_store
from scenarios.bench.harness import listens
from scenarios.fednet import free_port

pytestmark = pytest.mark.slow


def call(url: str, method: str, path: str, token: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with urllib.request.urlopen(urllib.request.Request(url + path, data, headers, method=method), timeout=30) as r:
        return json.loads(r.read())


def holding(root: Path, needle: bytes) -> list[str]:
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())


def wait_healthy(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, f"bbs serve exited with {process.returncode}"
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1):
                if listens(process.pid, int(url.rsplit(":", 1)[1])):  # not another test's node on the port
                    return
        except OSError:
            assert time.monotonic() < deadline, "bbs serve did not become healthy"
            time.sleep(0.1)


def scrubbed(data: DataDir, address: str) -> bool:
    with contextlib.closing(connect_store(data.store, readonly=True)) as conn:
        row = conn.execute("SELECT done_ms FROM redaction_scrubs WHERE hash = ?", (address,)).fetchone()
    return row is not None and row[0] is not None


@pytest.mark.sqlite_only(
    reason="searches the data folder's files for the secret's bytes: SQLite's database and WAL are there; a node on"
    " PostgreSQL keeps its database in the server's files (its folder never holds the secret, so the search is void)"
)
def test_a_served_node_with_grace_0_keeps_no_byte_of_the_secret(tmp_path: Path) -> None:
    data = tmp_path / "node"
    admin = initialise(data)
    assert admin is not None
    port = free_port()
    log_path = tmp_path / "serve.log"
    env = {**os.environ, "BBS_REDACTION_GRACE_S": "0", "BBS_LOG_LEVEL": "debug"}
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "node.cli", "serve", "--data", str(data), "--port", str(port)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, process)
            agent = call(url, "POST", "/v1/agents", admin, {"name": "alice"})
            key = agent["api_key"]
            secret = "zq" + os.urandom(10).hex()
            for i in range(20):
                call(url, "POST", "/v1/entries", key, {"entry_type": "finding", "performative": "inform",
                                                         "content": f"routine note {i}"})  # fmt: skip
            posted = call(url, "POST", "/v1/entries", key, {"entry_type": "finding", "performative": "inform",
                                                              "content": f"the token is {secret}"})  # fmt: skip
            query = urllib.parse.urlencode({"q": secret, "fresh": "true"})
            assert [e["record_hash"] for e in call(url, "GET", f"/v1/search?{query}", key)["entries"]] == [
                posted["record_hash"]
            ]
            assert holding(data, secret.encode())  # the byte search finds it while it is there
            out = call(url, "POST", "/v1/redactions", key, {"target": posted["record_hash"], "reason": "leak"})
            assert out["created"] and out["tombstone"]["redacted"] is True
            assert call(url, "GET", f"/v1/search?{query}", key)["entries"] == []
            deadline = time.monotonic() + 30
            while not scrubbed(DataDir(data), posted["record_hash"]):
                assert time.monotonic() < deadline, "the scrub did not run within 30 s"
                time.sleep(0.1)
            assert holding(data, secret.encode()) == []
            backup = tmp_path / "after.tar"
            done = subprocess.run(
                [sys.executable, "-m", "node.cli", "backup", "--data", str(data), "--out", str(backup)],
                capture_output=True,
                text=True,
                env=os.environ,
            )
            assert done.returncode == 0, done.stderr
            assert secret.encode() not in backup.read_bytes()
        finally:
            process.terminate()
            process.wait(timeout=15)
    assert holding(data, secret.encode()) == []  # nor after the node stopped
    logged = log_path.read_bytes()
    assert b"POST /v1/redactions" in logged  # the log is there, at debug level
    assert secret.encode() not in logged
