"""Fixtures of the store tests: `new_store`, for a test that needs several fresh databases of one engine."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from node.store import db, pg_conn
from node.store.conn import Conn
from node.store.projections import Log
from scenarios import pg_cluster as cluster_mod

NewStore = Callable[[Log | None], Conn]  # each call a new database of one engine, migrated to the head


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[NewStore]:
    """Run the test once per engine, as `open_store` does, but each call `new_store(log)` opens a NEW database
    (a SQLite file under tmp_path, or a PostgreSQL database copied from the migrated template): for a test that
    needs several (a hypothesis example each, two nodes). All closed, and PostgreSQL's dropped, after the test."""
    opened: list[Conn] = []
    made: list[str] = []
    cluster: cluster_mod.Cluster | None = None
    template = ""
    if request.param == "postgresql":
        cluster = request.getfixturevalue("pg_cluster")
        template = request.getfixturevalue("pg_template")

    def new_one(log: Log | None) -> Conn:
        conn: Conn
        if cluster is None:
            conn = db.connect(tmp_path / f"store{len(opened)}.db", log=log)
            db.migrate(conn)
        else:
            made.append(cluster.create_database(template=template))
            conn = pg_conn.connect(cluster.url(made[-1]), log=log)
        opened.append(conn)
        return conn

    yield new_one
    for conn in opened:
        conn.close()  # type: ignore[attr-defined]  # both engines' connections close; the Conn protocol does not say
    for name in made:
        assert cluster is not None
        cluster.drop_database(name)
