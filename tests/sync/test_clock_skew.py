"""Clocks that are wrong, on real `bbs serve` processes under libfaketime (the system's package): two nodes run
ten minutes ahead, federate, and are restarted on the true clock; federation and forwarded leases go on at once
(docs/security.md, "Replay across restarts")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from identity import key_files
from node.ops.datadir import initialise
from sync.auth import sign_headers
from sync.replay import FENCE_NAME
from tests.node.workflows.test_served import WF, Served

# Debian's libfaketime (installed by .ci/run), under the machine's multiarch folder
LIBFAKETIME = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))), Path("libfaketime.so.1"))
AHEAD_S = 600


NodeStore = Callable[[], str | None]  # the `node_store` fixture (tests/pg_fixtures.py)


def on_store(data: Path, node_store: NodeStore, env: dict[str, str]) -> Served:
    """A node folder made with its store from `node_store` (PostgreSQL in the `--store postgresql` pass), to serve
    with `env`."""
    return Served(data, env=env, token=initialise(data, node_store()) or "")


def ahead(seconds: int) -> dict[str, str]:
    """The environment of a process whose wall clock runs `seconds` ahead (its monotonic clock true)."""
    assert LIBFAKETIME.exists(), "libfaketime is not installed (apt-get install libfaketime: .ci/run does)"
    return {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": f"+{seconds}", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[list[Served]]:
    running: list[Served] = []
    yield running
    for node in running:
        node.stop()


def until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def peer_up(one: Served, other: Served) -> None:
    resp = one.call("POST", "/v1/peers", body={"url": other.url, "node_id": other.node_id})
    assert resp.status_code == 201, resp.text


def post(node: Served, key: str, content: str) -> str:
    body = {"content": content, "entry_type": "finding", "performative": "inform"}
    resp = node.call("POST", "/v1/entries", key, body)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["record_hash"])


def holds(node: Served, key: str, record_hash: str) -> bool:
    return node.call("GET", f"/v1/entries/{record_hash}", key).status_code == 200


def previous_release_changes(node: Served, signer: Served, now: float) -> int:
    """The status of a changes request to `node` signed by `signer`'s key at `now`, without a boot id (as a peer
    of the previous release signs)."""
    url = node.url + "/v1/sync/changes?since=0&v=2"
    headers = sign_headers(key_files.load_key(signer.data / "node.key"), "GET", url, now=now)
    return httpx.get(url, headers=headers, timeout=30).status_code


@pytest.mark.slow
def test_two_nodes_ahead_restarted_on_the_true_clock_federate_at_once(
    tmp_path: Path, served: list[Served], node_store: NodeStore
) -> None:
    a, b = on_store(tmp_path / "a", node_store, ahead(AHEAD_S)), on_store(tmp_path / "b", node_store, ahead(AHEAD_S))
    served += [a.start(), b.start()]
    peer_up(a, b)
    peer_up(b, a)
    _, boss = a.agent("boss")
    worker_id, worker = b.agent("worker")
    first = post(a, boss, "written while the clocks ran ahead")
    assert a.call("POST", f"{WF}/tasks", boss, {"key": "before"}).status_code == 201
    until(lambda: holds(b, worker, first), "b to pull a's entry")
    until(lambda: b.call("GET", f"{WF}/tasks/before", worker).status_code == 200, "b to see the task")
    leased = b.call("POST", f"{WF}/tasks/before/lease", worker, {"seconds": 60})  # forwarded to a, its home
    assert leased.status_code == 201, leased.text
    for node, other in ((a, b), (b, a)):
        # a peer of the previous release (no boot id) signs on the clock ten minutes ahead too: the node's fence
        # keeps that second, ahead of the true clock (what held federation for ten minutes before boot ids)
        assert previous_release_changes(node, other, time.time() + AHEAD_S) == 200
        node.stop()
        if not (node.data / "store.url").exists():  # SQLite's fence file; PostgreSQL's nonces are node-wide (86)
            assert int((node.data / FENCE_NAME).read_text()) > time.time() + AHEAD_S / 2
        node.env = {}  # NTP stepped the clocks back: the true clock from now on
        node.start()

    after = post(a, boss, "written on the true clock")
    assert a.call("POST", f"{WF}/tasks", boss, {"key": "after"}).status_code == 201
    until(lambda: holds(b, worker, after), "b to pull a's entry after the restart")
    until(lambda: b.call("GET", f"{WF}/tasks/after", worker).status_code == 200, "b to see the new task")
    leased = b.call("POST", f"{WF}/tasks/after/lease", worker, {"seconds": 60})  # forwarded to a again
    assert leased.status_code == 201 and leased.json()["lease"]["holder"] == worker_id, leased.text
    back = post(b, worker, "and the other way")
    until(lambda: holds(a, boss, back), "a to pull b's entry")
    # the previous release's requests are still served under the fence: refused until the clock passes it (SQLite;
    # on PostgreSQL a restart keeps the node's nonces and boot id, so nothing is fenced: record 86)
    assert previous_release_changes(a, b, time.time()) == (200 if (a.data / "store.url").exists() else 401)
    for node, other in ((a, b), (b, a)):
        peer = next(p for p in node.call("GET", "/v1/peers").json()["peers"] if p["node_id"] == other.node_id)
        assert "stale_request" not in (peer["last_error"] or ""), peer


def bbs(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.slow
def test_a_peer_ten_minutes_ahead_is_shown_with_the_fix(
    tmp_path: Path, served: list[Served], node_store: NodeStore
) -> None:
    """`a` runs ten minutes ahead, `b` on the true clock: b's requests are refused as stale by a, and b shows
    a's clock offset in /v1/peers, /metrics, `bbs peers` and `bbs doctor`, with NTP as the fix (a's doctor, on
    a's clock, sees b behind)."""
    a, b = on_store(tmp_path / "a", node_store, ahead(AHEAD_S)), on_store(tmp_path / "b", node_store, {})
    served += [a.start(), b.start()]
    peer_up(a, b)
    peer_up(b, a)

    def a_seen_by_b() -> dict[str, Any]:
        return next(p for p in b.call("GET", "/v1/peers").json()["peers"] if p["node_id"] == a.node_id)

    until(lambda: a_seen_by_b()["health"]["clock_offset_s"] is not None and a_seen_by_b()["last_error"], "a poll")
    peer = a_seen_by_b()
    assert AHEAD_S - 5 <= peer["health"]["clock_offset_s"] <= AHEAD_S + 5, peer
    assert "stale_request" in peer["last_error"] and "NTP" in peer["last_error"], peer
    metrics = b.call("GET", "/metrics").text
    line = next(
        x for x in metrics.splitlines() if x.startswith(f'bbs_sync_peer_clock_offset_seconds{{peer="{a.node_id}"}}')
    )
    assert AHEAD_S - 5 <= float(line.split()[-1]) <= AHEAD_S + 5
    listed = bbs("peers", "--data", str(b.data))
    assert listed.returncode == 0, listed.stderr
    assert "clock offset +" in listed.stdout and "s ahead of this node's" in listed.stdout and "NTP" in listed.stdout
    doctor = bbs("doctor", "--data", str(b.data), "--json")
    check = next(c for c in json.loads(doctor.stdout) if c["name"] == f"peer {a.url}")
    assert check["status"] == "warn" and "ahead of this node's" in check["detail"] and "NTP" in check["detail"], check
    from_a = next(
        c
        for c in json.loads(bbs("doctor", "--data", str(a.data), "--json", env=a.env).stdout)
        if c["name"] == f"peer {b.url}"
    )
    assert from_a["status"] == "warn" and "behind this node's" in from_a["detail"], from_a
