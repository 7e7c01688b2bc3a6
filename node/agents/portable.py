"""Portable identities on the node side: read an agent's identity out of a node, register it on another.

`bbs agent export` reads the key and the signed identity document of an agent whose key this node keeps (not yet of
one whose key was rotated: 409 `key_rotated`, the file format carries one key).
`bbs agent import` registers that same identity (same did, same identity document, hence the same record
hash) on another node and issues it an API key there. By default the importing node does NOT keep the
private key: the agent holds it (client SDK or MCP bridge) and signs its own records, and the node only
verifies them. `keep_key=True` lets the node sign on the agent's behalf, like an agent created there.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from identity import keys, records
from node.agents import service as agents
from node.agents import store
from node.errors import Conflict, InvalidInput, NotFound
from node.store.conn import Conn
from wire.api import CreatedAgent

if TYPE_CHECKING:
    from node.service import Node


async def export_identity(node: Node, name: str) -> tuple[keys.SigningKey, dict[str, Any]]:
    """The key and signed identity document of the local agent `name`."""

    def fetch(conn: Conn) -> tuple[keys.SigningKey, dict[str, Any]]:
        row = store.exported_identity(conn, name)
        if row is None:
            raise NotFound(f"no agent named {name!r} on this node", code="agent_not_found", field="name")
        if row[1] is None:
            raise Conflict(
                "this node does not keep that agent's key; the agent already holds its identity file",
                code="key_not_kept",
                field="name",
            )
        key = keys.SigningKey.from_seed(bytes(row[1]))
        if key.did != row[0]:  # an identity file carries one key, the identity's own (issue 36: its history, later)
            raise Conflict(
                "this agent's signing key was rotated: an identity file cannot carry a key history yet",
                code="key_rotated",
                field="name",
            )
        return key, json.loads(row[2])

    return await node.db.read(fetch)


async def import_identity(
    node: Node, name: str, key: keys.SigningKey, identity_record: dict[str, Any] | None, *, keep_key: bool = False
) -> CreatedAgent:
    """Register an existing identity on this node under the local `name`; return its new API key."""
    if identity_record is None:
        raise InvalidInput("the identity file carries no signed identity document", code="identity_record_missing")
    try:
        records.check(identity_record, v3="signing_key" in identity_record)
    except records.RecordError as exc:
        raise InvalidInput(f"identity document does not verify: {exc}", code=f"record_{exc.reason}") from None
    if identity_record.get("kind") != "agent" or identity_record.get("author_id") != key.did:
        raise InvalidInput("the identity document is not this key's", code="identity_mismatch")
    api_key = await node.db.write(
        lambda c: agents.register(
            c,
            name=name,
            key=key,
            keep_key=keep_key,
            record=dict(identity_record),
            now_ms=node.now_ms(),
            authority=node.sealing.authority,  # a document by a key the identity's history voids is refused
        )
    )
    node.sealing.forget(key.did)
    return CreatedAgent(name=name, agent_id=key.did, api_key=api_key)
