"""Portable identities on the node side: read an agent's identity out of a node, register it on another.

`bbs agent export` reads the current key, the signed identity document and the key history (the key events of the
winning chain) of an agent whose key this node keeps; a rotated agent's file is an identity file of version 2.
`bbs agent import` registers that same identity (same did, same identity document, hence the same record
hash) on another node and issues it an API key there. By default the importing node does NOT keep the
private key: the agent holds it (client SDK or MCP bridge) and signs its own records, and the node only
verifies them. `keep_key=True` lets the node sign on the agent's behalf, like an agent created there.
A rotated identity's key events are stored with it, decided as any submitted key event (`key_events.submit_txn`),
in the same transaction; their vouch pages come from the home node by sync. A file whose key is not the key the
node's history of the identity (the file's events and those the node holds) leads to is refused, `409
identity_key_outdated`, and nothing is stored: a copy taken before a rotation must not sign again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from identity import key_history, keys, records
from node.agents import service as agents
from node.agents import store
from node.agents.key_events import submit_txn
from node.errors import Conflict, InvalidInput, NotFound
from node.store.authority import key_events_of
from node.store.conn import Conn
from wire.api import CreatedAgent, KeyEventIn

if TYPE_CHECKING:
    from node.service import Node


@dataclass(frozen=True)
class Exported:
    """A node-kept agent's identity as a file carries it: the current key, the signed identity document, the
    identity's did and the key events of its winning chain (seq 1 first)."""

    key: keys.SigningKey
    record: dict[str, Any]
    agent_id: str
    key_history: list[dict[str, Any]]


async def export_identity(node: Node, name: str) -> Exported:
    """The current key, identity document and key history of the local agent `name`."""

    def fetch(conn: Conn) -> Exported:
        row = store.exported_identity(conn, name)
        if row is None:
            raise NotFound(f"no agent named {name!r} on this node", code="agent_not_found", field="name")
        if row[1] is None:
            raise Conflict(
                "this node does not keep that agent's key; the agent already holds its identity file",
                code="key_not_kept",
                field="name",
            )
        did = str(row[0])
        key = keys.SigningKey.from_seed(bytes(row[1]))
        events = key_events_of(conn, did)
        history = key_history.resolve(did, events)
        if history.state.key != key.did:
            raise Conflict(
                "the key this node keeps is no longer the agent's signing key (another key event replaced it)",
                code="key_not_current",
                field="name",
            )
        return Exported(key, json.loads(row[2]), did, [history.events[a] for a in history.chain])

    return await node.db.read(fetch)


async def import_identity(
    node: Node,
    name: str,
    key: keys.SigningKey,
    identity_record: dict[str, Any] | None,
    *,
    keep_key: bool = False,
    agent_id: str | None = None,
    history: list[dict[str, Any]] | None = None,
) -> CreatedAgent:
    """Register an existing identity on this node under the local `name` (`key` signs for it now; `agent_id` is
    its did when it was rotated, `history` its key events); return its new API key."""
    did = agent_id or key.did
    if identity_record is None:
        raise InvalidInput("the identity file carries no signed identity document", code="identity_record_missing")
    try:
        records.check(identity_record)
    except records.RecordError as exc:
        raise InvalidInput(f"identity document does not verify: {exc}", code=f"record_{exc.reason}") from None
    if identity_record.get("kind") != "agent" or identity_record.get("author_id") != did:
        raise InvalidInput("the identity document is not this key's", code="identity_mismatch")
    checked = [node.key_events.check(KeyEventIn(record=event), did)[0] for event in sorted(history or [], key=_seq)]
    authority = node.sealing.authority

    def job(conn: Conn) -> str:
        now_ms = node.now_ms()
        for event in checked:
            try:
                submit_txn(conn, authority, event, [], now_ms)
            except InvalidInput as exc:
                if exc.code != "unauthorized_key_event":
                    raise
                raise Conflict(
                    f"the identity file's key history does not hold here ({exc.detail}): another key event (a"
                    " recovery) replaced it; export the identity again from its home node",
                    code="identity_key_outdated",
                ) from None
        authority.ensure_txn(conn)
        current = authority.history(did).state.key
        if current != key.did:
            raise Conflict(
                f"the identity file's key {key.did} is not the identity's signing key ({current}): the file is older"
                " than a rotation or revocation; export the identity again from its home node",
                code="identity_key_outdated",
            )
        return agents.register(
            conn, name=name, key=key, keep_key=keep_key, record=dict(identity_record), now_ms=now_ms, agent_id=did
        )

    try:
        api_key = await node.db.write(job)
    except BaseException:
        authority.invalidate()
        raise
    node.sealing.forget(did)
    return CreatedAgent(name=name, agent_id=did, api_key=api_key)


def _seq(event: dict[str, Any]) -> int:
    seq = event.get("seq")
    return seq if isinstance(seq, int) else 0
