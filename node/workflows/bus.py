"""The message bus: building message records and reading the log of messages. Nothing here deletes."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from identity import canonical
from node.errors import InvalidInput
from node.store import idempotency
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
    )


def message_by_id(conn: sqlite3.Connection, message_id: int) -> MessageOut:
    row = conn.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
    return message_out(row)


def list_messages(conn: sqlite3.Connection, q: MessageQuery) -> MessagePage:
    """One page of messages: newest or oldest first by (created_ms, id), or in arrival order (by id alone).

    An agent filter walks `message_agents` (both ends of every message) by its primary key. A cursor is
    `<created_ms>.<id>` of the last message of the previous page; arrival order reads only its id.
    """
    newest = q.order == "newest"
    arrival = q.order == "arrival"
    if q.agent is not None:
        sql = "SELECT m.* FROM message_agents a JOIN messages m ON m.id = a.message_id WHERE a.agent_id = ?"
        params: list[Any] = [q.agent]
        time_col, id_col = "a.created_ms", "a.message_id"
    else:
        sql = "SELECT m.* FROM messages m WHERE 1 = 1"
        params = []
        time_col, id_col = "m.created_ms", "m.id"
    if q.project is not None:
        sql += " AND m.project = ?"
        params.append(q.project)
    if q.message_type is not None:
        sql += " AND m.message_type = ?"
        params.append(q.message_type)
    if q.cursor is not None:
        ms, _, last_id = q.cursor.partition(".")
        if arrival:
            sql += f" AND {id_col} > ?"
            params.append(int(last_id))
        else:
            sql += f" AND ({time_col}, {id_col}) {'<' if newest else '>'} (?, ?)"
            params += [int(ms), int(last_id)]
    direction = "DESC" if newest else "ASC"
    order_by = id_col if arrival else f"{time_col} {direction}, {id_col}"
    sql += f" ORDER BY {order_by} {direction} LIMIT ?"
    params.append(q.limit + 1)
    rows = conn.execute(sql, params).fetchall()
    more = len(rows) > q.limit
    rows = rows[: q.limit]
    next_cursor = f"{rows[-1]['created_ms']}.{rows[-1]['id']}" if more else None
    return MessagePage(messages=[message_out(r) for r in rows], next_cursor=next_cursor)


def replayed_message(conn: sqlite3.Connection, agent_id: str, idem_key: str) -> int | None:
    """The message an idempotency key already produced; 409 if the key was used for another operation."""
    done = idempotency.replayed(conn, agent_id, idem_key, "message", field=idempotency.HEADER)
    if done is None:
        return None
    return int(conn.execute("SELECT id FROM messages WHERE record_hash = ?", (done,)).fetchone()[0])
