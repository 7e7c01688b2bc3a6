"""A serving process's own connection to the node's PostgreSQL database, outside the single writer (record 86).

What several processes of a node must share but that must not wait for the writer's lock, nor make the writer wait
(the nonces of accepted peer signatures, pending key-proof challenges: anyone may send them, a flood of them must
not delay agents' writes), is written here: one autocommit connection per process, on the event loop (psycopg's
asynchronous connection: no hand-off to a thread and back), each statement its own transaction. Opened at its first
statement, opened again after it was lost (a server restart); a statement on a connection that fails is not retried
(whether it committed is unknown), the caller answers 503. Every str bound is escaped as the node's connections
escape it (node/store/pg_conn.py, record 84), so text holding U+0000 reaches no statement as an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from node.store.pg_text import escape_text

if TYPE_CHECKING:
    import psycopg


class SideUnavailable(Exception):
    """The database cannot be reached now (connecting failed, or the connection was lost during the statement)."""


class SideConnection:
    """One autocommit connection of this process to the node's database at `url`, used from the event loop."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.statements = 0  # run so far (what a test or a measurement counts)
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock: asyncio.Lock | None = None

    async def fetch(self, sql: str, params: Sequence[Any] = (), *, again: bool = True) -> list[tuple[Any, ...]]:
        """Run one statement (psycopg's `%s` placeholders) in its own transaction: the rows it returns, or [].

        A connection found lost (the server restarted since its last statement) is opened again and, with `again`,
        the statement run once more: only for a statement whose second run is safe when the first one did commit
        (it then refuses, it never accepts twice). Raises SideUnavailable when the database cannot be reached or
        the connection is lost, node.store.conn's neutral errors for the others."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        bound = [escape_text(p) if isinstance(p, str) else p for p in params]
        async with self._lock:  # one statement at a time on the connection; the first opens it
            try:
                return await self._once(sql, bound)
            except SideUnavailable:
                if not again:
                    raise
            return await self._once(sql, bound)

    async def _once(self, sql: str, bound: list[Any]) -> list[tuple[Any, ...]]:
        import psycopg  # here: a node on SQLite never imports it (node/store/db.py says why)

        from node.store import pg_conn

        conn = self._conn
        if conn is None or conn.closed:
            try:
                conn = self._conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
            except psycopg.OperationalError as exc:
                raise SideUnavailable(str(exc).strip()) from exc
        try:
            cursor = await conn.execute(sql, bound)
            rows = await cursor.fetchall() if cursor.description is not None else []
        except psycopg.OperationalError as exc:
            if conn.closed or conn.broken:
                self._conn = None
                raise SideUnavailable(str(exc).strip()) from exc
            raise pg_conn.neutral_error(exc) from exc
        except psycopg.Error as exc:
            raise pg_conn.neutral_error(exc) from exc
        self.statements += 1
        return [tuple(row) for row in rows]

    async def close(self) -> None:
        """Close the connection (a later statement opens a new one)."""
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            await conn.close()
