"""The connection a store function is given: the part of a DB-API connection that the store modules use.

Store functions (the SQL of each feature, in its store module: docs/architecture.md, "Where SQL lives") take a
`Conn`, not `sqlite3.Connection`, so a second engine (the PostgreSQL issues) implements the same functions on its
own connection without touching the services that call them. What is SQLite's alone lives in two modules: the
connection's pragmas, the registered functions and the progress handler behind quick reads in node/store/db.py;
the operator's statements (`PRAGMA user_version`, `integrity_check`, `table_info`, `wal_checkpoint`, the backup's
journal mode) in node/ops/store.py. docs/decisions.md record 50 lists every one, with its PostgreSQL equivalent.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from sync.store import StoreUnavailable


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


SQLITE = "sqlite"
POSTGRESQL = "postgresql"


def engine_of(conn: Conn) -> str:
    """The engine `conn` runs on, `SQLITE` or `POSTGRESQL`: a store module chooses its engine-specific statements
    by it (docs/decisions.md records 50 and 76). The PostgreSQL `Conn` says so (`engine`); anything else is SQLite."""
    return POSTGRESQL if getattr(conn, "engine", None) == POSTGRESQL else SQLITE


def any_of(conn: Conn, values: Iterable[Any], placeholder: str = "?") -> tuple[str, Any]:
    """A list as one parameter, the way each engine takes it: `(test, parameter)` where `f"column {test}"` is true
    for a column equal to one of `values` and `parameter` binds its one `placeholder` (`?`, or `:name` for a
    statement of named parameters). SQLite reads a JSON array (`IN (SELECT value FROM json_each(?))`, the store's
    form until now); PostgreSQL an array (`= ANY(?)`: record 50)."""
    listed = list(values)
    if engine_of(conn) == POSTGRESQL:
        return f"= ANY({placeholder})", listed
    return f"IN (SELECT value FROM json_each({placeholder}))", json.dumps(listed)


# ---- errors, told apart the same way on both engines -----------------------------------------------------------
#
# Store code written for SQLite catches sqlite3's classes (`except sqlite3.IntegrityError`). The PostgreSQL `Conn`
# (node/store/pg_conn.py) raises these instead, each a subclass of the sqlite3 class the same failure raises on
# SQLite, so such a handler catches it on either engine; the finer classes (a unique violation, a missing table) are
# PostgreSQL's SQLSTATE classes, and `is_unique_violation` asks the question of either engine's error.
# docs/decisions.md record 76.


# PostgreSQL's SQLSTATEs the node tells apart (a `DatabaseError`'s `sqlstate`)
LOCK_NOT_AVAILABLE = "55P03"  # a lock waited for past `lock_timeout`
QUERY_CANCELED = "57014"  # `statement_timeout` passed, or the statement was cancelled
IN_FAILED_TRANSACTION = "25P02"  # a statement after an error, before the transaction ended
DEADLOCK_DETECTED = "40P01"


class DatabaseError(sqlite3.DatabaseError):
    """A statement failed on the PostgreSQL store; `sqlstate` is PostgreSQL's five-character code (None: unknown)."""

    sqlstate: str | None = None


class IntegrityError(DatabaseError, sqlite3.IntegrityError):
    """A constraint refused the statement (SQLSTATE class 23)."""


class UniqueViolation(IntegrityError):
    """A unique or primary key constraint refused a row (23505)."""


class NotNullViolation(IntegrityError):
    """A NULL in a NOT NULL column (23502)."""


class CheckViolation(IntegrityError):
    """A CHECK constraint refused a row (23514)."""


class ForeignKeyViolation(IntegrityError):
    """A foreign key refused a row (23503)."""


class OperationalError(DatabaseError, sqlite3.OperationalError):
    """The statement could not run: a syntax error, a lock or serialization failure, the server gone."""


class ConnectionLost(OperationalError, StoreUnavailable):
    """The connection to the PostgreSQL server is gone or could not be made (SQLSTATE class 08, a server shutting
    down or starting, 57P01-57P03, or a client-side failure without a SQLSTATE): the statement did not run here, and
    a later one on a new connection may. HTTP answers it 503 (node/web/http.py), as a client may try again."""


class UndefinedTable(OperationalError):
    """No such table (42P01): SQLite's "no such table" is an OperationalError too."""


class ProgrammingError(DatabaseError, sqlite3.ProgrammingError):
    """The statement was called wrongly: parameters that do not match its placeholders."""


class DataError(DatabaseError, sqlite3.DataError):
    """A value the column's type cannot hold (SQLSTATE class 22)."""


_SQLITE_UNIQUE = {sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY}


def is_unique_violation(exc: BaseException) -> bool:
    """Whether `exc` is a unique or primary key violation, on either engine."""
    if isinstance(exc, UniqueViolation):
        return True
    return isinstance(exc, sqlite3.IntegrityError) and getattr(exc, "sqlite_errorcode", None) in _SQLITE_UNIQUE
