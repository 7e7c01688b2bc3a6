"""Several processes of one node, in one test: two `Node`s with their own data folders on ONE PostgreSQL database,
each served by a real aiohttp server on loopback (issue 41: any number of `bbs serve` processes act as one node).

The second folder holds what a second `bbs serve` of the node needs of its own: a copy of the node key and the
store's URL; its search index, locks and fences are its own. Tests that need real processes start `bbs serve`
subprocesses instead (tests/ops/test_serve_postgresql.py shows how).
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from node.app import create_app
from node.ops.datadir import initialise
from node.service import Node
from node.workflows.service import check_fence
from scenarios import pg_cluster as cluster_mod
from tests.conftest import FakeClock

pytestmark = pytest.mark.postgresql


@dataclass
class Process:
    """One serving process of the node: its folder, its `Node` and a client of its server."""

    folder: Path
    node: Node
    client: TestClient


@dataclass
class TwoProcesses:
    """Two processes of one node on one database, and the node's admin token."""

    a: Process
    b: Process
    url: str
    admin_token: str

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"}


def second_folder(first: Path, second: Path) -> None:
    """A folder for another process of the node in `first`: the node key and the store's URL, nothing else."""
    second.mkdir(mode=0o700)
    for name in ("node.key", "store.url"):
        shutil.copy2(first / name, second / name)


@pytest.fixture
async def two_processes(
    tmp_path: Path,
    pg_cluster: cluster_mod.Cluster,
    pg_template: str,
    clock: FakeClock,
    aiohttp_client: Callable[..., Awaitable[TestClient]],
) -> AsyncIterator[TwoProcesses]:
    """Processes a and b of one node on a new migrated database, both served; closed and dropped after the test."""
    name = pg_cluster.create_database(template=pg_template)
    url = pg_cluster.store_url(name)
    token = initialise(tmp_path / "a", url)
    assert token is not None
    second_folder(tmp_path / "a", tmp_path / "b")
    nodes = [Node(tmp_path / folder, clock=clock) for folder in ("a", "b")]
    for n in nodes:
        n.open()
        n.reads.fresh_timeout_s = 30.0  # as tests/conftest.py's `node`
    clients = [await aiohttp_client(create_app(n)) for n in nodes]
    yield TwoProcesses(
        Process(tmp_path / "a", nodes[0], clients[0]), Process(tmp_path / "b", nodes[1], clients[1]), url, token
    )
    for client in clients:
        await client.close()
    for n in nodes:
        if n.db.is_open:
            n.close()
    pg_cluster.drop_database(name)


# ---- processes restarted and joined (the lease fence's tests, tests/node/multiproc/test_lease_fence.py) ----------

Start = Callable[[Path], Awaitable[Process]]


@pytest.fixture
async def start_process(clock: FakeClock, aiohttp_client: Callable[..., Awaitable[TestClient]]) -> AsyncIterator[Start]:
    """Start a process of the node on `folder` (again, after its first `Node` was closed, or a new one made by
    `second_folder`): a new `Node` and served client; closed after the test."""
    started: list[Process] = []

    async def start(folder: Path) -> Process:
        n = Node(folder, clock=clock)
        n.open()
        n.reads.fresh_timeout_s = 30.0
        process = Process(folder, n, await aiohttp_client(create_app(n)))
        started.append(process)
        return process

    yield start
    for process in started:
        await process.client.close()
        if process.node.db.is_open:
            process.node.close()


async def stop_process(process: Process) -> None:
    """Stop a process: its server and its `Node` (a `bbs serve` ended)."""
    await process.client.close()
    if process.node.db.is_open:
        process.node.close()


async def check_fences(*processes: Process) -> None:
    """Run the periodic lease fence check of each process in turn, twice (node/web/background.py does every 5 s):
    the first round registers and checks in, the second lets a process vouched for in the first join."""
    for _ in range(2):
        for process in processes:
            await check_fence(process.node.workflows)
