"""Changes to a task homed on another node: decided by that home node, then stored here.

A node that has not seen a grant cannot decide against it. So a declaration that changes a task's status or
checkpoint, a release and a completion of a task whose home node is another node are signed here (or come
signed by their agent), sent to the home node (node/workflows/forward.py `send_event`), which checks them as
it checks its own agents' events (the live lease, the fencing token, readiness), and stored here only once
the home node has stored them. When the home node cannot be asked the change is refused with
`503 lease_authority_unreachable`, as a lease is.
"""

from __future__ import annotations

from typing import Any

from identity import keys
from node.errors import BBSError
from node.spaces.sight import Viewer
from node.spaces.store import sight_of
from node.store import idempotency, projections
from node.store.conn import Conn
from node.store.db import Database
from node.store.sealing import SealedRecord, sign_and_check
from node.workflows import forward, scope, tasks
from node.workflows.store import tasks as task_store
from sync.auth import NodeSigner
from wire import unsigned
from wire.time import format_ms

# What a declaration may change without the home node (anyone's to change, nothing a lease protects).
LOCAL_FIELDS = frozenset({"task_key", "space", "title", "depends_on"})


def homed_elsewhere(conn: Conn, ref: str, space: str | None, agent_id: Viewer, node_id: str) -> tuple[str, str] | None:
    """(task key, home node) when the task `ref` names (a key: of `space`) is homed on another node; None when
    homed here. 404 `task_not_found` when this node holds no such task `agent_id` may see. A task of a space is
    homed here: its events do not leave the node until spaces part 2."""
    row = tasks.task_row(conn, ref, sight_of(conn, agent_id), space)
    return None if row["home_node"] == node_id else (str(row["key"]), str(row["home_node"]))


def declared_elsewhere(conn: Conn, fields: dict[str, Any], node_id: str) -> str | None:
    """The home node a declaration must be sent to: another node's task whose status or checkpoint it sets."""
    if set(fields) <= LOCAL_FIELDS:
        return None
    home = task_store.home_node(conn, scope.scoped(fields.get("space"), fields["task_key"]))
    return None if home is None or home == node_id else home


def draft_event(conn: Conn, key: str, agent_id: str, event: str, fields: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """An unsigned event of this node's agent, dated after every event this node holds for the task."""
    created_at = format_ms(tasks.next_event_ms(conn, key, now_ms))
    return unsigned.unsigned_task_event(key, agent_id, created_at, event, **fields)


async def sign_event(
    db: Database, signer: keys.SigningKey, key: str, event: str, fields: dict[str, Any], now_ms: int
) -> SealedRecord:
    """Sign an event for the agent whose key this node keeps."""
    draft = await db.read(lambda c: draft_event(c, key, signer.did, event, fields, now_ms))
    return sign_and_check(draft, signer)


async def decide_at_home(
    db: Database,
    node_key: keys.SigningKey | NodeSigner,
    home_node: str,
    sealed: SealedRecord,
    lease: str | None,
    signed_here: bool,
) -> bool:
    """Send the event to its home node: whether the home node stored it (False: it changed nothing there).
    Relays a refusal; fields of a record this node built for a node-signed request are named as the request
    named them (`$.lease`, not `$.record.lease`)."""
    try:
        return await forward.send_event(db, node_key, home_node, sealed[0], lease)
    except BBSError as exc:
        if signed_here and exc.field is not None and exc.field.startswith("$.record."):
            exc.field = "$." + exc.field.removeprefix("$.record.")
        raise


def store_txn(
    conn: Conn,
    sealed: SealedRecord,
    agent_id: str,
    idem: tuple[str, str] | None,
    now: int,
) -> None:
    """Store an event the home node accepted (and the idempotency key `idem`, (key, operation), that made it)."""
    projections.append(conn, *sealed, origin="local", now_ms=now)
    if idem is not None and idempotency.replayed(conn, agent_id, idem[0], idem[1], field=idempotency.HEADER) is None:
        idempotency.remember(conn, agent_id, idem[0], idem[1], sealed[1], now)
