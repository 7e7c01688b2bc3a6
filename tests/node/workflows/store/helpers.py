"""Rows and records for the workflow store tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from identity import keys, records
from node.store import projections
from node.store.conn import Conn, engine_of
from node.workflows.store.events import EventRow
from node.workflows.store.tasks import TaskRow
from tests.node.workflows.test_signed import task_event
from wire.time import format_ms
from wire.unsigned import OPEN_STATUSES

T0 = 1_800_000_000_000  # a fixed moment (ms) the rows are dated from


T = TypeVar("T")


class Store:
    """One connection of either engine, read and written as the node's Database is: `write` runs its job in a
    transaction (rolled back when it raises), `read` runs it as it is."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.engine = engine_of(conn)

    async def read(self, fn: Callable[[Conn], T]) -> T:
        """Run `fn` on the connection."""
        return fn(self.conn)

    async def write(self, fn: Callable[[Conn], T]) -> T:
        """Run `fn` in one transaction; return its result once committed."""
        self.conn.execute("BEGIN")
        try:
            result = fn(self.conn)
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return result


def pg_scans(conn: Conn, sql: str, params: tuple[Any, ...]) -> list[tuple[str, str | None]]:
    """The tables PostgreSQL's plan of `sql` reads, each with the index it reads it by (None: none), planned with
    sequential scans off: a test's table of a few rows is read whole otherwise, whatever its indexes."""
    conn.execute("SET enable_seqscan = off")
    try:
        (plan,) = conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()
    finally:
        conn.execute("RESET enable_seqscan")
    scans: list[tuple[str, str | None]] = []

    def walk(node: dict[str, Any]) -> None:
        if "Relation Name" in node:
            scans.append((node["Relation Name"], node.get("Index Name")))
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return scans


def event_row(seq: int, key: str, event: str, author: str, created_ms: int, **fields: Any) -> EventRow:
    """A task_events row; `fields` sets any of its optional columns (node_id, holder, lease_ref, ...)."""
    optional = dict.fromkeys(
        ("node_id", "title", "depends_on", "status", "checkpoint", "holder", "expires_at", "expires_ms", "lease_ref")
    )
    optional.update(fields)
    return EventRow(
        seq=seq,
        hash=f"h{seq}",
        task_key=key,
        event=event,
        author_id=author,
        created_at=format_ms(created_ms),
        created_ms=created_ms,
        **optional,
    )


def task_row(
    task_id: int, key: str, *, status: str = "pending", depends_on: list[str] | None = None, **lease: Any
) -> TaskRow:
    """A tasks row homed on node `did:key:home`; `lease` sets lease_hash, lease_holder, lease_expires_ms."""
    expires_ms = lease.get("lease_expires_ms")
    return TaskRow(
        id=task_id,
        key=key,
        title=key.title(),
        status=status,
        depends_on=json.dumps(depends_on or []),
        checkpoint="{}",
        home_node="did:key:home",
        created_at=format_ms(T0),
        updated_at=format_ms(T0),
        last_ms=T0,
        lease_hash=lease.get("lease_hash"),
        lease_holder=lease.get("lease_holder"),
        lease_expires_at=None if expires_ms is None else format_ms(expires_ms),
        lease_expires_ms=expires_ms,
        open=int(status in OPEN_STATUSES),
    )


async def append(db: Store, *signed: dict[str, Any], origin: str = "local") -> list[str]:
    """Append signed records to the log in one write job (projected as a post or a sync would); their hashes."""
    checked = [records.check(record) for record in signed]

    def write(conn: Conn) -> None:
        for record, (record_hash, decoded) in zip(signed, checked, strict=True):
            projections.append(conn, record, record_hash, decoded, origin=origin, now_ms=T0)

    await db.write(write)
    return [record_hash for record_hash, _ in checked]


def declare(author: keys.SigningKey, node_id: str, created_ms: int, key: str = "job", **fields: Any) -> dict[str, Any]:
    """A signed declaration of `key` naming `node_id` as the node it was made on."""
    return task_event(author, created_ms, "declare", task_key=key, node_id=node_id, **fields)


def grant(
    node_key: keys.SigningKey, holder: str, created_ms: int, key: str = "job", seconds: int = 60
) -> dict[str, Any]:
    """A signed lease grant of `key` to `holder` by `node_key`, running `seconds` from `created_ms`."""
    expires_at = format_ms(created_ms + seconds * 1000)
    return task_event(node_key, created_ms, "lease", task_key=key, holder=holder, expires_at=expires_at)
