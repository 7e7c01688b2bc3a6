"""Projectors of the workflow record kinds: `message` into the bus tables, `task_event` into the task graph.

Records arrive in any order (local writes, sync from several peers). Each event is stored in `task_events`;
the task is the fold of all of its events in (created_ms, hash) order, so every node holding the same events
computes the same task. An event that sorts after every event the task has (the usual case: local writes,
sync in order) is applied to the stored task (`advance`), which gives the fold's result without reading the
history; any other event re-folds the task from all of its events (`refold_txn`). Their SQL is in
node/workflows/store/ (bus.py, events.py, tasks.py, twins.py).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import msgspec

from identity.schema import MessageRecord, TaskEventRecord
from identity.schema_v3 import space_of
from node.store.conn import Conn
from node.workflows import scope
from node.workflows.store import bus as bus_store
from node.workflows.store import events as event_store
from node.workflows.store import tasks as task_store
from node.workflows.store import twins as twin_store
from wire.time import parse_ms
from wire.unsigned import DONE_STATUSES, OPEN_STATUSES, merge_patch

if TYPE_CHECKING:  # node.store.projections imports this module for its projectors
    from node.store.projections import Projection, Projector, Switch


_ADDRESS = re.compile(r"[0-9a-f]{64}")  # a dependency id that may be a record's address (node/spaces/posts.py)


def _opt(value: Any) -> Any:
    """UNSET as None, for storage."""
    return None if value is msgspec.UNSET else value


def project_message(conn: Conn, rec: MessageRecord, ctx: Projection) -> None:
    """Project a message record into the bus tables (node/workflows/store/bus.py)."""
    row = bus_store.MessageRow(
        ctx.seq,
        ctx.hash,
        rec.author_id,
        _opt(rec.to_agent),
        rec.message_type,
        rec.body,
        json.dumps(rec.payload, sort_keys=True),
        json.dumps(rec.dependency_ids),
        _opt(rec.project),
        rec.created_at,
        parse_ms(rec.created_at),
        rec.signature,
        space_of(rec),
    )
    addresses = [dep for dep in rec.dependency_ids if _ADDRESS.fullmatch(dep)]
    bus_store.insert_message_txn(conn, row, rec.tags, addresses)


def project_task_event(conn: Conn, rec: TaskEventRecord, ctx: Projection) -> None:
    """Project a task event: store it, then apply it to its task in place (`advance`) or re-fold the task. The task
    is the one of the event's space (its scoped key: node/workflows/scope.py)."""
    expires_at = _opt(rec.expires_at)
    space = space_of(rec)
    key = scope.scoped(space, rec.task_key)
    event_store.insert_event_txn(
        conn,
        event_store.EventRow(
            ctx.seq,
            ctx.hash,
            key,
            rec.event,
            rec.author_id,
            rec.created_at,
            parse_ms(rec.created_at),
            _opt(rec.node_id),
            _opt(rec.title),
            None if rec.depends_on is msgspec.UNSET else json.dumps(rec.depends_on),
            _opt(rec.status),
            None if rec.checkpoint is msgspec.UNSET else json.dumps(rec.checkpoint, sort_keys=True),
            _opt(rec.holder),
            expires_at,
            None if expires_at is None else parse_ms(expires_at),
            _opt(rec.lease),
            space,
        ),
    )
    event = event_store.event_at(conn, ctx.seq)
    before = task_store.task_by_key(conn, key)
    state = advance(conn, before, event) if before is not None else None
    if state is None:
        refold_txn(conn, key, before)
        # an earlier declaration may have named another home node: queued (node-local) for twins.py to check
        if ctx.notify and before is not None and task_store.home_node(conn, key) != before["home_node"]:
            twin_store.note_home_move_txn(conn, key)
    else:
        _store_txn(conn, state, before)


def switch_message(conn: Conn, seq: int, address: str, record: dict[str, Any], valid: bool, now_ms: int) -> None:
    """A message whose record was flagged void leaves the bus tables; flagged valid again, it comes back."""
    from node.store.projections import Projection
    from node.store.void import decoded

    bus_store.delete_message_txn(conn, seq)
    if valid:
        project_message(conn, decoded(record), Projection(seq, address, now_ms, notify=False))


def switch_task_event(conn: Conn, seq: int, address: str, record: dict[str, Any], valid: bool, now_ms: int) -> None:
    """A task event whose record was flagged void leaves `task_events` and its task is folded again without it (no
    event left: no task); flagged valid again, it is projected as if it had just arrived."""
    from node.store.projections import Projection
    from node.store.void import decoded

    key = scope.scoped(record.get("space"), str(record["task_key"]))
    event_store.delete_event_txn(conn, seq)
    if valid:
        project_task_event(conn, decoded(record), Projection(seq, address, now_ms, notify=False))
        return
    before = task_store.task_by_key(conn, key)
    if fold(key, event_store.events_of(conn, key)) is None:
        task_store.delete_task_txn(conn, key)
    else:
        refold_txn(conn, key, before)


# The workflow record kinds' projectors, and the tables holding only their derived data (node.store.projections joins
# them with the substrate's); their switches for records flagged void (node/store/void.py).
SWITCHES: Mapping[str, Switch] = MappingProxyType({"message": switch_message, "task_event": switch_task_event})
PROJECTORS: Mapping[str, Projector] = MappingProxyType({"message": project_message, "task_event": project_task_event})
TABLES: tuple[str, ...] = ("messages", "message_agents", "message_dependencies", "task_events", "tasks", "task_deps")


@dataclass
class TaskState:
    """A task as the fold of its events; `key` is its scoped key (node/workflows/scope.py)."""

    key: str
    id: int
    home_node: str
    created_at: str
    updated_at: str
    last_ms: int
    title: str
    status: str = "pending"
    depends_on: list[str] = field(default_factory=list)
    checkpoint: dict[str, Any] = field(default_factory=dict)
    lease_hash: str | None = None
    lease_holder: str | None = None
    lease_expires_at: str | None = None
    lease_expires_ms: int | None = None


def fold(key: str, events: list[sqlite3.Row]) -> TaskState | None:
    """The current task from its events sorted by (created_ms, hash); None until it has been declared.

    The earliest declaration names the home node; only that node's lease grants count. The newest grant is
    the lease, unless a release or complete by its holder names it. Order-independent parts (which grant is
    ended) are decided over the whole set, so clock skew between a release and its grant cannot resurrect it.
    """
    declares = [e for e in events if e["event"] == "declare"]
    if not declares:
        return None
    first = declares[0]
    state = TaskState(
        key=key,
        id=min(e["seq"] for e in declares),
        home_node=first["node_id"],
        created_at=first["created_at"],
        updated_at=events[-1]["created_at"],
        last_ms=events[-1]["created_ms"],
        title=scope.key_of(key),
    )
    grants = {e["hash"]: e for e in events if e["event"] == "lease" and e["author_id"] == state.home_node}
    ended = {
        e["lease_ref"]
        for e in events
        if e["event"] in ("release", "complete")
        and e["lease_ref"] in grants
        and grants[e["lease_ref"]]["holder"] == e["author_id"]
    }
    lease = None
    for e in events:
        _apply(state, e)
        if e["event"] == "lease" and e["hash"] in grants:
            lease = e
    if lease is not None and lease["hash"] not in ended:
        state.lease_hash = lease["hash"]
        state.lease_holder = lease["holder"]
        state.lease_expires_at = lease["expires_at"]
        state.lease_expires_ms = lease["expires_ms"]
    return state


def advance(conn: Conn, task: sqlite3.Row, e: sqlite3.Row) -> TaskState | None:
    """The stored task `task` after event `e`, when `e` sorts after all of the task's other events; else None.

    Equal to `fold` over all the events then: the declaration that named the home node and the task's id is
    already in; a grant by the home node becomes the lease (unless an event stored earlier already ends it,
    which only a re-fold sees); a release or complete by the holder of the current lease ends it.
    """
    if e["created_ms"] <= task["last_ms"]:  # same millisecond or earlier: the (created_ms, hash) order decides
        return None
    state = TaskState(
        key=task["key"],
        id=task["id"],
        home_node=task["home_node"],
        created_at=task["created_at"],
        updated_at=e["created_at"],
        last_ms=e["created_ms"],
        title=task["title"],
        status=task["status"],
        depends_on=json.loads(task["depends_on"]),
        checkpoint=json.loads(task["checkpoint"]),
        lease_hash=task["lease_hash"],
        lease_holder=task["lease_holder"],
        lease_expires_at=task["lease_expires_at"],
        lease_expires_ms=task["lease_expires_ms"],
    )
    _apply(state, e)
    if e["event"] == "lease" and e["author_id"] == state.home_node:
        if event_store.lease_ended(conn, state.key, e["hash"], e["holder"]):
            return None
        state.lease_hash, state.lease_holder = e["hash"], e["holder"]
        state.lease_expires_at, state.lease_expires_ms = e["expires_at"], e["expires_ms"]
    elif e["event"] in ("release", "complete") and _ends_lease(e, state):
        state.lease_hash = state.lease_holder = state.lease_expires_at = state.lease_expires_ms = None
    return state


def _ends_lease(e: sqlite3.Row, state: TaskState) -> bool:
    """Whether a release or complete ends the task's current lease: it names it and its holder signed it."""
    return state.lease_hash is not None and e["lease_ref"] == state.lease_hash and e["author_id"] == state.lease_holder


def _apply(state: TaskState, e: sqlite3.Row) -> None:
    """What one event does to the task apart from its lease: declared fields, `done`, the checkpoint patch."""
    if e["event"] == "declare":
        if e["title"] is not None:
            state.title = e["title"]
        if e["depends_on"] is not None:
            state.depends_on = json.loads(e["depends_on"])
        if e["status"] is not None:
            state.status = e["status"]
    elif e["event"] == "complete":
        state.status = "done"
    if e["checkpoint"] is not None:
        state.checkpoint = merge_patch(state.checkpoint, json.loads(e["checkpoint"]))


def refold_txn(conn: Conn, key: str, before: sqlite3.Row | None) -> None:
    """Recompute one task from all of its events (`before`: its stored row, if any)."""
    state = fold(key, event_store.events_of(conn, key))
    if state is not None:
        _store_txn(conn, state, before)


def _store_txn(conn: Conn, state: TaskState, before: sqlite3.Row | None) -> None:
    """Write a task's new state, its dependency rows, and the unmet counts it affects."""
    key = state.key
    task_store.upsert_task_txn(
        conn,
        task_store.TaskRow(
            state.id,
            key,
            state.title,
            state.status,
            json.dumps(state.depends_on),
            json.dumps(state.checkpoint, sort_keys=True),
            state.home_node,
            state.created_at,
            state.updated_at,
            state.last_ms,
            state.lease_hash,
            state.lease_holder,
            state.lease_expires_at,
            state.lease_expires_ms,
            int(state.status in OPEN_STATUSES),
            scope.split(key)[0],
        ),
    )
    deps_json = json.dumps(state.depends_on)
    if before is None or before["depends_on"] != deps_json:
        task_store.replace_deps_txn(conn, key, scope.in_space(scope.split(key)[0], state.depends_on))
        task_store.recount_task_txn(conn, key)
    was_done = before is not None and before["status"] in DONE_STATUSES
    if before is None or was_done != (state.status in DONE_STATUSES):
        task_store.recount_dependents_txn(conn, key)
