"""A real `bbs serve --store postgresql://...` process on the throwaway cluster (docs/decisions.md record 80): it
creates its node in the database (the folder keeps the key and remembers the URL), serves GET /v1/node, creates
agents (`bbs agent create` beside it, on the same database), and posts, reads and searches entries on PostgreSQL.
Also `bbs init --store` / `BBS_STORE`, and the refusals of a folder whose node lives in another store."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import psycopg
import pytest

from scenarios import pg_cluster as cluster_mod
from scenarios.fednet import free_port
from tests.node.push.conftest import receiver
from tests.ops.test_lifecycle import wait_healthy

pytestmark = pytest.mark.postgresql
REPO = Path(__file__).parents[2]
BBS = [sys.executable, "-m", "node.cli"]


@pytest.fixture
def url(pg_cluster: cluster_mod.Cluster) -> Iterator[str]:
    name = pg_cluster.create_database()
    yield pg_cluster.store_url(name)
    pg_cluster.drop_database(name)


def bbs(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BBS, *args], capture_output=True, text=True, check=False, cwd=REPO, env=env)


async def test_serve_on_postgresql_serves_agents_posts_reads_and_searches(tmp_path: Path, url: str) -> None:
    data = tmp_path / "node"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*BBS, "serve", "--data", str(data), "--store", url, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        await wait_healthy(base, proc)
        assert not (data / "bbs.db").exists()  # the database is PostgreSQL's
        assert (data / "store.url").read_text().strip() == url
        created = bbs("agent", "create", "alice", "--data", str(data), "--json")  # finds the store in the folder
        assert created.returncode == 0, created.stderr
        agent = json.loads(created.stdout)
        headers = {"Authorization": f"Bearer {agent['api_key']}"}
        async with aiohttp.ClientSession() as session:
            async with session.get(base + "/v1/node") as resp:
                assert resp.status == 200
                node = await resp.json()
            body = {"entry_type": "finding", "performative": "inform", "content": "postgres holds the zebra"}
            async with session.post(base + "/v1/entries", json=body, headers=headers) as resp:
                assert resp.status == 201, await resp.text()
                posted = await resp.json()
            async with session.get(base + f"/v1/entries/{posted['record_hash']}", headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                read = await resp.json()
            search = {"q": "zebra", "fresh": "true"}
            async with session.get(base + "/v1/search", params=search, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                found = await resp.json()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert node["schema_version"] >= 50
    assert [entry["content"] for entry in read["entries"]] == ["postgres holds the zebra"]
    assert [hit["record_hash"] for hit in found["entries"]] == [posted["record_hash"]]
    assert found.get("stale") is not True
    with psycopg.connect(url) as conn:  # it is all in the database the URL names
        held = conn.execute("SELECT content FROM entries WHERE record_hash = %s", (posted["record_hash"],)).fetchone()
        node_id = conn.execute("SELECT value FROM node_meta WHERE key = 'node_id'").fetchone()
    assert held == ("postgres holds the zebra",)
    assert node_id == (node["node_id"],)


def test_init_takes_the_store_from_bbs_store_and_a_folder_keeps_its_store(tmp_path: Path, url: str) -> None:
    data = tmp_path / "node"
    env = {"PATH": "/usr/bin:/bin", "BBS_STORE": url}
    first = bbs("init", "--data", str(data), env=env)
    assert first.returncode == 0, first.stderr
    assert "Admin token" in first.stdout and not (data / "bbs.db").exists()
    again = bbs("init", "--data", str(data))  # the folder remembers its store: no --store needed
    assert again.returncode == 0 and "already initialised" in again.stderr
    created = bbs("agent", "create", "carol", "--data", str(data))
    listed = bbs("agent", "list", "--data", str(data), "--json")  # a read of its own, on the folder's store
    assert created.returncode == 0 and listed.returncode == 0, created.stderr + listed.stderr
    assert [agent["name"] for agent in json.loads(listed.stdout)["agents"] if agent.get("name")] == ["carol"]
    backup = bbs("backup", "--data", str(data), "--out", str(tmp_path / "b.tar"))
    assert backup.returncode == 0, backup.stderr  # pg_dump in the tarball (docs/decisions.md record 77)
    with tarfile.open(tmp_path / "b.tar") as tar:
        assert "bbs.pgdump" in tar.getnames() and "bbs.db" not in tar.getnames()
    doctor = bbs("doctor", "--data", str(data))
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert not (data / "bbs.db").exists()  # no command made a SQLite file beside it
    other = url.replace("/t", "/other_t", 1)
    moved = bbs("init", "--data", str(data), "--store", other)
    assert moved.returncode == 1 and "another PostgreSQL database" in moved.stderr
    sqlite_node = tmp_path / "sqlite"
    assert bbs("init", "--data", str(sqlite_node)).returncode == 0
    refused = bbs("init", "--data", str(sqlite_node), "--store", url)
    assert refused.returncode == 1 and "(SQLite)" in refused.stderr
    not_a_url = bbs("init", "--data", str(tmp_path / "x"), "--store", "mysql://h/db")
    assert not_a_url.returncode == 1 and "PostgreSQL URL" in not_a_url.stderr
    bad_config = bbs("serve", "--data", str(tmp_path / "y"), "--store", "sqlite:///x", "--print-config")
    assert bad_config.returncode == 2 and "store" in bad_config.stderr


async def test_serve_on_postgresql_runs_the_push_dispatcher(tmp_path: Path, url: str) -> None:
    """The push dispatcher starts on a PostgreSQL node (its endpoints and its scan read PostgreSQL): a test message
    goes out, and a request directed to Bob reaches his endpoint, a real receiver process."""
    data = tmp_path / "node"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*BBS, "serve", "--data", str(data), "--store", url, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        await wait_healthy(base, proc)
        made = [bbs("agent", "create", name, "--data", str(data), "--json") for name in ("alice", "bob")]
        assert all(m.returncode == 0 for m in made), [m.stderr for m in made]
        alice, bob = (json.loads(m.stdout) for m in made)
        async with aiohttp.ClientSession() as session:
            async with session.get(base + "/v1/node") as resp:
                node_id = (await resp.json())["node_id"]
            async with receiver(node_id) as rx:
                as_bob = {"Authorization": f"Bearer {bob['api_key']}"}
                async with session.post(
                    base + "/v1/push/endpoints", json={"url": rx.url + "/bob"}, headers=as_bob
                ) as resp:
                    assert resp.status == 201, await resp.text()
                    endpoint = await resp.json()
                async with session.post(base + f"/v1/push/endpoints/{endpoint['id']}/test", headers=as_bob) as resp:
                    assert resp.status == 200, await resp.text()  # 503 while the dispatcher is off
                    tested = await resp.json()
                body = {"entry_type": "question", "performative": "request", "content": "zebra?",
                        "directed_to": [bob["agent_id"]]}  # fmt: skip
                as_alice = {"Authorization": f"Bearer {alice['api_key']}"}
                async with session.post(base + "/v1/entries", json=body, headers=as_alice) as resp:
                    assert resp.status == 201, await resp.text()
                    posted = await resp.json()
                got = await rx.wait_for(2, lambda g: any(p["payload"] != {"test": True} for p in g))
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    assert (tested["ok"], tested["status"]) == (True, 200), tested
    pushed = [p["payload"] for p in got if p["payload"] != {"test": True}]
    assert [(p["agent_id"], p["node_id"]) for p in pushed] == [(bob["agent_id"], node_id)]
    assert [(n["entry_id"], n["reason"]) for n in pushed[0]["notifications"]] == [(posted["id"], "directed_request")]
    assert "push: not available on PostgreSQL" not in stderr
