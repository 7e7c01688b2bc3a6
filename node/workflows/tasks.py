"""The task graph's decisions: resolving task refs, the ready set, cycle checks, planning a declaration (their SQL:
node/workflows/store/tasks.py and events.py)."""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

from node.errors import Conflict, InvalidInput, NotFound
from node.spaces.sight import Sight
from node.store.conn import Conn
from node.workflows import scope, twins
from node.workflows.store import events as event_store
from node.workflows.store import tasks as task_store
from wire import unsigned
from wire.time import parse_ms
from wire.unsigned import DONE_STATUSES, OPEN_STATUSES, TaskNow, changed_fields
from wire.workflows import LeaseOut, ReadyList, ReadyTask, TaskOut

_LOCAL_ID = re.compile(r"[0-9]{1,18}")
_KEY = re.compile(r"(?![0-9]+$)[A-Za-z0-9_.:@-]{1,128}")


def parse_ref(ref: str) -> tuple[str, int | str]:
    """A path's task reference: ('id', local id) when all digits, else ('key', task key)."""
    if _LOCAL_ID.fullmatch(ref):
        return "id", int(ref)
    if _KEY.fullmatch(ref):
        return "key", ref
    raise InvalidInput("task_id must be a task's local id or its key", field="task_id", code="invalid_task_ref")


def task_row(conn: Conn, ref: str, sight: Sight, space: str | None = None) -> sqlite3.Row:
    """The tasks row a reference names (a key names the task of `space`, the public one without it), or NotFound:
    a task of a space `sight` does not see is a task not held (docs/spaces.md)."""
    by, value = parse_ref(ref)
    row = task_store.task_by(conn, by, scope.scoped(space, value) if isinstance(value, str) else value)
    if row is None or not sight.sees(row["space"]):
        raise NotFound(f"no task {ref}", field="task_id", code="task_not_found")
    return row


def task_at(conn: Conn, scoped_key: str) -> sqlite3.Row:
    """The tasks row of a scoped key the caller has just written (node/workflows/scope.py)."""
    row = task_store.task_by_key(conn, scoped_key)
    if row is None:
        raise NotFound(f"no task {scope.key_of(scoped_key)}", field="task_id", code="task_not_found")
    return row


def lease_live(row: sqlite3.Row, now_ms: int) -> bool:
    """A lease is live only while its expiry is in the future by this node's clock."""
    return row["lease_expires_ms"] is not None and row["lease_expires_ms"] > now_ms


def effective_status(row: sqlite3.Row, now_ms: int) -> str:
    """The status a reader sees: processing while a live lease is held, pending once an open task's lease ran out."""
    status = str(row["status"])
    if status in OPEN_STATUSES:
        return "processing" if lease_live(row, now_ms) else "pending"
    return status


def task_out(conn: Conn, row: sqlite3.Row, now_ms: int) -> TaskOut:
    """Render a task with its unmet dependencies and its lease, checked against the clock."""
    waiting = [scope.key_of(key) for key in task_store.waiting_on(conn, row["key"])]
    live = lease_live(row, now_ms)
    identity, twin_list = twins.twins(conn, row["key"], row["home_node"], now_ms)
    return TaskOut(
        id=row["id"],
        key=scope.key_of(row["key"]),
        title=row["title"],
        status=effective_status(row, now_ms),
        depends_on=json.loads(row["depends_on"]),
        waiting_on=waiting,
        checkpoint=json.loads(row["checkpoint"]),
        home_node=row["home_node"],
        lease=LeaseOut(lease_id=row["lease_hash"], holder=row["lease_holder"], expires_at=row["lease_expires_at"])
        if live
        else None,
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        identity=identity,
        twins=twin_list,
        space=row["space"],
    )


def ready(conn: Conn, now_ms: int, limit: int, after: int | None, sight: Sight, space: str | None = None) -> ReadyList:
    """Tasks that can start now and that `sight` sees (of `space` only, when given: 404 `unknown_space` for one it
    does not see): open status, no unmet dependency, no live lease; in id order, a page of `limit` after the id
    `after` (node/workflows/store/tasks.py reads them off the partial index `tasks_startable`)."""
    check_space(sight, space)
    rows = task_store.ready_rows(conn, now_ms, limit, after, sight, space)
    more = len(rows) > limit
    rows = rows[:limit]
    return ReadyList(
        tasks=[
            ReadyTask(
                id=r["id"],
                key=scope.key_of(r["key"]),
                title=r["title"],
                depends_on=json.loads(r["depends_on"]),
                checkpoint=json.loads(r["checkpoint"]),
                home_node=r["home_node"],
                space=r["space"],
            )
            for r in rows
        ],
        next_after=rows[-1]["id"] if more else None,
    )


def check_space(sight: Sight, space: str | None) -> None:
    """404 `unknown_space` for a `space=` filter naming a space `sight` does not see (as one never created)."""
    if space is not None and not sight.sees(space):
        raise NotFound("no such space here", field="$.space", code="unknown_space")


def check_no_cycle(conn: Conn, key: str, depends_on: list[str], at: str = "$") -> None:
    """Refuse dependencies that would close a cycle: task `key` (scoped) must not be reachable from any of them
    (keys of its own space)."""
    space, plain = scope.split(key)
    if plain in depends_on:
        raise Conflict("a task cannot depend on itself", field=f"{at}.depends_on", code="dependency_cycle")
    if task_store.reaches(conn, scope.in_space(space, depends_on), key):
        raise Conflict(
            f"depending on {', '.join(depends_on)} would close a cycle back to {plain}",
            field=f"{at}.depends_on",
            code="dependency_cycle",
        )


def check_deps_in_space(conn: Conn, key: str, depends_on: list[str], sight: Sight, at: str = "$") -> None:
    """409 `depends_across_spaces` when a dependency of task `key` (scoped) is not declared in the task's space but
    is, under that key, in another space or the public federation that the author sees (`sight`): a dependency is
    always a task of the task's own space (a public task never waits on a space's task, so `ready` shows nothing of
    one), and the author is told rather than left waiting on a task that is not the one it meant. Spaces the author
    does not see are not asked: the answer reveals nothing of them."""
    space, _ = scope.split(key)
    missing = set(depends_on) - {scope.key_of(k) for k in task_store.held_keys(conn, scope.in_space(space, depends_on))}
    if not missing:
        return
    others = [None, *sorted(sight.spaces)] if not sight.everything else [None]
    elsewhere = [scope.scoped(s, dep) for dep in sorted(missing) for s in others if s != space]
    found = task_store.held_keys(conn, elsewhere)
    if found:
        dep = scope.key_of(min(found))
        raise Conflict(
            f"task {dep} is a task of another space (or public): a task depends only on tasks of its own space",
            field=f"{at}.depends_on",
            code="depends_across_spaces",
        )


def plan_declare(conn: Conn, fields: dict[str, Any], at: str = "$") -> tuple[sqlite3.Row | None, dict[str, Any]]:
    """Which of a declaration's fields change the task; returns (current row, changed fields).

    `fields` holds the declaration's normalised task_key, its `space` when it has one, and whichever of title,
    depends_on, status and checkpoint (a merge patch) were given. An empty result for an existing task means
    nothing changes, so no event is appended: re-declaring a plan converges. Refuses a dependency cycle and a checkpoint
    that would grow too large (errors name fields under `at`: `$.record` for a signed record).
    """
    key = scope.scoped(fields.get("space"), fields["task_key"])
    row = task_store.task_by_key(conn, key)
    current = task_now(row) if row is not None else None
    changed = changed_fields(fields, current)
    if "depends_on" in changed:
        check_no_cycle(conn, key, fields["depends_on"], at)
    if "checkpoint" in fields:
        too_large = unsigned.checkpoint_too_large(
            current.checkpoint if current is not None else {}, fields["checkpoint"]
        )
        if too_large is not None:
            raise InvalidInput(
                too_large,
                field=f"{at}.checkpoint",
                code="checkpoint_too_large",
            )
    return row, changed


def task_now(row: sqlite3.Row) -> TaskNow:
    """A tasks row as what a declaration is compared with."""
    return TaskNow(
        title=row["title"],
        status=row["status"],
        depends_on=json.loads(row["depends_on"]),
        checkpoint=json.loads(row["checkpoint"]),
    )


def is_done(row: sqlite3.Row) -> bool:
    return row["status"] in DONE_STATUSES


def check_after_newest(conn: Conn, key: str, created_at: str) -> None:
    """Refuse a signed event for an existing task dated at or before the newest event held for it.

    The fold orders a task's events by their own `created_at`, which their signer chooses: a declaration dated
    before the task's first one would make its `node_id` the home node (the lease authority), and a completion
    dated before a live lease would fold as if no one held it. An honest client dates its events after the
    newest one it read (docs/workflows.md), so a node refuses anything older it is asked to accept. Records
    relayed by peers are not checked here (see the known limits in docs/workflows.md).
    """
    newest = event_store.newest_event_ms(conn, key)
    if newest is not None and parse_ms(created_at) <= newest:
        raise InvalidInput(
            f"created_at must be after the newest event of task {scope.key_of(key)} held here; read the task and"
            " sign again",
            field="$.record.created_at",
            code="event_out_of_order",
        )


def next_event_ms(conn: Conn, key: str, now_ms: int) -> int:
    """A created time after every event this node holds for the task (see unsigned.next_event_ms)."""
    return unsigned.next_event_ms(event_store.newest_event_ms(conn, key), now_ms)
