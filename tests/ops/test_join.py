"""`bbs init --data NEW --join OLD`: the folder of another serving process of a node on PostgreSQL (issue 41,
docs/decisions.md record 89). Real `bbs` subprocesses on the throwaway cluster: two `bbs serve` processes of one
node, an agent made through one and its post read and found through the other; the node's agent recovery key
shared by every folder (a rotation through one process, a revocation through the other); a node key rotation
reaching a process joined before it and one joined after; and the refusals, each one line."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from scenarios import pg_cluster as cluster_mod
from scenarios.fednet import free_port
from tests.ops.test_lifecycle import wait_healthy
from tests.ops.test_serve_postgresql import BBS, REPO, bbs

pytestmark = pytest.mark.postgresql


@pytest.fixture
def url(pg_cluster: cluster_mod.Cluster) -> Iterator[str]:
    name = pg_cluster.create_database()
    yield pg_cluster.store_url(name)
    pg_cluster.drop_database(name)


def init_node(data: Path, url: str) -> str:
    """A new node on `url` with its first folder `data`; its admin token."""
    made = bbs("init", "--data", str(data), "--store", url)
    assert made.returncode == 0, made.stderr
    return made.stdout.split("Admin token (shown once, keep it safe): ", 1)[1].strip()


def join(new: Path, old: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return bbs("init", "--data", str(new), "--join", str(old), *extra)


def serve(data: Path) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    proc = subprocess.Popen(
        [*BBS, "serve", "--data", str(data), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    return proc, f"http://127.0.0.1:{port}"


def stop(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.communicate(timeout=30)


async def test_a_joined_process_serves_the_same_node(tmp_path: Path, url: str) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    init_node(a, url)
    joined = join(b, a)
    assert joined.returncode == 0, joined.stderr
    assert "Admin token" not in joined.stdout  # the node's token was shown once, when it was made
    for name in ("node.key", "store.url", "agent-recovery.key"):  # the recovery key made in a first, then copied
        assert (b / name).read_bytes() == (a / name).read_bytes(), name
        assert (b / name).stat().st_mode & 0o777 == 0o600, name
    assert b.stat().st_mode & 0o777 == 0o700
    assert not (b / "bbs.db").exists() and not (b / "lease-fence.json").exists()
    procs = [serve(a), serve(b)]
    try:
        for proc, base in procs:
            await wait_healthy(base, proc)
        made = bbs("agent", "create", "alice", "--data", str(b), "--json")
        assert made.returncode == 0, made.stderr
        headers = {"Authorization": f"Bearer {json.loads(made.stdout)['api_key']}"}
        (_, base_a), (_, base_b) = procs
        async with aiohttp.ClientSession() as session:
            ids = []
            for base in (base_a, base_b):
                async with session.get(base + "/v1/node") as resp:
                    ids.append((await resp.json())["node_id"])
            body = {"entry_type": "finding", "performative": "inform", "content": "the joined process saw a yak"}
            async with session.post(base_b + "/v1/entries", json=body, headers=headers) as resp:
                assert resp.status == 201, await resp.text()
                posted = await resp.json()
            async with session.get(base_a + f"/v1/entries/{posted['record_hash']}", headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                read = await resp.json()
            search = {"q": "yak", "fresh": "true"}
            async with session.get(base_a + "/v1/search", params=search, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                found = await resp.json()
    finally:
        stop(*(proc for proc, _ in procs))
    assert ids[0] == ids[1]
    assert [entry["content"] for entry in read["entries"]] == ["the joined process saw a yak"]
    assert [hit["record_hash"] for hit in found["entries"]] == [posted["record_hash"]]
    assert (b / "search-index").is_dir()  # its own index, built from the log at its start


def test_the_agent_recovery_key_is_the_nodes_in_every_process(tmp_path: Path, url: str) -> None:
    """A node-kept agent's first rotation through one process sets the node's recovery key; a revocation through
    another process signs with it. Folders copied by hand without agent-recovery.key would each make their own,
    and the revocation would answer `no_recovery_key`."""
    a, b = tmp_path / "a", tmp_path / "b"
    init_node(a, url)
    assert join(b, a).returncode == 0
    assert bbs("agent", "create", "alice", "--data", str(a)).returncode == 0
    rotated = bbs("agent", "rotate-signing-key", "alice", "--data", str(b), "--json")
    assert rotated.returncode == 0, rotated.stderr
    revoked = bbs("agent", "revoke", "alice", "--data", str(a), "--yes", "--json")
    assert revoked.returncode == 0, revoked.stdout + revoked.stderr
    assert json.loads(revoked.stdout)["agent_id"] == json.loads(rotated.stdout)["agent_id"]


async def test_a_node_key_rotation_reaches_processes_joined_before_and_after(tmp_path: Path, url: str) -> None:
    """node.key keeps the node's first key (its id); the keys it signs with after a rotation are in the database,
    so no folder needs a new node.key. A process reads them at its start; the key fence travels with a join."""
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    token = init_node(a, url)
    assert join(b, a).returncode == 0
    rotated = bbs("node", "rotate-key", "--data", str(a), "--json")
    assert rotated.returncode == 0, rotated.stderr
    new_key = json.loads(rotated.stdout)["signing_key"]
    assert join(c, a).returncode == 0
    assert (c / "key-fence.json").read_bytes() == (a / "key-fence.json").read_bytes()
    assert (c / "node.key").read_bytes() == (b / "node.key").read_bytes() == (a / "node.key").read_bytes()
    procs = [serve(b), serve(c)]
    try:
        keys = []
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session:
            for proc, base in procs:
                await wait_healthy(base, proc)
                async with session.get(base + "/v1/node/key") as resp:
                    assert resp.status == 200, await resp.text()
                    keys.append((await resp.json())["signing_key"])
    finally:
        stop(*(proc for proc, _ in procs))
    assert keys == [new_key, new_key]


def test_join_refusals_are_one_line_and_write_nothing(tmp_path: Path, url: str) -> None:
    a = tmp_path / "a"
    init_node(a, url)
    sqlite_node = tmp_path / "sqlite"
    assert bbs("init", "--data", str(sqlite_node)).returncode == 0
    cases = {
        "sqlite": (join(tmp_path / "n1", sqlite_node), "one process per SQLite file"),
        "no node": (join(tmp_path / "n2", tmp_path / "nothing"), "holds no node"),
        "other store": (join(tmp_path / "n3", a, "--store", url + "_other"), "another database"),
        "a node there": (join(sqlite_node, a), "holds a node already"),
        "itself": (join(a, a), "holds a node already"),
    }
    for case, (done, expected) in cases.items():
        assert done.returncode == 1, case
        assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1, (case, done.stderr)
        assert "Traceback" not in done.stderr, case
    for n in ("n1", "n2", "n3"):
        assert not (tmp_path / n).exists(), n
    assert not (sqlite_node / "store.url").exists()
    assert not (sqlite_node / "agent-recovery.key").exists()  # nothing made in the SQLite folder either


def test_an_interrupted_join_is_refused_by_serve_and_finished_by_joining_again(tmp_path: Path, url: str) -> None:
    """A join writes node.key last: a folder left with store.url alone is refused by every command (never given a
    SQLite node of its own), and the same join finishes it; `bbs doctor` finds the joined folder sound."""
    a, b = tmp_path / "a", tmp_path / "b"
    init_node(a, url)
    b.mkdir(mode=0o700)
    (b / "store.url").write_text(url + "\n")
    refused = bbs("agent", "list", "--data", str(b))
    assert refused.returncode == 1 and "node.key is missing" in refused.stderr, refused.stderr
    assert not (b / "bbs.db").exists()
    finished = join(b, a)
    assert finished.returncode == 0, finished.stderr
    assert bbs("agent", "list", "--data", str(b)).returncode == 0
    doctor = bbs("doctor", "--data", str(b), "--json")  # a joined folder, before its first start, is a sound node's
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
