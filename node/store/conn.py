"""The connection a store function is given: the part of a DB-API connection that the store modules use.

Store functions (the SQL of each feature, in its store module: docs/architecture.md, "Where SQL lives") take a
`Conn`, not `sqlite3.Connection`, so a second engine (the PostgreSQL issues) implements the same functions on its
own connection without touching the services that call them. What is SQLite's alone lives in two modules: the
connection's pragmas, the registered functions and the progress handler behind quick reads in node/store/db.py;
the operator's statements (`PRAGMA user_version`, `integrity_check`, `table_info`, `wal_checkpoint`, the backup's
journal mode) in node/ops/store.py. docs/decisions.md record 50 lists every one, with its PostgreSQL equivalent.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol


class Cursor(Protocol):
    """The result of `Conn.execute`: rows by index or by column name (sqlite3.Row), and the statement's counts."""

    @property
    def rowcount(self) -> int: ...

    @property
    def lastrowid(self) -> int | None: ...

    @property
    def description(self) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    """A connection a store function runs statements on (a write job's, a reader's or a quick read's)."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Cursor: ...
