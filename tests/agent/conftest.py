"""Fixtures for the agent side: real `bbs serve` subprocesses on loopback ports."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from node.ops.datadir import initialise
from scenarios.bench.harness import listens
from scenarios.fednet import free_port

BBS = [sys.executable, "-m", "node.cli"]


@dataclass
class ServedNode:
    """A `bbs serve` subprocess."""

    url: str
    data: Path
    admin_token: str
    mcp_url: str | None
    process: subprocess.Popen[bytes]

    def create_agent(self, name: str) -> dict[str, str]:
        import json

        request = urllib.request.Request(
            self.url + "/v1/agents",
            data=json.dumps({"name": name}).encode(),
            headers={"Authorization": f"Bearer {self.admin_token}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            return json.loads(resp.read())


def _wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"bbs serve exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1):
                if listens(process.pid, int(url.rsplit(":", 1)[1])):  # not another test's node on the port
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("bbs serve did not become healthy")


def start_node(data: Path, *, mcp: bool = False, store_url: str | None = None) -> ServedNode:
    """`bbs serve` on a new folder `data` (its database at `store_url`: `node_store`; None: bbs.db), healthy."""
    token = initialise(data, store_url)
    assert token is not None
    port = free_port()
    args = [*BBS, "serve", "--data", str(data), "--port", str(port)]
    mcp_url = None
    if mcp:
        mcp_port = free_port()
        args += ["--mcp-port", str(mcp_port)]
        mcp_url = f"http://127.0.0.1:{mcp_port}/mcp"
    env = {**os.environ, "BBS_LOG_LEVEL": "warning"}
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process)
    except BaseException:
        process.kill()
        raise
    return ServedNode(url, data, token, mcp_url, process)


def stop_node(node: ServedNode) -> None:
    node.process.terminate()
    try:
        node.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        node.process.kill()
        node.process.wait()


@pytest.fixture
def served_node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServedNode]:
    """A real `bbs serve` subprocess; with remote MCP (`--mcp-port`) for a test marked `remote_mcp` (the MCP SDK
    costs a start about 1.7 s of CPU, so the other tests go without)."""
    node = start_node(tmp_path / "served", mcp=request.node.get_closest_marker("remote_mcp") is not None)
    yield node
    stop_node(node)
