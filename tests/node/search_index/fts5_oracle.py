"""The SQLite FTS5 search the node had before issue 24, kept as the oracle the search index is compared with.

The node no longer has an FTS5 table (migration 0021 dropped it). `build` copies a node's entries and their tags
(from either store) into an in-memory SQLite database and creates there the table migration 0001 had, filled from
`entries`; `search_ids` runs the query the node's search ran on it, with the node's parsed clauses rendered as FTS5
(each word and phrase quoted from its folded tokens, a prefix's star outside the quotes), ANDed.
"""

from __future__ import annotations

import json
import sqlite3
import unicodedata
from typing import Any

from node.search_index.query import Clause, parse
from node.store.conn import Conn
from wire.api import SearchQuery


def fts5_term(clause: Clause) -> str:
    """A clause as an FTS5 MATCH term (the tokens hold token characters only, so quoting is safe)."""
    return f'"{" ".join(clause.tokens)}"' + ("*" if clause.prefix else "")


def fts_query(q: str) -> str | None:
    """A search's text as a safe FTS5 query: the node's clauses (node/search_index/query.py), ANDed; None if none.

    Raises InvalidInput as the node does (a one-character prefix). FTS5 does not cap a prefix's expansion.
    """
    clauses = parse(q)
    return " ".join(fts5_term(c) for c in clauses) if clauses else None


def build(conn: Conn) -> sqlite3.Connection:
    """An in-memory SQLite copy of the rows of `conn`'s `entries` and `entry_tags` (either engine's connection: the
    node's store may be PostgreSQL) with the old `entries_fts` table built from its entries."""
    copy = sqlite3.connect(":memory:", check_same_thread=False)  # built on a reader thread, read on the test's
    for table, key in (("entries", "id INTEGER PRIMARY KEY"), ("entry_tags", "entry_id")):
        cursor = conn.execute(f"SELECT * FROM {table}")
        columns = [c[0] for c in cursor.description]
        rows = [tuple(row) for row in cursor.fetchall()]
        # untyped columns keep each value as read; entries.id is the rowid the FTS5 table's content_rowid names
        declared = [key if c == key.split()[0] else c for c in columns]
        copy.execute(f"CREATE TABLE {table} ({', '.join(declared)})")
        copy.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(columns))})", rows)
    copy.execute("CREATE VIRTUAL TABLE entries_fts USING fts5(content, tags, content='entries', content_rowid='id')")
    copy.execute("INSERT INTO entries_fts(entries_fts) VALUES('rebuild')")
    return copy


def search_ids(copy: sqlite3.Connection, q: SearchQuery, since_ms: int | None = None) -> list[int] | None:
    """Entry ids the old FTS5 search answered (rank, then newest first); None when `q.q` has no words."""
    match = fts_query(q.q or "")
    if match is None:
        return None
    where = ["entries_fts MATCH :match"]
    params: dict[str, Any] = {"match": match, "limit": q.limit, "offset": q.offset}
    for column, name, values in (
        ("e.entry_type", "types", q.entry_type),
        ("e.performative", "perfs", q.performative),
        ("e.author_id", "authors", q.author),
        ("e.truth_state", "truth", q.truth_state),
    ):
        if values:
            where.append(f"{column} IN (SELECT value FROM json_each(:{name}))")
            params[name] = json.dumps(list(values))
    if q.tags:
        names = []
        for i, tag in enumerate(dict.fromkeys(unicodedata.normalize("NFC", t) for t in q.tags)):
            params[f"tag{i}"] = tag
            names.append(f":tag{i}")
        where.append(f"e.id IN (SELECT entry_id FROM entry_tags WHERE tag IN ({', '.join(names)}))")
    if q.min_confidence is not None:
        where.append("e.confidence >= :minconf")
        params["minconf"] = q.min_confidence
    if since_ms is not None:
        where.append("e.created_ms >= :since")
        params["since"] = since_ms
    if not q.include_synthetic:
        where.append("e.truth_state != 'simulation'")
    sql = (
        "SELECT e.id FROM entries_fts f JOIN entries e ON e.id = f.rowid WHERE "
        + " AND ".join(where)
        + " ORDER BY f.rank, e.id DESC LIMIT :limit OFFSET :offset"
    )
    return [int(r[0]) for r in copy.execute(sql, params).fetchall()]
