"""The message bus: building message records and reading the log of messages. Nothing here deletes."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from identity import canonical
from node.errors import InvalidInput, NotFound
from node.spaces.sight import Sight
from node.store import idempotency
from node.store.conn import Conn
from node.workflows.store import bus as bus_store
from wire import unsigned
from wire.workflows import MessageOut, MessagePage, MessageQuery, PostMessage


def unsigned_message(sender: str, body: PostMessage, created_at: str) -> dict[str, Any]:
    """The unsigned record of a message (wire/unsigned.py builds it; a bad value is a 422)."""
    try:
        return unsigned.unsigned_message(sender, body, created_at)
    except canonical.CanonicalError as exc:
        raise InvalidInput(str(exc), field=exc.field) from None


def message_out(row: sqlite3.Row) -> MessageOut:
    """Render a messages row."""
    to_agent = row["to_agent"]
    return MessageOut(
        id=row["id"],
        record_hash=row["record_hash"],
        from_agent=row["from_agent"],
        to_agent=to_agent,
        message_type=row["message_type"],
        body=row["body"],
        payload=json.loads(row["payload"]),
        dependency_ids=json.loads(row["dependency_ids"]),
        project=row["project"],
        tags=sorted({row["from_agent"]} | ({to_agent} if to_agent else set())),
        authority="raw",
        truth_state="fact",
        confidence=1.0,
        created_at=row["created_at"],
        space=row["space"],
    )


def message_by_id(conn: Conn, message_id: int) -> MessageOut:
    """One stored message, rendered."""
    return message_out(bus_store.message_row(conn, message_id))


def list_messages(conn: Conn, q: MessageQuery, sight: Sight) -> MessagePage:
    """One page of the messages `sight` sees (404 `unknown_space` for a `q.space` it does not): newest or oldest
    first by (created_ms, id), or in arrival order (by id alone).

    A cursor is `<created_ms>.<id>` of the last message of the previous page (node/workflows/store/bus.py reads
    the page and the one row past it).
    """
    if q.space is not None and not sight.sees(q.space):
        raise NotFound("no such space here", field="$.space", code="unknown_space")
    rows = bus_store.message_rows(conn, q, sight)
    more = len(rows) > q.limit
    rows = rows[: q.limit]
    next_cursor = f"{rows[-1]['created_ms']}.{rows[-1]['id']}" if more else None
    return MessagePage(messages=[message_out(r) for r in rows], next_cursor=next_cursor)


def replayed_message(conn: Conn, agent_id: str, idem_key: str) -> int | None:
    """The message an idempotency key already produced; 409 if the key was used for another operation."""
    done = idempotency.replayed(conn, agent_id, idem_key, "message", field=idempotency.HEADER)
    if done is None:
        return None
    return bus_store.message_id(conn, done)
