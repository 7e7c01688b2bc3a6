"""Text holding U+0000 on both engines: PostgreSQL's text cannot hold a NUL, so the node's psycopg connection escapes
every str it binds and unescapes every text it reads (node/store/pg_conn.py, docs/decisions.md record 84); a store
answers as SQLite's does, the escape character itself included."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from node.features import LOG
from node.store import conn as neutral
from node.store import pg_conn
from node.store.conn import Conn
from scenarios import pg_cluster as cluster_mod
from tests.node.store.test_pg_text import TEXTS
from tests.pg_fixtures import OpenStore, on_both_engines


def _story(conn: Conn) -> dict[str, Any]:
    """Every text of TEXTS stored as a key and a value, then read back: whole, by equality, in order, by prefix
    (LIKE: every needle, though SQLite's LIKE reads a pattern only up to a NUL), by `<`, by a list, and parameters
    returned as they are, concatenated and through a function."""
    keys = ["t:" + t for t in TEXTS]
    conn.executemany("INSERT INTO node_meta (key, value) VALUES (?, ?)", [(k, k[2:] + "\x00") for k in keys])
    mine = "key LIKE 't:%'"
    return {
        "rows": [tuple(r) for r in conn.execute(f"SELECT key, value FROM node_meta WHERE {mine} ORDER BY key")],
        "equal": [conn.execute("SELECT value FROM node_meta WHERE key = ?", (k,)).fetchone()[0] for k in keys],
        "prefix": [
            sorted(r[0] for r in conn.execute("SELECT key FROM node_meta WHERE key LIKE ? || '%'", (k,))) for k in keys
        ],
        "below": [
            conn.execute(f"SELECT count(*) FROM node_meta WHERE {mine} AND key < ?", (k,)).fetchone()[0] for k in keys
        ],
        "listed": sorted(
            r[0]
            for r in conn.execute(
                "SELECT key FROM node_meta WHERE key IN (?, ?, ?)", ("t:\x00", "t:\x01\x00", "t:\ue000a")
            )
        ),
        "returned": [
            tuple(r)
            for r in conn.execute(
                "SELECT ?, ? || 'x', upper(?), CAST(NULL AS text), 7", ("\x00\x01", "a\x00", "a\x00b")
            )
        ],
    }


@pytest.mark.postgresql
def test_text_with_nul_and_the_escape_itself_answers_alike_on_both_engines(
    tmp_path: Path, pg_migrated_url: str
) -> None:
    sqlite, postgres = on_both_engines(tmp_path, pg_migrated_url, LOG, _story)
    keys = sorted("t:" + t for t in TEXTS)
    # a LIKE pattern holding a NUL: SQLite's ends there (it matches more); PostgreSQL's is the exact prefix
    assert postgres["prefix"] == [sorted(k for k in keys if k.startswith("t:" + t)) for t in TEXTS]
    nul_free = [i for i, t in enumerate(TEXTS) if "\x00" not in t]
    assert [postgres["prefix"][i] for i in nul_free] == [sqlite["prefix"][i] for i in nul_free]
    sqlite.pop("prefix"), postgres.pop("prefix")
    assert postgres == sqlite
    assert sqlite["rows"] == [(k, k[2:] + "\x00") for k in keys]
    assert sqlite["equal"] == [t + "\x00" for t in TEXTS]
    assert sqlite["below"] == [sum(k < "t:" + t for k in keys) for t in TEXTS]
    assert sqlite["listed"] == ["t:\x00", "t:\x01\x00", "t:\ue000a"]
    assert sqlite["returned"] == [("\x00\x01", "a\x00x", "A\x00B", None, 7)]


def test_a_text_read_back_is_the_text_bound(open_store: OpenStore) -> None:
    conn = open_store(LOG)
    for text in TEXTS:
        conn.execute("INSERT INTO node_meta (key, value) VALUES (?, ?)", ("k" + text, text))
    assert {r[0]: r[1] for r in conn.execute("SELECT key, value FROM node_meta WHERE key LIKE 'k%'")} == {
        "k" + t: t for t in TEXTS
    }


@pytest.mark.postgresql
def test_a_connection_not_in_utf8_is_refused(pg_url: str) -> None:
    # the escape binds and reads UTF-8 text; another client encoding would bind or read other bytes
    with pytest.raises(neutral.OperationalError, match="UTF-8"):
        pg_conn.connect(pg_url + " client_encoding=LATIN1")


@pytest.mark.postgresql
def test_a_database_not_in_utf8_is_refused_with_the_fix(pg_cluster: cluster_mod.Cluster) -> None:
    # what a cluster made without a UTF-8 locale gives: the refusal names the database's encoding and the remedy
    name = "ascii_" + secrets.token_hex(4)
    pg_cluster.admin(f"CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    try:
        refused = f"{name} is in SQL_ASCII: create it with CREATE DATABASE \"{name}\" ENCODING 'UTF8'"
        with pytest.raises(neutral.OperationalError, match=refused):
            pg_conn.connect(pg_cluster.url(name))
        with pytest.raises(neutral.OperationalError, match=refused):  # a client in UTF-8 does not make it one
            pg_conn.connect(pg_cluster.url(name) + " client_encoding=UTF8")
    finally:
        pg_cluster.drop_database(name)
