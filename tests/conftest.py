"""Shared fixtures: real data folders in tmp_path, a real Node, a real aiohttp server on loopback."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient
from hypothesis import settings

from node.app import create_app
from node.ops.datadir import initialise
from node.service import Node

# The PostgreSQL half: its fixtures and the hooks that mark it, and deselect it where PostgreSQL is not installed.
from tests.pg_fixtures import (  # noqa: F401
    node_store,
    open_store,
    pg_cluster,
    pg_folder,
    pg_migrated_url,
    pg_store_url,
    pg_template,
    pg_url,
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_report_header,
    pytest_terminal_summary,
    standby,
)

# pytest-xdist workers start with COLUMNS=80 in their environment where a serial run has none off a terminal: the
# `bbs` commands' tables (agent/people_format.py) would be cut to 80 columns in a worker only.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.pop("COLUMNS", None)

# Tests never assert wall-clock times: hypothesis's per-example deadline would make a loaded machine fail them.
settings.register_profile("bbs", deadline=None)
settings.load_profile("bbs")


class FakeClock:
    """A controllable clock: starts at the real time, moves only when told."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class AgentCreds:
    """An agent created on a test node."""

    name: str
    agent_id: str
    api_key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def data_dir(tmp_path: Path, node_store: Callable[[], str | None]) -> tuple[Path, str]:  # noqa: F811
    """An initialised data folder and its admin token (its database on this run's store: `node_store`)."""
    path = tmp_path / "node"
    token = initialise(path, node_store())
    assert token is not None
    return path, token


@pytest.fixture
def admin_headers(data_dir: tuple[Path, str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {data_dir[1]}"}


@pytest.fixture
async def node(data_dir: tuple[Path, str], clock: FakeClock) -> AsyncIterator[Node]:
    n = Node(data_dir[0], clock=clock)
    n.open()
    # A served node waits 2 s for its index (search_fresh_timeout_ms); a loaded CI machine, PostgreSQL's pass above
    # all, indexes slower than that now and then. Tests of the timeout itself set their own.
    n.reads.fresh_timeout_s = 30.0
    yield n
    if n.db.is_open:
        n.close()


@pytest.fixture
async def client(aiohttp_client: Callable[..., Awaitable[TestClient]], node: Node) -> TestClient:
    """A real aiohttp server on loopback serving `node`."""
    return await aiohttp_client(create_app(node))


@pytest.fixture
def make_agent(node: Node) -> Callable[[str], Awaitable[AgentCreds]]:
    """Create an agent (node-kept key) on the test node."""

    async def make(name: str = "agent") -> AgentCreds:
        created = await node.agents.create(name, name.title())
        return AgentCreds(created.name, created.agent_id, created.api_key)

    return make
