"""Helpers shared by the REST API tests: posting, counting stored rows, agents that sign their own records."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from aiohttp.test_utils import TestClient

from identity import canonical, keys, records
from node.agents import service as agents
from node.federation.store import NodeSyncStore, add_peer_txn
from node.service import Node
from sync.store import Verified
from sync.verify import verify_record
from tests.conftest import AgentCreds
from wire.time import format_ms


@dataclass
class SelfSigner:
    """An agent that holds its own key: the node keeps only its public identity and an API key."""

    creds: AgentCreds
    key: keys.SigningKey

    @property
    def headers(self) -> dict[str, str]:
        return self.creds.headers

    @property
    def agent_id(self) -> str:
        return self.creds.agent_id


async def self_signer(node: Node, name: str) -> SelfSigner:
    """Register an agent whose key the node does NOT keep (keep_key=False)."""
    key = keys.SigningKey.generate()
    record = agents.identity_record(key, name.title(), "", node.node_id)
    api_key = await node.db.write(
        lambda c: agents.register(c, name=name, key=key, keep_key=False, record=record, now_ms=node.now_ms())
    )
    return SelfSigner(AgentCreds(name, key.did, api_key), key)


def entry_record(key: keys.SigningKey, content: str, *, created_ms: int, **fields: Any) -> dict[str, Any]:
    """A signed entry record, every field in canonical form."""
    body: dict[str, Any] = {
        "kind": "entry",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": key.did,
        "created_at": format_ms(created_ms),
        "entry_type": "finding",
        "performative": "inform",
        "content": content,
        "confidence": 0.5,
        "tags": [],
        "directed_to": [],
        "links": [],
        "metadata": {},
        "truth_state": "fact",
        "authority": "raw",
        "scope": "federation",
    }
    body.update(fields)
    return records.sign(body, key)


def link_record(
    key: keys.SigningKey, source: str, target: str, link_type: str, *, created_ms: int, annotation: str = ""
) -> dict[str, Any]:
    """A signed link record."""
    body = {
        "kind": "link",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": key.did,
        "created_at": format_ms(created_ms),
        "source": source,
        "target": target,
        "link_type": link_type,
        "annotation": annotation,
    }
    return records.sign(body, key)


async def ingest(node: Node, record: dict[str, Any]) -> str:
    """Store a signed record as sync does (verified, then ingested from a registered peer); return its outcome.

    For records a client may not submit (node/store/submission.py) but a peer may still bring."""
    peer = keys.SigningKey.generate().did
    await node.db.write(lambda c: add_peer_txn(c, "http://127.0.0.1:9", peer, node.now_ms()))
    checked = verify_record(canonical.canonical_bytes(record), records.compute_hash(record))
    assert isinstance(checked, Verified), checked
    (outcome,) = await NodeSyncStore(node.db, node.node_id, node.now_ms).ingest(peer, [checked], [], None)
    return outcome.outcome


def hash_of(record: dict[str, Any]) -> str:
    """The record hash the node will compute for a signed record."""
    return records.compute_hash(record)


async def count(node: Node, table: str = "records") -> int:
    """Rows in a table, read through the node's own reader."""

    def run(conn: sqlite3.Connection) -> int:
        return int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])

    return await node.db.read(run)


async def post(
    client: TestClient, who: Any, status: int | None = 201, *, headers: dict[str, str] | None = None, **fields: Any
) -> dict[str, Any]:
    """POST /v1/entries with default entry_type/performative; assert the status; return the body."""
    body = {"entry_type": "finding", "performative": "inform", **fields}
    resp = await client.post("/v1/entries", json=body, headers={**who.headers, **(headers or {})})
    data: dict[str, Any] = await resp.json(content_type=None)
    if status is not None:
        assert resp.status == status, data
    return data


async def link(client: TestClient, who: Any, status: int | None = 201, **fields: Any) -> dict[str, Any]:
    """POST /v1/links; assert the status; return the body."""
    resp = await client.post("/v1/links", json=fields, headers=who.headers)
    data: dict[str, Any] = await resp.json(content_type=None)
    if status is not None:
        assert resp.status == status, data
    return data


async def get_json(client: TestClient, path: str, who: Any, status: int = 200, params: Any = None) -> dict[str, Any]:
    """GET a path; assert the status; return the body."""
    resp = await client.get(path, params=params, headers=who.headers)
    data: dict[str, Any] = await resp.json(content_type=None)
    assert resp.status == status, data
    return data


def problem(data: dict[str, Any], status: int, code: str, field: str | None = None) -> None:
    """Assert a problem+json body with a stable code (and field when given)."""
    assert data["status"] == status, data
    assert data["code"] == code, data
    assert data["type"].endswith("/" + code)
    if field is not None:
        assert data.get("field") == field, data


async def stored_body(node: Node, record_hash: str) -> bytes:
    """The bytes of a stored record, as the log holds them."""
    return await node.db.read(
        lambda c: bytes(c.execute("SELECT body FROM records WHERE hash = ?", (record_hash,)).fetchone()[0])
    )
