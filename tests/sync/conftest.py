"""Federation fixtures: several real nodes, each a real aiohttp server on loopback with its own data folder."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from identity import canonical, keys, records
from node.app import create_app
from node.federation.routes import SyncSettings, SyncState
from node.ops.datadir import initialise
from node.service import Node
from node.web.appkeys import SYNC
from sync.puller import Puller
from sync.store import PeerConfig
from wire.api import PostEntry


@dataclass
class PeerNode:
    """One running node of a test federation."""

    name: str
    node: Node
    app: web.Application
    server: TestServer
    token: str
    session: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    @property
    def node_id(self) -> str:
        return self.node.node_id

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def sync(self) -> SyncState:
        return self.app[SYNC]

    @property
    def config(self) -> PeerConfig:
        return PeerConfig(self.node_id, self.url)

    def puller(self, **kwargs: Any) -> Puller:
        return Puller(self.sync.store, self.node.node_keys.signer, self.session, **kwargs)

    async def add_peer(self, other: PeerNode) -> None:
        async with self.session.post(
            self.url + "/v1/peers", json={"url": other.url, "node_id": other.node_id}, headers=self.admin
        ) as resp:
            assert resp.status == 201, await resp.text()

    async def agent(self, name: str = "writer") -> str:
        return (await self.node.agents.create(name, name.title())).agent_id

    async def post(self, agent_id: str, content: str, **fields: Any) -> str:
        entry, _ = await self.node.entries.post(
            agent_id, PostEntry(entry_type="finding", performative="inform", content=content, **fields), None
        )
        return entry.record_hash

    async def hashes(self) -> set[str]:
        rows = await self.node.db.read(lambda c: c.execute("SELECT hash FROM records").fetchall())
        return {r[0] for r in rows}

    async def digest(self) -> tuple[int, str]:
        d = await self.sync.store.digest()
        return d.count, d.sha256


@pytest.fixture
async def make_peer(
    tmp_path: Path, node_store: Callable[[], str | None]
) -> AsyncIterator[Callable[..., Awaitable[PeerNode]]]:
    """Start a node; `scheduler=False` (default) leaves pulling to the test, for deterministic steps."""
    started: list[PeerNode] = []

    async def make(name: str, *, scheduler: bool = False, data: Path | None = None) -> PeerNode:
        path = data or tmp_path / name
        token = initialise(path, None if data else node_store()) or ""
        node = Node(path)
        app = create_app(node, sync=SyncSettings(pull=scheduler, wait_ms=2000))
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        peer = PeerNode(name, node, app, server, token, aiohttp.ClientSession())
        started.append(peer)
        return peer

    yield make
    for peer in reversed(started):
        await peer.session.close()
        await peer.server.close()


async def stop(peer: PeerNode) -> None:
    """Stop a node's server (its data folder stays)."""
    await peer.session.close()
    await peer.server.close()


def signed_entry(
    key: keys.SigningKey,
    content: str,
    *,
    links: tuple[str, ...] = (),
    scope: str = "federation",
    created_at: str | None = None,
) -> dict[str, Any]:
    """An entry record signed by `key`, built by hand as an author (or an attacker) would."""
    body = {
        "kind": "entry",
        "schema_version": "v1",
        "author_id": key.did,
        "created_at": created_at or canonical.now_created_at(),
        "entry_type": "finding",
        "performative": "inform",
        "content": content,
        "confidence": 0.5,
        "tags": [],
        "directed_to": [],
        "links": [{"target": t, "link_type": "supports", "annotation": ""} for t in links],
        "metadata": {},
        "truth_state": "fact",
        "authority": "raw",
        "scope": scope,
    }
    return records.sign(body, key)


def body_of(record: dict[str, Any]) -> bytes:
    return canonical.canonical_bytes(record)


def hash_of(record: dict[str, Any]) -> str:
    return records.compute_hash(record)
