"""Everything a node's database holds, as text, on either engine: for tests that prove a value left the store
(a redacted or purged body, a secret) by finding it nowhere.

SQLite: `iterdump`, the SQL text that would rebuild the file. PostgreSQL has no such call on a connection: every
row of every table of the schema, each value as text and bytes in hex (`X'...'`), as `iterdump` writes a blob: a
body set aside as bytes for the redaction's grace (`redacted_bodies`, record 69) is no text either dump shows."""

from __future__ import annotations

from typing import Any

from node.store.conn import POSTGRESQL, Conn, engine_of


def dump(conn: Conn) -> str:
    """The whole database behind `conn` as one text, every stored value in it."""
    if engine_of(conn) != POSTGRESQL:
        return "\n".join(conn.iterdump())  # type: ignore[attr-defined]
    tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
    lines = []
    for table in sorted(tables):
        for row in conn.execute(f'SELECT * FROM "{table}"'):
            lines.append(f"{table}: " + " | ".join(_text(value) for value in row))
    return "\n".join(lines)


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return f"X'{bytes(value).hex()}'"
    return str(value)
