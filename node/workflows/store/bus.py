"""The message bus's tables: `messages` (one row per message record) and `message_agents` (both ends of each).

node/workflows/records.py projects message records in with `insert_message_txn`; node/workflows/bus.py reads
them back and renders them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any, NamedTuple

from node.spaces.sight import Sight
from node.store.conn import POSTGRESQL, Conn, any_of, engine_of
from wire.workflows import MessageQuery


class MessageRow(NamedTuple):
    """A `messages` row, in column order (payload and dependency_ids as JSON text)."""

    id: int
    record_hash: str
    from_agent: str
    to_agent: str | None
    message_type: str
    body: str
    payload: str
    dependency_ids: str
    project: str | None
    created_at: str
    created_ms: int
    signature: str
    space: str | None = None  # the space it was sent in; None: public


def insert_message_txn(conn: Conn, row: MessageRow, agents: Iterable[str], addresses: Iterable[str] = ()) -> None:
    """Store one message and index it under each agent it names (`agents`: its sender and recipient) and each of its
    dependencies that may be a record's address (`addresses`: `message_dependencies`)."""
    conn.execute(
        "INSERT INTO messages (id, record_hash, from_agent, to_agent, message_type, body, payload, dependency_ids,"
        " project, created_at, created_ms, signature, space) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        row,
    )
    # INSERT OR IGNORE is ON CONFLICT DO NOTHING on PostgreSQL (record 50): the rows are never NULL, so only a
    # repeated end or address is skipped on either engine
    pg = engine_of(conn) == POSTGRESQL
    conn.executemany(
        "INSERT INTO message_agents (agent_id, created_ms, message_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
        if pg
        else "INSERT OR IGNORE INTO message_agents (agent_id, created_ms, message_id) VALUES (?, ?, ?)",
        [(agent, row.created_ms, row.id) for agent in agents],
    )
    conn.executemany(
        "INSERT INTO message_dependencies (address, message_id) VALUES (?, ?) ON CONFLICT DO NOTHING"
        if pg
        else "INSERT OR IGNORE INTO message_dependencies (address, message_id) VALUES (?, ?)",
        [(address, row.id) for address in addresses],
    )


def message_row(conn: Conn, message_id: int) -> sqlite3.Row:
    """The `messages` row of one stored message (the caller knows it is stored)."""
    row: sqlite3.Row = conn.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
    return row


def message_id(conn: Conn, record_hash: str) -> int:
    """The id of the stored message whose record is `record_hash` (the caller knows it is stored)."""
    return int(conn.execute("SELECT id FROM messages WHERE record_hash = ?", (record_hash,)).fetchone()[0])


def message_rows(conn: Conn, q: MessageQuery, sight: Sight) -> list[sqlite3.Row]:
    """Up to `q.limit + 1` messages rows that `sight` sees (one more than a page, so the caller sees whether there is
    more), of `q.space` only when it names one (the caller has checked `sight` sees it): newest or oldest first by
    (created_ms, id), or in arrival order (by id alone).

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
    if not sight.everything:
        sql += f" AND {sight.sql('m.space')}"
    if q.space is not None:
        sql += " AND m.space = ?"
        params.append(q.space)
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
    return conn.execute(sql, params).fetchall()


def delete_message_txn(conn: Conn, message_id: int) -> None:
    """Take one message out of the bus tables (its record was flagged void: node/store/void.py)."""
    conn.execute("DELETE FROM message_agents WHERE message_id = ?", (message_id,))
    conn.execute("DELETE FROM message_dependencies WHERE message_id = ?", (message_id,))
    conn.execute("DELETE FROM messages WHERE id = ?", (message_id,))


class Dependent(NamedTuple):
    """A message in the bus whose dependencies name `named`."""

    seq: int
    hash: str
    author_id: str
    space: str | None
    named: str


def dependents_of(conn: Conn, addresses: Iterable[str]) -> list[Dependent]:
    """The messages in the bus (not flagged void: a flagged one has left it) whose dependencies name one of
    `addresses`, in log order, once per address named."""
    test, listed = any_of(conn, sorted(set(addresses)))
    rows = conn.execute(
        "SELECT m.id, m.record_hash, m.from_agent, m.space, d.address FROM message_dependencies d"
        f" JOIN messages m ON m.id = d.message_id WHERE d.address {test} ORDER BY m.id",
        (listed,),
    ).fetchall()
    return [Dependent(int(r[0]), str(r[1]), str(r[2]), r[3], str(r[4])) for r in rows]
