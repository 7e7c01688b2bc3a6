"""`agent_type`: set at registration, carried in the signed identity document only when set, shown in the
agent's public identity; what a node of the previous release makes of the new documents."""

from __future__ import annotations

import json
import sqlite3
from typing import Annotated, Literal

import msgspec
import pytest
from aiohttp.test_utils import TestClient

from identity import keys, records
from identity.schema import Did
from node.agents import service as agents
from node.service import Node
from tests.node.api_helpers import count


class PreviousAgentRecord(msgspec.Struct, forbid_unknown_fields=True):
    """The agent document's schema as the previous release checks it (identity/schema.py before agent_type)."""

    kind: Literal["agent"]
    schema_version: Literal["v1"]
    author_id: Did
    created_at: str
    display_name: Annotated[str, msgspec.Meta(min_length=1)]
    description: str
    home_node: Did
    signature: str


async def _document(node: Node, agent_id: str) -> dict[str, object]:
    def run(conn: sqlite3.Connection) -> dict[str, object]:
        row = conn.execute(
            "SELECT r.body FROM records r JOIN agents a ON a.doc_hash = r.hash WHERE a.id = ?", (agent_id,)
        ).fetchone()
        return dict(json.loads(bytes(row[0])))

    return await node.db.read(run)


async def test_registration_writes_agent_type_into_the_signed_document(
    client: TestClient, node: Node, admin_headers: dict[str, str]
) -> None:
    resp = await client.post("/v1/agents", json={"name": "hal", "agent_type": "assistant"}, headers=admin_headers)
    assert resp.status == 201, await resp.text()
    hal = await resp.json()
    shown = await (await client.get("/v1/agents/hal", headers=admin_headers)).json()
    assert shown["agent_type"] == "assistant" and shown["agent_id"] == hal["agent_id"]
    doc = await _document(node, hal["agent_id"])
    assert doc["agent_type"] == "assistant"
    records.check(dict(doc))  # this release verifies it

    resp = await client.post("/v1/agents", json={"name": "plain"}, headers=admin_headers)
    plain = await resp.json()
    assert (await (await client.get("/v1/agents/plain", headers=admin_headers)).json())["agent_type"] is None
    assert "agent_type" not in await _document(node, plain["agent_id"])


@pytest.mark.parametrize("bad", ["", "Assistant", "a b", "x" * 33, 7])
async def test_a_bad_agent_type_is_refused_and_nothing_stored(
    client: TestClient, node: Node, admin_headers: dict[str, str], bad: object
) -> None:
    before = await count(node)
    resp = await client.post("/v1/agents", json={"name": "hal", "agent_type": bad}, headers=admin_headers)
    problem = await resp.json()
    assert (resp.status, problem["code"], problem["field"]) == (422, "validation_error", "$.agent_type")
    assert await count(node) == before


def test_the_previous_release_accepts_documents_without_agent_type_and_refuses_the_others() -> None:
    """Why the field is only written when set: documents without it verify on old nodes, byte for byte as before."""
    key = keys.SigningKey.generate()
    home = keys.SigningKey.generate().did
    untyped = agents.identity_record(key, "Hal", "", home)
    typed = agents.identity_record(key, "Hal", "", home, agent_type="assistant")
    msgspec.convert(untyped, PreviousAgentRecord)
    with pytest.raises(msgspec.ValidationError, match="agent_type"):
        msgspec.convert(typed, PreviousAgentRecord)
    for doc in (untyped, typed):
        records.check(dict(doc))  # this release takes both


async def test_the_newest_document_sets_the_type(node: Node) -> None:
    key = keys.SigningKey.generate()
    first = agents.identity_record(key, "Hal", "", node.node_id, agent_type="assistant")
    await node.db.write(
        lambda c: agents.register(c, name="hal", key=key, keep_key=True, record=first, now_ms=node.now_ms())
    )
    assert (await node.agents.get("hal")).agent_type == "assistant"
