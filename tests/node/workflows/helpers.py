"""Helpers for the workflow tests: declaring tasks, leasing, counting records, the seed's example graph."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds

WF = "/v1/agent-workflows"

# The seed's example ("Ready means ready"): two tasks done, one ready, one leased, one blocked.
SEED_PLAN: list[dict[str, Any]] = [
    {"key": "import-contract", "title": "Import the contract", "status": "done"},
    {"key": "scan-repo", "title": "Scan the repository", "status": "done"},
    {"key": "doctor-pass", "title": "Doctor pass", "depends_on": ["import-contract", "scan-repo"]},
    {"key": "write-adr", "title": "Write the ADR", "depends_on": ["scan-repo"]},
    {"key": "publish-digest", "title": "Publish the digest", "depends_on": ["doctor-pass", "write-adr"]},
]


async def declare(client: TestClient, agent: AgentCreds, body: dict[str, Any], status: int | None = None) -> Any:
    resp = await client.post(f"{WF}/tasks", json=body, headers=agent.headers)
    payload = await resp.json()
    if status is not None:
        assert resp.status == status, payload
    else:
        assert resp.status in (200, 201), payload
    return payload


async def ready_keys(client: TestClient, agent: AgentCreds) -> list[str]:
    resp = await client.get(f"{WF}/tasks/ready", headers=agent.headers)
    assert resp.status == 200, await resp.text()
    return [t["key"] for t in (await resp.json())["tasks"]]


async def lease(client: TestClient, who: AgentCreds, ref: str | int, **body: Any) -> tuple[int, Any]:
    resp = await client.post(f"{WF}/tasks/{ref}/lease", json=body, headers=who.headers)
    return resp.status, await resp.json()


async def count_records(node: Node, kind: str) -> int:
    row = await node.db.read(lambda c: c.execute("SELECT count(*) FROM records WHERE kind = ?", (kind,)).fetchone())
    return int(row[0])
