"""The PostgreSQL `Conn` (node/store/conn.py): store functions written for SQLite's sqlite3 run on psycopg 3.

What it translates, so a store function's SQL and its reading of rows stay as they are where the SQL is portable
(docs/decisions.md records 50 and 76):

- placeholders: `?` becomes `%s`, `?NNN` and `:name` become `%(pNNN)s` and `%(name)s`, outside quoted strings,
  quoted identifiers, comments and dollar quotes, and `::` casts are left alone; a literal `%` is doubled for psycopg;
- rows: `Row`, by index or by column name (case-insensitive, as sqlite3.Row), `keys()`, equal to a tuple of the
  same values;
- `lastrowid`: the first column of the last row an `INSERT ... RETURNING` gave (PostgreSQL has no rowid, and an
  identity may leave gaps, so seqs are never computed from it); None for any other statement;
- errors: psycopg's SQLSTATE classes become node.store.conn's engine-neutral ones (`UniqueViolation`, ...), which
  the sqlite3 handlers of today's store code also catch;
- Python booleans are bound as 0/1 integers: the schema keeps SQLite's 0/1 integer columns;
- text may hold U+0000, which a PostgreSQL text value cannot: every str bound is escaped (U+0000 as U+0001 U+0001,
  U+0001 as U+0001 U+0002) and every text a row reads is unescaped, so a peer's record with a NUL is stored and answered
  as on SQLite, equality, prefix LIKE and COLLATE "C" order kept (docs/decisions.md record 84).

The connection is in autocommit mode, as the node's sqlite3 connections are: transactions are explicit
(`BEGIN`/`COMMIT`/`SAVEPOINT` statements, or `PgConn.raw.transaction()`).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import psycopg
from psycopg.adapt import Buffer, Dumper
from psycopg.pq import Format, TransactionStatus
from psycopg.rows import RowMaker

from node.store import conn as neutral
from node.store.pg_text import ESCAPE, escape_text, unescape_text

if TYPE_CHECKING:
    from node.store.projections import Log


class Row:
    """A result row read by index, slice or column name (case-insensitive), like sqlite3.Row."""

    __slots__ = ("_index", "_values")

    def __init__(self, index: Mapping[str, int], values: tuple[Any, ...]) -> None:
        self._index, self._values = index, values

    def __getitem__(self, key: int | str | slice) -> Any:
        if isinstance(key, str):
            try:
                return self._values[self._index[key.lower()]]
            except KeyError:
                raise IndexError(f"no column named {key!r}") from None
        return self._values[key]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def keys(self) -> list[str]:
        """The column names, in order."""
        return list(self._index)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Row):
            return tuple(self) == tuple(other) and self.keys() == other.keys()
        if isinstance(other, tuple):
            return self._values == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return f"Row({dict(zip(self._index, self._values, strict=True))!r})"


def _rows(cursor: psycopg.Cursor[Any]) -> RowMaker[Row]:
    """psycopg's row factory: one name index per result, shared by its rows."""
    description = cursor.description or []
    index: dict[str, int] = {}
    for i, column in enumerate(description):
        index.setdefault(column.name.lower(), i)  # the first of two same-named columns, as sqlite3.Row

    texts = [i for i, column in enumerate(description) if column.type_code in _TEXT_OIDS]
    if not texts:

        def make(values: Sequence[Any]) -> Row:
            return Row(index, tuple(values))

        return make

    def make_unescaped(values: Sequence[Any]) -> Row:
        row = tuple(values)
        for i in texts:  # each text read unescaped (record 84): one test per text value, no call unless escaped
            value = row[i]
            if value is not None and ESCAPE in value:
                return Row(index, tuple(_unescaped(row, texts)))
        return Row(index, row)

    return make_unescaped


class _BoolAsInt(Dumper):
    """Bind True/False as 1/0: the schema's booleans are SQLite's 0/1 integer columns."""

    oid = psycopg.adapters.types["int8"].oid

    def dump(self, obj: Any) -> bytes:
        """The integer's text form."""
        return b"1" if obj else b"0"


def _unescaped(row: tuple[Any, ...], texts: list[int]) -> Iterator[Any]:
    """`row`'s values, those at `texts` (text columns) unescaped."""
    for i, value in enumerate(row):
        yield unescape_text(value) if i in texts and value is not None else value


class _EscapingStr(Dumper):
    """A str bound as psycopg's default does (text format, the unknown oid: the server infers the type), escaped."""

    oid = 0  # psycopg's StrDumperUnknown's

    def dump(self, obj: str) -> Buffer:
        """The escaped text, UTF-8 encoded (the node's databases are UTF8: `_utf8_only`)."""
        return escape_text(obj).encode()


class _EscapingStrBinary(_EscapingStr):
    """A str bound in binary format (`%b`), escaped; typed text."""

    format = Format.BINARY
    oid = psycopg.adapters.types["text"].oid


# the result types a row's text comes in (705: unknown, a bare literal's), whose values `_rows` unescapes
_TEXT_OIDS = frozenset(psycopg.adapters.types[name].oid for name in ("text", "varchar", "bpchar")) | {705}


def _escape_text_on(raw: psycopg.Connection[Row]) -> None:
    """Register the escaping dumpers on the node connection `raw` (its AUTO format for str: the text dumper,
    registered last); `_rows` unescapes what it reads (psycopg's C loaders kept: a Python loader costs a call per
    text value, measured 1.6 times a plain read)."""
    _utf8_only(raw)
    raw.adapters.register_dumper(str, _EscapingStrBinary)
    raw.adapters.register_dumper(str, _EscapingStr)


def _utf8_only(raw: psycopg.Connection[Row]) -> None:
    """Refuse a database not in UTF8 (a cluster made without a UTF-8 locale makes SQL_ASCII ones, which take any
    bytes), naming its encoding and the remedy; and a connection whose client encoding is not UTF-8 (the escaping
    dumps and loads UTF-8)."""
    server = raw.info.parameter_status("server_encoding")  # None from a server that does not report it
    encoding = raw.info.encoding
    if server is not None and server.upper() != "UTF8":
        database = raw.info.dbname
        raw.close()
        raise neutral.OperationalError(
            f"the node's PostgreSQL database must be in UTF8; {database} is in {server}: create it with"
            f" CREATE DATABASE \"{database}\" ENCODING 'UTF8' TEMPLATE template0 (or initdb --encoding=UTF8)"
        )
    if encoding.replace("-", "").lower() != "utf8":
        raw.close()
        raise neutral.OperationalError(f"the node's PostgreSQL connection must use UTF-8, not {encoding}")


# ---- placeholders --------------------------------------------------------------------------------------------

_DOLLAR_TAG = re.compile(r"\$[A-Za-z_]*\$")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"[0-9]+")


class Translated:
    """A statement in psycopg's form: `sql` and how it binds (`style`: None, "qmark", "numbered" or "named")."""

    __slots__ = ("returning", "sql", "style")

    def __init__(self, sql: str, style: str | None, returning: bool) -> None:
        self.sql, self.style, self.returning = sql, style, returning


_RETURNING = re.compile(r"^\s*(WITH\b.*\b)?INSERT\b.*\bRETURNING\b", re.IGNORECASE | re.DOTALL)


CACHED_UP_TO = 4096  # characters: longer statements (a many-row INSERT) are translated each time, not kept


def translate(sql: str) -> Translated:
    """`sql` in psycopg's form (`translate_uncached`), from a cache when it is short enough to keep."""
    return _translate_cached(sql) if len(sql) <= CACHED_UP_TO else translate_uncached(sql)


@functools.lru_cache(maxsize=2048)
def _translate_cached(sql: str) -> Translated:
    return translate_uncached(sql)


def translate_uncached(sql: str) -> Translated:
    """`sql` with sqlite3's placeholders (`?`, `:name`) as psycopg's (`%s`, `%(name)s`); quoted text, quoted
    identifiers, comments and dollar-quoted bodies keep their `?` and `:`; `%` is doubled everywhere (psycopg reads
    it even inside quotes). A statement with no placeholder is returned unchanged (psycopg then reads no `%`).
    Raises ValueError for a statement that mixes the two styles."""
    out: list[str] = []
    styles: set[str] = set()
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        end = _quoted_end(sql, i)
        if end is not None:
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif c == "?" and (number := _NUMBER.match(sql, i + 1)) is not None:  # ?NNN: the NNNth parameter
            out.append(f"%(p{int(number.group())})s")
            styles.add("numbered")
            i = number.end()
        elif c == "?":
            out.append("%s")
            styles.add("qmark")
            i += 1
        elif c == ":" and sql.startswith("::", i):
            out.append("::")
            i += 2
        elif c == ":" and (name := _NAME.match(sql, i + 1)) is not None:
            out.append(f"%({name.group()})s")
            styles.add("named")
            i = name.end()
        else:
            out.append("%%" if c == "%" else c)
            i += 1
    if len(styles) > 1:
        raise ValueError(f"a statement mixes placeholder styles (?, ?NNN, :name): {sql[:200]!r}")
    returning = bool(_RETURNING.match(sql))
    if not styles:
        return Translated(sql, None, returning)
    return Translated("".join(out), styles.pop(), returning)


def _quoted_end(sql: str, i: int) -> int | None:
    """Where the quoted string, quoted identifier, comment or dollar-quoted body starting at `i` ends (None: none
    starts there). An unterminated one runs to the end of the statement (the server reports it)."""
    c = sql[i]
    if c in "'\"":
        close = sql.find(c, i + 1)
        return len(sql) if close < 0 else close + 1  # '' inside a string: two strings back to back, the same text
    if sql.startswith("--", i):
        close = sql.find("\n", i)
        return len(sql) if close < 0 else close + 1
    if sql.startswith("/*", i):
        close = sql.find("*/", i + 2)
        return len(sql) if close < 0 else close + 2
    if c == "$" and (tag := _DOLLAR_TAG.match(sql, i)) is not None:
        close = sql.find(tag.group(), tag.end())
        return len(sql) if close < 0 else close + len(tag.group())
    return None


# ---- errors --------------------------------------------------------------------------------------------------

_BY_SQLSTATE: dict[str, type[neutral.DatabaseError]] = {
    "23505": neutral.UniqueViolation,
    "23502": neutral.NotNullViolation,
    "23514": neutral.CheckViolation,
    "23503": neutral.ForeignKeyViolation,
    "42P01": neutral.UndefinedTable,
    "57P01": neutral.ConnectionLost,  # admin_shutdown: the server is stopping (`pg_ctl stop -m fast`, a failover)
    "57P02": neutral.ConnectionLost,  # crash_shutdown
    "57P03": neutral.ConnectionLost,  # cannot_connect_now: the server is starting
}
_BY_CLASS: dict[str, type[neutral.DatabaseError]] = {
    "23": neutral.IntegrityError,
    "22": neutral.DataError,
    "42": neutral.OperationalError,  # syntax and names: SQLite raises OperationalError for these too
    "40": neutral.OperationalError,  # serialization failure, deadlock
    "53": neutral.OperationalError,  # insufficient resources (a full disk: 53100)
    "57": neutral.OperationalError,  # the server shut down or cancelled the statement
    "08": neutral.ConnectionLost,  # the connection is gone
}


def neutral_error(exc: psycopg.Error) -> neutral.DatabaseError:
    """The engine-neutral error (node.store.conn) for a psycopg error, carrying its SQLSTATE and message."""
    state = exc.sqlstate
    kind: type[neutral.DatabaseError] = neutral.DatabaseError
    if state is not None:
        kind = _BY_SQLSTATE.get(state) or _BY_CLASS.get(state[:2], neutral.DatabaseError)
    elif isinstance(exc, psycopg.OperationalError):  # no SQLSTATE: libpq's own failure, the connection's
        kind = neutral.ConnectionLost
    error = kind(str(exc).strip())
    error.sqlstate = state
    return error


# ---- the connection ------------------------------------------------------------------------------------------


class PgCursor:
    """The result of `PgConn.execute`: node.store.conn's `Cursor` over a psycopg cursor."""

    __slots__ = ("_buffer", "_cursor", "lastrowid")

    def __init__(self, cursor: psycopg.Cursor[Row], returning: bool) -> None:
        self._cursor = cursor
        self._buffer: list[Row] | None = None
        self.lastrowid: int | None = None
        if returning and cursor.description is not None:
            self._buffer = cursor.fetchall()
            if self._buffer:
                last = self._buffer[-1][0]
                self.lastrowid = last if isinstance(last, int) else None
            self._buffer.reverse()  # rows are handed out from the end

    @property
    def rowcount(self) -> int:
        """Rows the statement inserted, changed or deleted (rows returned for a SELECT)."""
        return self._cursor.rowcount

    @property
    def description(self) -> Any:
        """The result's columns (`column[0]` is the name), None for a statement without a result."""
        return self._cursor.description

    def fetchone(self) -> Any:
        """The next row (a `Row`), None at the end (or when the statement has no result, as sqlite3); typed Any as
        sqlite3's, so a store function indexes it without a check the SQL already makes."""
        if self._buffer is not None:
            return self._buffer.pop() if self._buffer else None
        if self._cursor.description is None:
            return None
        return self._cursor.fetchone()

    def fetchall(self) -> list[Row]:
        """The rows not read yet ([] when the statement has no result)."""
        if self._buffer is not None:
            rows, self._buffer = self._buffer[::-1], []
            return rows
        if self._cursor.description is None:
            return []
        return self._cursor.fetchall()

    def __iter__(self) -> Iterator[Row]:
        return iter(self.fetchall())

    def last_result(self) -> Any:
        """The first row of the last statement of a script run by one `execute` without parameters (PostgreSQL's
        simple protocol hands back one result per statement; this cursor stands on the first): PG_BEGIN_WRITE's
        write clock (node/store/db.py). None when that statement returns no row."""
        while self._cursor.nextset():
            pass
        return self._cursor.fetchone() if self._cursor.description is not None else None


class PgConn:
    """A node connection to PostgreSQL: node.store.conn's `Conn`, carrying the log its writes project through (as
    node.store.db.Connection does; None: it can neither append nor rebuild)."""

    engine = neutral.POSTGRESQL  # node.store.conn.engine_of

    def __init__(self, raw: psycopg.Connection[Row], log: Log | None = None) -> None:
        self.raw, self.log = raw, log

    def execute(self, sql: str, parameters: Any = None, /) -> PgCursor:
        """Run one statement with sqlite3-style placeholders and parameters."""
        statement = translate(sql)
        try:
            cursor = self.raw.cursor()  # raises when the connection is closed: a neutral error too
            cursor.execute(statement.sql, _bound(statement, parameters))
            return PgCursor(cursor, statement.returning)
        except psycopg.Error as exc:
            raise neutral_error(exc) from exc

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> PgCursor:
        """Run one statement once per parameter set; `rowcount` is the total."""
        statement = translate(sql)
        try:
            cursor = self.raw.cursor()
            cursor.executemany(statement.sql, [_bound(statement, p) for p in parameters])
            return PgCursor(cursor, False)
        except psycopg.Error as exc:
            raise neutral_error(exc) from exc

    def executescript(self, script: str) -> None:
        """Run a script of statements as written (no placeholders): a migration."""
        try:
            self.raw.execute(script.encode())  # bytes: psycopg reads no placeholders in it
        except psycopg.Error as exc:
            raise neutral_error(exc) from exc

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (a failed one included, until its ROLLBACK). Not on a closed connection:
        the server ended its transaction with it (a ROLLBACK there could only fail)."""
        return not self.raw.closed and self.raw.info.transaction_status != TransactionStatus.IDLE

    def aborted(self) -> bool:
        """Whether the open transaction failed and PostgreSQL aborted it (a statement's error was caught and the
        block went on): its COMMIT would roll back without an error."""
        return self.raw.info.transaction_status == TransactionStatus.INERROR

    def close(self) -> None:
        """Close the connection (an open transaction is rolled back by the server)."""
        self.raw.close()


class StatementTimer(Protocol):
    """What times a connection's statements (node/store/db.py's `WriterStats`)."""

    def count(self, wall: float, cpu: float) -> None:
        """Count one statement begun at `wall` (perf_counter) and `cpu` (thread_time)."""


class TimedPgConn(PgConn):
    """The writer's connection to PostgreSQL, its statements counted into `stats` as node/store/db.py's
    `TimedConnection` counts SQLite's (each statement is a round trip)."""

    def __init__(self, raw: psycopg.Connection[Row], log: Log | None, stats: StatementTimer) -> None:
        super().__init__(raw, log)
        self.stats = stats

    def execute(self, sql: str, parameters: Any = None, /) -> PgCursor:
        """`PgConn.execute`, timed."""
        stats, wall, cpu = self.stats, time.perf_counter(), time.thread_time()
        try:
            return super().execute(sql, parameters)
        finally:
            stats.count(wall, cpu)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> PgCursor:
        """`PgConn.executemany`, timed."""
        stats, wall, cpu = self.stats, time.perf_counter(), time.thread_time()
        try:
            return super().executemany(sql, parameters)
        finally:
            stats.count(wall, cpu)


def _bound(statement: Translated, parameters: Any) -> Any:
    if statement.style is None:
        if parameters:
            raise neutral.ProgrammingError(f"{len(parameters)} parameters for a statement without placeholders")
        return None
    if statement.style == "named":
        if not isinstance(parameters, Mapping):
            raise neutral.ProgrammingError("a statement with :name placeholders needs a mapping of parameters")
        return parameters
    if isinstance(parameters, Mapping) or parameters is None:
        raise neutral.ProgrammingError("a statement with ? placeholders needs a sequence of parameters")
    if statement.style == "numbered":
        return {f"p{n}": value for n, value in enumerate(parameters, start=1)}
    return list(parameters)


def connect(url: str, *, log: Log | None = None) -> PgConn:
    """Open a node connection to the PostgreSQL database at `url` (a libpq connection string or URI), in
    autocommit mode (transactions are explicit), carrying `log`."""
    try:
        raw = psycopg.connect(url, autocommit=True, row_factory=_rows)
    except psycopg.Error as exc:
        raise neutral_error(exc) from exc
    raw.adapters.register_dumper(bool, _BoolAsInt)
    _escape_text_on(raw)
    return PgConn(raw, log)
