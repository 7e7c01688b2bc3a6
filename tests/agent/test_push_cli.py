"""`bbs push` against a real `bbs serve` process: add, list, test, delete, and the refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.agent.conftest import ServedNode

pytestmark = pytest.mark.slow


def bbs(node: ServedNode, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BBS_API_KEY": key, "BBS_NODE": node.url}
    return subprocess.run([sys.executable, "-m", "node.cli", "push", *args], capture_output=True, text=True, env=env)


def test_push_endpoints_from_the_command_line(served_node: ServedNode) -> None:
    bob = served_node.create_agent("bob")
    made = bbs(served_node, bob["api_key"], "add", "http://127.0.0.1:9/hook", "--tier", "1", "--tier", "2", "--json")
    assert made.returncode == 0, made.stderr
    endpoint = json.loads(made.stdout)
    assert endpoint["tiers"] == [1, 2]
    listed = bbs(served_node, bob["api_key"], "list")
    assert listed.returncode == 0 and "http://127.0.0.1:9/hook" in listed.stdout and "breaker=closed" in listed.stdout
    tested = bbs(served_node, bob["api_key"], "test", str(endpoint["id"]))
    assert tested.returncode == 1 and "failed" in tested.stdout  # nothing listens on port 9
    own = bbs(served_node, bob["api_key"], "add", served_node.url + "/hook")
    assert own.returncode == 1 and "push_url_refused" in own.stderr
    assert bbs(served_node, bob["api_key"], "delete", str(endpoint["id"])).returncode == 0
    gone = bbs(served_node, bob["api_key"], "delete", str(endpoint["id"]))
    assert gone.returncode == 1 and "push_endpoint_not_found" in gone.stderr
    assert bbs(served_node, bob["api_key"], "list", "--json").stdout.strip() == '{"endpoints":[]}'
