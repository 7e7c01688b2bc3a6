"""node/service.py: the `Node` façade builds each feature service once and hands the same one out everywhere."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

from aiohttp.test_utils import TestClient

from identity import schema
from node.agents.service import Agents
from node.default_mode.service import DefaultMode
from node.entries.links import Links
from node.entries.posting import Entries
from node.entries.reads import Reads
from node.federation.routes import SYNC
from node.federation.store import NodeSyncStore
from node.inbox.service import MAX_SUBSCRIPTIONS, Inbox
from node.service import Node
from node.store.sealing import Sealing
from node.trust.service import Trust
from node.workflows.service import Workflows
from tests.conftest import FakeClock
from wire.api import MAX_BATCH, MAX_HOPS

ROOT = Path(__file__).resolve().parents[2]
# The modules `Node` builds its services from: they must not import node.service (it imports them).
FEATURE_MODULES = [
    "node/store/sealing.py",
    "node/agents/service.py",
    "node/entries/posting.py",
    "node/entries/links.py",
    "node/entries/reads.py",
    "node/inbox/service.py",
    "node/trust/service.py",
    "node/federation/store.py",
    "node/workflows/service.py",
    "node/default_mode/service.py",
    "node/default_mode/proposals.py",
]


def test_each_feature_service_is_built_once_on_the_same_database_and_clock(node: Node, clock: FakeClock) -> None:
    services = {
        "sealing": Sealing,
        "agents": Agents,
        "entries": Entries,
        "links": Links,
        "reads": Reads,
        "inbox": Inbox,
        "workflows": Workflows,
        "default_mode": DefaultMode,
        "trust": Trust,
        "sync": NodeSyncStore,
    }
    for name, kind in services.items():
        service = getattr(node, name)
        assert isinstance(service, kind), name
        assert getattr(node, name) is service, name
        assert service.db is node.db, name
    assert node.entries.sealing is node.sealing and node.links.sealing is node.sealing
    assert node.workflows.sealing is node.sealing
    assert node.default_mode.entries is node.entries and node.default_mode.reads is node.reads
    assert node.workflows.node_id == node.sync.node_id == node.default_mode.node_id == node.node_id
    clock.advance(12.5)
    assert node.inbox.now_ms() == node.entries.now_ms() == node.now_ms() == int(clock.now * 1000)


async def test_the_app_serves_the_nodes_own_services(client: TestClient, node: Node) -> None:
    """Federation serves the node's one sync store (its change feed wakes long polls), not one of its own."""
    assert client.app[SYNC].store is node.sync


def test_no_feature_module_imports_the_node() -> None:
    offenders = []
    for relative in FEATURE_MODULES:
        tree = ast.parse((ROOT / relative).read_text())
        for found in ast.walk(tree):
            if isinstance(found, ast.ImportFrom) and found.module == "node.service":
                offenders.append(f"{relative}:{found.lineno}")
            if (
                isinstance(found, ast.ImportFrom)
                and found.module == "node"
                and any(alias.name == "service" for alias in found.names)
            ):
                offenders.append(f"{relative}:{found.lineno}")
            if isinstance(found, ast.Import) and any(alias.name == "node.service" for alias in found.names):
                offenders.append(f"{relative}:{found.lineno}")
    assert offenders == []


def test_info_names_the_node_and_its_limits(node: Node) -> None:
    info = node.info()
    assert info.node_id == node.node_id and info.software == "agent-bbs"
    assert info.limits["max_subscriptions"] == MAX_SUBSCRIPTIONS
    assert info.limits["max_batch_entries"] == MAX_BATCH and info.limits["max_hops"] == MAX_HOPS
    assert info.limits["max_record_bytes"] == schema.MAX_RECORD_BYTES


async def test_close_stops_the_crypto_threads(data_dir: tuple[Path, str]) -> None:
    node = Node(data_dir[0])
    node.open()
    await node.sealing.off_loop(2, lambda: None)
    assert any(t.name.startswith("bbs-crypto") for t in threading.enumerate())
    node.close()
    assert not any(t.name.startswith("bbs-crypto") for t in threading.enumerate())
