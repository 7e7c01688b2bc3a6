"""Leases across real `bbs serve` processes: a restored database, a second node that has not seen a grant, and a
forwarded lease request replayed after a restart."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from identity import key_files
from node.ops.datadir import DataDir, initialise
from node.store.db import connect_store
from scenarios.bench.harness import listens
from scenarios.pg_cluster import Cluster
from sync.auth import sign_headers
from sync.replay import FENCE_NAME as REPLAY_FENCE
from tests.agent.conftest import free_port
from wire.time import parse_ms

WF = "/v1/agent-workflows"


@dataclass
class Served:
    """A `bbs serve` process on a data folder, restartable."""

    data: Path
    port: int = field(default_factory=free_port)
    token: str = ""
    process: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)  # added to the environment of the next `start`
    store_url: str | None = None  # the node's PostgreSQL database (`node_store`), or None: bbs.db in the folder

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Served:
        self.token = initialise(self.data, self.store_url) or self.token
        env = {**os.environ, "BBS_LOG_LEVEL": "warning", **self.env}
        args = [sys.executable, "-m", "node.cli", "serve", "--data", str(self.data), "--port", str(self.port)]
        log = open(self.data.parent / f"{self.data.name}.log", "ab")  # noqa: SIM115 (the process keeps it)
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process.poll() is None, (self.data.parent / f"{self.data.name}.log").read_text()
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200 and listens(
                    self.process.pid, self.port
                ):
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise AssertionError("bbs serve did not come up")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)

    def call(self, method: str, path: str, token: str | None = None, body: Any = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        return httpx.request(method, self.url + path, json=body, headers=headers, timeout=30)

    def agent(self, name: str) -> tuple[str, str]:
        created = self.call("POST", "/v1/agents", body={"name": name}).json()
        return created["agent_id"], created["api_key"]

    @property
    def node_id(self) -> str:
        return str(self.call("GET", "/v1/node").json()["node_id"])


class Running(list[Served]):
    """The nodes a test started (stopped after it); `new` makes one whose database is this pass's engine."""

    def __init__(self, node_store: Callable[[], str | None], request: pytest.FixtureRequest, tmp_path: Path) -> None:
        super().__init__()
        self.node_store, self.request, self.tmp_path = node_store, request, tmp_path

    def new(self, data: Path) -> Served:
        """A `Served` on a new folder, its database from `node_store`, not started."""
        return Served(data, store_url=self.node_store())

    def _names(self, node: Served) -> tuple[Cluster, str, str]:
        assert node.store_url is not None
        cluster: Cluster = self.request.getfixturevalue("pg_cluster")
        name = urlsplit(node.store_url).path.lstrip("/")
        return cluster, name, name + "_old"

    def back_up(self, node: Served) -> None:
        """Copy the (stopped) node's database aside, consistently, as an old backup would be: its SQLite file, or
        on PostgreSQL a copy of its database (CREATE DATABASE ... TEMPLATE)."""
        if node.store_url is None:
            src, out = sqlite3.connect(node.data / "bbs.db"), sqlite3.connect(self.tmp_path / "old.db")
            try:
                src.backup(out)
            finally:
                src.close()
                out.close()
            return
        cluster, name, old = self._names(node)
        cluster.admin(f'CREATE DATABASE "{old}" TEMPLATE "{name}"')

    def put_back(self, node: Served) -> None:
        """Replace the (stopped) node's database with the copy `back_up` took, by hand."""
        if node.store_url is None:
            for name in ("bbs.db-wal", "bbs.db-shm"):
                (node.data / name).unlink(missing_ok=True)
            (self.tmp_path / "old.db").replace(node.data / "bbs.db")
            return
        cluster, name, old = self._names(node)
        cluster.drop_database(name)
        cluster.admin(f'ALTER DATABASE "{old}" RENAME TO "{name}"')


@pytest.fixture
def served(node_store: Callable[[], str | None], request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Running]:
    running = Running(node_store, request, tmp_path)
    yield running
    for node in running:
        node.stop()


def test_an_old_database_copied_back_grants_no_lease_until_the_fence_passes(served: Running, tmp_path: Path) -> None:
    a = served.new(tmp_path / "a").start()
    served.append(a)
    _, boss = a.agent("boss")
    _, worker = a.agent("worker")
    for key in ("job", "other"):
        assert a.call("POST", f"{WF}/tasks", boss, {"key": key}).status_code == 201
    a.stop()
    served.back_up(a)  # the backup, taken before the grant
    a.start()
    leased = a.call("POST", f"{WF}/tasks/job/lease", worker, {"seconds": 30})
    assert leased.status_code == 201, leased.text
    a.stop()
    served.put_back(a)  # copied back by hand while the node is stopped
    a.start()
    for key in ("job", "other"):
        refused = a.call("POST", f"{WF}/tasks/{key}/lease", boss, {"seconds": 30})
        problem = refused.json()
        assert refused.status_code == 503 and problem["code"] == "lease_authority_restored", problem
        assert 1 <= int(refused.headers["Retry-After"]) <= 31
    # the restored node still answers reads, and it has forgotten the grant, which is why it waits
    assert a.call("GET", f"{WF}/tasks/job", boss).json()["lease"] is None


def _pair(tmp_path: Path, served: Running) -> tuple[Served, Served]:
    a, b = served.new(tmp_path / "a").start(), served.new(tmp_path / "b").start()
    served += [a, b]
    for one, other in ((a, b), (b, a)):
        resp = one.call("POST", "/v1/peers", body={"url": other.url, "node_id": other.node_id})
        assert resp.status_code == 201, resp.text
    return a, b


def _until(check: Any, what: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_non_holders_completion_on_another_node_is_refused_by_the_home_node(served: Running, tmp_path: Path) -> None:
    a, b = _pair(tmp_path, served)
    _, boss = a.agent("boss")
    holder_id, holder = a.agent("holder")
    _, intruder = b.agent("intruder")
    assert a.call("POST", f"{WF}/tasks", boss, {"key": "index"}).status_code == 201
    _until(lambda: b.call("GET", f"{WF}/tasks/index", intruder).status_code == 200, "b to see the task")
    leased = a.call("POST", f"{WF}/tasks/index/lease", holder, {"seconds": 300}).json()
    # whether or not b has pulled the grant yet, b does not decide: the home node refuses
    for path, body in (
        ("/tasks/index/complete", {}),
        ("/tasks", {"key": "index", "status": "cancelled"}),
    ):
        refused = b.call("POST", WF + path, intruder, body)
        assert refused.status_code == 409 and refused.json()["code"] == "lease_held", refused.text
    task = a.call("GET", f"{WF}/tasks/index", boss).json()
    assert task["status"] == "processing" and task["lease"]["holder"] == holder_id
    done = a.call("POST", f"{WF}/tasks/index/complete", holder, {"lease": leased["lease"]["lease_id"]})
    assert done.status_code == 200 and done.json()["status"] == "done"


def test_a_replayed_forwarded_lease_request_is_refused_after_a_restart(served: Running, tmp_path: Path) -> None:
    a, b = _pair(tmp_path, served)
    _, boss = a.agent("boss")
    worker, _ = b.agent("worker")
    assert a.call("POST", f"{WF}/tasks", boss, {"key": "index"}).status_code == 201
    conn = connect_store(DataDir(b.data).store, readonly=True)
    try:
        document = conn.execute(
            "SELECT r.body FROM agents g JOIN records r ON r.hash = g.doc_hash WHERE g.id = ?", (worker,)
        ).fetchone()[0]
    finally:
        conn.close()
    b_key = key_files.load_key(b.data / "node.key")
    url = a.url + f"{WF}/peer/lease"
    body = json.dumps(
        {
            "task_key": "index",
            "agent_id": worker,
            "request_id": "captured-request-0001",
            "seconds": 30,
            "agent_document": json.loads(document),
        }
    ).encode()
    captured = sign_headers(b_key, "POST", url, body) | {"Content-Type": "application/json"}
    first = httpx.post(url, content=body, headers=captured, timeout=30)
    assert first.status_code == 201, first.text
    expires = first.json()["task"]["lease"]["expires_at"]
    a.stop()
    a.start()
    replayed = httpx.post(url, content=body, headers=captured, timeout=30)  # the captured bytes, as they were
    # refused by the peer replay fence (signed before the restart: sync/replay.py) or by the request id; on PostgreSQL
    # by the node-wide nonce, which outlives the process (docs/decisions.md record 86)
    assert replayed.status_code in (401, 409), replayed.text
    assert replayed.json()["code"] in ("stale_request", "request_replayed", "replayed_request"), replayed.text
    fresh = sign_headers(b_key, "POST", url, body) | {"Content-Type": "application/json"}
    again = httpx.post(url, content=body, headers=fresh, timeout=30)  # re-signed: only the request id is left
    if again.status_code == 401 and again.json()["code"] == "stale_request":
        # signed in the second the restarted node's fence still holds: a sender signs once more (sync/auth.py)
        time.sleep(1.05)
        fresh = sign_headers(b_key, "POST", url, body) | {"Content-Type": "application/json"}
        again = httpx.post(url, content=body, headers=fresh, timeout=30)
    assert again.status_code == 409 and again.json()["code"] == "request_replayed", again.text
    assert a.call("GET", f"{WF}/tasks/index", boss).json()["lease"]["expires_at"] == expires  # not extended


def _restart_in_the_second_it_last_accepted(node: Served) -> None:
    """Restart `node` as if it had accepted a peer signature in the current second just before (sync/replay.py),
    and return in that second: a request a peer signs now is refused `stale_request` once."""
    margin = 4  # seconds: the fence's second is this far ahead when the node stops, and must not have come yet
    while True:  # when it started too slowly (a loaded machine), again with twice the margin
        node.stop()
        floor = int(time.time()) + margin
        (node.data / REPLAY_FENCE).write_text(f"{floor}\n", "ascii")
        node.start()
        if time.time() < floor:
            break
        margin *= 2
        assert margin <= 128, "bbs serve never started within two minutes"
    time.sleep(floor - time.time() + 0.05)


def test_a_forwarded_request_refused_as_signed_before_a_restart_is_signed_again(
    served: Running, tmp_path: Path
) -> None:
    """The home node restarted (and, as if in the second it last accepted a peer signature, its fence holds that
    second): a forwarded lease and a forwarded completion signed for its previous boot are refused `stale_boot`,
    signed again for the boot read anew, and decided; the fence, there for peers of the previous release, does
    not hold them."""
    a, b = _pair(tmp_path, served)
    _, boss = a.agent("boss")
    worker_id, worker = b.agent("worker")
    assert a.call("POST", f"{WF}/tasks", boss, {"key": "index"}).status_code == 201
    _until(lambda: b.call("GET", f"{WF}/tasks/index", worker).status_code == 200, "b to see the task")
    _restart_in_the_second_it_last_accepted(a)
    leased = b.call("POST", f"{WF}/tasks/index/lease", worker, {"seconds": 300})
    assert leased.status_code == 201 and leased.json()["lease"]["holder"] == worker_id, leased.text
    _restart_in_the_second_it_last_accepted(a)
    done = b.call("POST", f"{WF}/tasks/index/complete", worker, {"lease": leased.json()["lease"]["lease_id"]})
    assert done.status_code == 200 and done.json()["status"] == "done", done.text
    assert a.call("GET", f"{WF}/tasks/index", boss).json()["status"] == "done"


def test_twin_tasks_across_two_served_nodes(served: Running, tmp_path: Path) -> None:
    """Two `bbs serve` nodes first-declare and lease one key before they are peers; once they sync, both resolve
    the key to the same twin, and the later twin's declarer and holder find one tier-1 notice in their inboxes."""
    a, b = served.new(tmp_path / "a").start(), served.new(tmp_path / "b").start()
    served += [a, b]
    people: dict[str, dict[str, tuple[str, str]]] = {}
    for node in (a, b):
        people[node.url] = {"boss": node.agent("boss"), "worker": node.agent("worker")}
        assert node.call("POST", f"{WF}/tasks", people[node.url]["boss"][1], {"key": "index"}).status_code == 201
        leased = node.call("POST", f"{WF}/tasks/index/lease", people[node.url]["worker"][1], {"seconds": 600})
        assert leased.status_code == 201, leased.text
    firsts = {n.url: n.call("GET", f"{WF}/tasks/index", people[n.url]["boss"][1]).json() for n in (a, b)}
    earlier = min(firsts.values(), key=lambda t: (parse_ms(t["created_at"]), t["identity"]))
    loser = b if earlier["home_node"] == a.node_id else a
    for one, other in ((a, b), (b, a)):
        resp = one.call("POST", "/v1/peers", body={"url": other.url, "node_id": other.node_id})
        assert resp.status_code == 201, resp.text

    def agreed() -> bool:
        reads = [n.call("GET", f"{WF}/tasks/index", people[n.url]["boss"][1]).json() for n in (a, b)]
        return all(r["identity"] == earlier["identity"] and len(r["twins"]) == 1 for r in reads)

    _until(agreed, "both nodes to resolve the key to the earlier twin and list the later one")
    for role in ("boss", "worker"):
        token = people[loser.url][role][1]
        found: list[Any] = []

        def told(token: str = token, found: list[Any] = found) -> bool:
            found += loser.call("GET", "/v1/inbox?mark_delivered=true", token).json()["notifications"]
            return bool(found)

        _until(told, f"the later twin's {role} to be told")
        assert len(found) == 1 and found[0]["tier"] == 1 and "task-twin" in found[0]["tags"], found
    time.sleep(1.5)  # a few more background rounds: still told once
    for role in ("boss", "worker"):
        assert loser.call("GET", "/v1/inbox", people[loser.url][role][1]).json()["notifications"] == []


def test_a_restored_node_grants_again_once_sync_brings_back_every_grant_it_made(
    served: Running, tmp_path: Path
) -> None:
    """The restore lost a grant that a peer had pulled: the wait ends as soon as sync brings it back (the fence
    counted every grant, so the database then holds every grant that can still be live), not after 600 s."""
    a, b = _pair(tmp_path, served)
    _, boss = a.agent("boss")
    worker_id, worker = a.agent("worker")
    for key in ("job", "other"):
        assert a.call("POST", f"{WF}/tasks", boss, {"key": key}).status_code == 201
    a.stop()
    served.back_up(a)  # the backup, taken before the grant
    a.start()
    leased = a.call("POST", f"{WF}/tasks/job/lease", worker, {"seconds": 600})
    assert leased.status_code == 201, leased.text
    _until(lambda: b.call("GET", f"{WF}/tasks/job").json().get("lease") is not None, "b to pull the grant")
    a.stop()
    b.stop()  # a cannot reach the peer that holds the grant yet
    served.put_back(a)
    a.start()
    refused = a.call("POST", f"{WF}/tasks/other/lease", boss, {"seconds": 30})
    assert refused.status_code == 503 and refused.json()["code"] == "lease_authority_restored", refused.text
    assert 500 <= int(refused.headers["Retry-After"]) <= 601
    b.start()
    _until(lambda: a.call("GET", f"{WF}/tasks/job", boss).json().get("lease") is not None, "a to pull its grant back")
    granted = a.call("POST", f"{WF}/tasks/other/lease", boss, {"seconds": 30})
    assert granted.status_code == 201, granted.text  # long before the 600 s fence
    held = a.call("POST", f"{WF}/tasks/job/lease", boss, {"seconds": 30})  # the grant it knows again protects job
    assert held.status_code == 409 and held.json()["code"] == "lease_held", held.text
    assert a.call("GET", f"{WF}/tasks/job", boss).json()["lease"]["holder"] == worker_id


def test_a_restored_node_whose_lost_grant_no_peer_holds_keeps_waiting(served: Running, tmp_path: Path) -> None:
    """Reconciling with every peer proves nothing about a grant no peer pulled: the count stays short, so the
    node waits for the fence."""
    a, b = _pair(tmp_path, served)
    _, boss = a.agent("boss")
    _, worker = a.agent("worker")
    for key in ("job", "other", "third"):
        assert a.call("POST", f"{WF}/tasks", boss, {"key": key}).status_code == 201
    assert a.call("POST", f"{WF}/tasks/job/lease", worker, {"seconds": 600}).status_code == 201
    _until(lambda: b.call("GET", f"{WF}/tasks/job").json().get("lease") is not None, "b to pull the first grant")
    a.stop()
    b.stop()
    served.back_up(a)  # the backup holds the first grant, which b holds too
    a.start()
    assert a.call("POST", f"{WF}/tasks/other/lease", worker, {"seconds": 60}).status_code == 201  # b never sees it
    a.stop()
    served.put_back(a)
    b.start()
    _, planner = b.agent("planner")
    assert b.call("POST", f"{WF}/tasks", planner, {"key": "marker"}).status_code == 201
    a.start()
    _until(lambda: a.call("GET", f"{WF}/tasks/marker").status_code == 200, "a to sync with b")
    # the latest expiry (600 s) is in the database, yet the shorter grant on `other` is lost: still refused
    refused = a.call("POST", f"{WF}/tasks/third/lease", boss, {"seconds": 30})
    assert refused.status_code == 503 and refused.json()["code"] == "lease_authority_restored", refused.text
