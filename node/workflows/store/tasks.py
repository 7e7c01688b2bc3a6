"""Tasks and their dependencies: the `tasks` table (each task as the fold of its events) and `task_deps` (one
row per declared prerequisite), with the ready set, the graph and the cycle check read from them.

node/workflows/records.py writes a task's folded state (`upsert_task_txn`, `replace_deps_txn`, the `unmet`
recounts); node/workflows/tasks.py, graph.py, relay.py and service.py read tasks here and decide.
"""

from __future__ import annotations

import json
import sqlite3
from typing import NamedTuple

from node.entries.queries import seen_by
from node.spaces.sight import Sight
from node.store.conn import POSTGRESQL, Conn, any_of, engine_of

# The ready set: one range of the partial index `tasks_startable` (unmet = 0 AND open = 1), leases checked
# against the reader's clock, then the read rule's condition on `space` ({sight}: `Sight.sql`). INDEXED BY makes a
# plan that cannot use the index an error, not a slow scan.
READY_SQL = (
    "SELECT id, key, title, depends_on, checkpoint, home_node, space FROM tasks INDEXED BY tasks_startable"
    " WHERE unmet = 0 AND open = 1 AND id > ? AND (lease_expires_ms IS NULL OR lease_expires_ms <= ?)"
    " AND {sight} AND (? IS NULL OR space = ?) ORDER BY id LIMIT ?"
)
# READY_SQL on PostgreSQL (record 50): no index hints there (the partial index is chosen from statistics), and the
# optional space typed, since PostgreSQL cannot type a parameter from a NULL test alone.
READY_SQL_PG = (
    "SELECT id, key, title, depends_on, checkpoint, home_node, space FROM tasks"
    " WHERE unmet = 0 AND open = 1 AND id > ? AND (lease_expires_ms IS NULL OR lease_expires_ms <= ?)"
    " AND {sight} AND (CAST(? AS text) IS NULL OR space = ?) ORDER BY id LIMIT ?"
)


def _of_space(conn: Conn, column: str) -> str:
    """`(? IS NULL OR {column} = ?)`: the rows of one space when one is given; its first parameter typed on
    PostgreSQL, which cannot type it from the NULL test alone."""
    test = "CAST(? AS text)" if engine_of(conn) == POSTGRESQL else "?"
    return f"({test} IS NULL OR {column} = ?)"


class TaskRow(NamedTuple):
    """A task's folded state as `upsert_task_txn` writes it (depends_on and checkpoint as JSON text; `open`:
    1 while its status is open). `unmet` is not here: the recounts keep it."""

    id: int
    key: str
    title: str
    status: str
    depends_on: str
    checkpoint: str
    home_node: str
    created_at: str
    updated_at: str
    last_ms: int
    lease_hash: str | None
    lease_holder: str | None
    lease_expires_at: str | None
    lease_expires_ms: int | None
    open: int
    space: str | None = None  # the task's space; None: public (`key` is the scoped key: node/workflows/scope.py)


# ---- reads --------------------------------------------------------------------------------------------------


def task_by(conn: Conn, by: str, value: int | str) -> sqlite3.Row | None:
    """The tasks row whose `by` column (`id`, the local id, or `key`) is `value`, or None."""
    if by not in ("id", "key"):
        raise ValueError(f"tasks are found by id or key, not {by!r}")
    row: sqlite3.Row | None = conn.execute(f"SELECT * FROM tasks WHERE {by} = ?", (value,)).fetchone()
    return row


def task_by_key(conn: Conn, key: str) -> sqlite3.Row | None:
    """The tasks row of `key`, or None."""
    row: sqlite3.Row | None = conn.execute("SELECT * FROM tasks WHERE key = ?", (key,)).fetchone()
    return row


def home_node(conn: Conn, key: str) -> str | None:
    """The home node of task `key` (None when this node holds no such task)."""
    row = conn.execute("SELECT home_node FROM tasks WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def waiting_on(conn: Conn, key: str) -> list[str]:
    """The prerequisites of task `key` that are missing or not done, sorted."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT d.dep_key FROM task_deps d LEFT JOIN tasks u ON u.key = d.dep_key"
            " WHERE d.task_key = ? AND (u.status IS NULL OR u.status NOT IN ('done', 'completed')) ORDER BY 1",
            (key,),
        )
    ]


def ready_rows(
    conn: Conn, now_ms: int, limit: int, after: int | None, sight: Sight, space: str | None = None
) -> list[sqlite3.Row]:
    """Up to `limit + 1` tasks that can start now (open, no unmet dependency, no live lease at `now_ms`) with an
    id above `after` and that `sight` sees (of `space` only, when given), in id order: one more than a page, so
    the caller sees whether there is more.

    `tasks_startable` is a partial index over exactly the first two conditions, so the scan touches only
    startable tasks and filters the (few) leased ones and those of spaces the reader does not see (READY_SQL).
    """
    ready = READY_SQL_PG if engine_of(conn) == POSTGRESQL else READY_SQL
    sql = ready.format(sight=seen_by(conn, sight, "space"))
    return conn.execute(sql, (after if after is not None else -1, now_ms, space, space, limit + 1)).fetchall()


def held_keys(conn: Conn, scoped_keys: list[str]) -> set[str]:
    """Which of these scoped keys name a task held here."""
    test, listed = any_of(conn, scoped_keys)
    rows = conn.execute(f"SELECT key FROM tasks WHERE key {test}", (listed,)).fetchall()
    return {str(r[0]) for r in rows}


def reaches(conn: Conn, depends_on: list[str], key: str) -> bool:
    """Whether task `key` is reachable from any of `depends_on` along the stored dependencies."""
    listed: list[str] | str
    if engine_of(conn) == POSTGRESQL:  # the seed list as an array (record 50), collated as the keys are
        seed, listed = 'SELECT unnest(CAST(? AS text[])) COLLATE "C"', depends_on
    else:
        seed, listed = "SELECT value FROM json_each(?)", json.dumps(depends_on)
    row = conn.execute(
        f"WITH RECURSIVE reach(k) AS ({seed}"
        "   UNION SELECT d.dep_key FROM task_deps d JOIN reach r ON d.task_key = r.k)"
        " SELECT 1 FROM reach WHERE k = ? LIMIT 1",
        (listed, key),
    ).fetchone()
    return row is not None


def graph_tasks(conn: Conn, limit: int, sight: Sight, space: str | None = None) -> list[sqlite3.Row]:
    """Up to `limit + 1` tasks that `sight` sees (of `space` only, when given) in id order for drawing (one more
    than asked, so the caller sees a truncation), each with `identity`: the hash of its key's earliest declaration
    (NULL when none is stored)."""
    return conn.execute(
        "SELECT id, key, title, status, unmet, lease_holder, lease_expires_ms, space, (SELECT e.hash FROM"
        "   task_events e WHERE e.task_key = tasks.key AND e.event = 'declare' ORDER BY e.created_ms, e.hash"
        f"   LIMIT 1) AS identity FROM tasks WHERE {seen_by(conn, sight, 'space')} AND {_of_space(conn, 'space')}"
        " ORDER BY id LIMIT ?",
        (space, space, limit + 1),
    ).fetchall()


def graph_edges(
    conn: Conn, last_id: int, sight: Sight, space: str | None = None
) -> list[tuple[str, str, int | None, int]]:
    """The `precedes` edges into the tasks up to id `last_id` that `sight` sees (of `space` only, when given; a
    prerequisite is of its task's space): (prerequisite scoped key, task scoped key, prerequisite id or None when
    it is not declared, task id), by task id then prerequisite key."""
    return [
        (e[0], e[1], e[2], e[3])
        for e in conn.execute(
            "SELECT d.dep_key, t.key, u.id, t.id FROM tasks t JOIN task_deps d ON d.task_key = t.key"
            f" LEFT JOIN tasks u ON u.key = d.dep_key WHERE t.id <= ? AND {seen_by(conn, sight, 't.space')}"
            f" AND {_of_space(conn, 't.space')} ORDER BY t.id, d.dep_key",
            (last_id, space, space),
        )
    ]


# ---- writes (the fold's, on the writer thread) ----------------------------------------------------------------


def upsert_task_txn(conn: Conn, row: TaskRow) -> None:
    """Write a task's folded state (a new task starts with `unmet` 0: the recounts set it)."""
    conn.execute(
        "INSERT INTO tasks (id, key, title, status, depends_on, checkpoint, home_node, created_at, updated_at,"
        " last_ms, lease_hash, lease_holder, lease_expires_at, lease_expires_ms, unmet, open, space)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)"
        " ON CONFLICT (key) DO UPDATE SET title = excluded.title, status = excluded.status,"
        "   depends_on = excluded.depends_on, checkpoint = excluded.checkpoint, home_node = excluded.home_node,"
        "   created_at = excluded.created_at, updated_at = excluded.updated_at, last_ms = excluded.last_ms,"
        "   lease_hash = excluded.lease_hash, lease_holder = excluded.lease_holder,"
        "   lease_expires_at = excluded.lease_expires_at, lease_expires_ms = excluded.lease_expires_ms,"
        "   open = excluded.open",
        row,
    )


def replace_deps_txn(conn: Conn, key: str, depends_on: list[str]) -> None:
    """Replace the dependency rows of task `key` with `depends_on`."""
    conn.execute("DELETE FROM task_deps WHERE task_key = ?", (key,))
    conn.executemany("INSERT INTO task_deps (task_key, dep_key) VALUES (?, ?)", [(key, dep) for dep in depends_on])


def recount_task_txn(conn: Conn, key: str) -> None:
    """Recompute `unmet` (dependencies missing or not done) of task `key`."""
    _recount(conn, "key = ?", key)


def recount_dependents_txn(conn: Conn, key: str) -> None:
    """Recompute `unmet` of every task that depends on `key`."""
    _recount(conn, "key IN (SELECT task_key FROM task_deps WHERE dep_key = ?)", key)


def _recount(conn: Conn, where: str, key: str) -> None:
    """Recompute `unmet` for the tasks selected by `where`."""
    conn.execute(
        "UPDATE tasks SET unmet = (SELECT count(*) FROM task_deps d LEFT JOIN tasks u ON u.key = d.dep_key"
        "   WHERE d.task_key = tasks.key AND (u.status IS NULL OR u.status NOT IN ('done', 'completed')))"
        f" WHERE {where}",
        (key,),
    )


def delete_task_txn(conn: Conn, key: str) -> None:
    """Take task `key` out of the graph (every event of it is void), and recount the tasks depending on it."""
    conn.execute("DELETE FROM task_deps WHERE task_key = ?", (key,))
    conn.execute("DELETE FROM tasks WHERE key = ?", (key,))
    recount_dependents_txn(conn, key)
