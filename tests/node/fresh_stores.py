"""New migrated databases of one engine, as many as a test asks for: the stories that replay one history into
several stores (every arrival order, a database per seed) run once per engine.

A module uses it through a fixture of its own, parametrized by `ENGINES` (the PostgreSQL case carries the
`postgresql` mark, so the normal pass runs both):

    @pytest.fixture(params=ENGINES)
    def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FreshStore]:
        yield from fresh_stores(request, tmp_path, LOG)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from node.store import db, pg_conn
from node.store.projections import Log
from scenarios.pg_cluster import Cluster

ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)]

FreshStore = Callable[..., Any]  # fresh(name, log=the default): a new database migrated to the head


def fresh_stores(request: pytest.FixtureRequest, tmp_path: Path, log: Log | None) -> Iterator[FreshStore]:
    """`fresh(name)` opens a new database of `request.param`'s engine, migrated to the head and carrying `log` (or
    the log a call names: `fresh(name, other_log)`): a
    SQLite file `name`.db under tmp_path, or a copy of the migrated PostgreSQL template. Closed (and the
    PostgreSQL ones dropped) after the test. Typed Any: the tests hand it to store functions, which take a
    `Conn`, and to `db.transaction`."""
    opened: list[Any] = []
    made: list[str] = []
    cluster: Cluster | None = None
    template = ""
    if request.param == "postgresql":
        cluster = request.getfixturevalue("pg_cluster")
        template = request.getfixturevalue("pg_template")

    def fresh(name: str, carried: Log | None = log) -> Any:
        conn: Any
        if cluster is None:
            conn = db.connect(tmp_path / f"{name}.db", log=carried)
            db.migrate(conn)
        else:
            made.append(cluster.create_database(template=template))
            conn = pg_conn.connect(cluster.url(made[-1]), log=carried)
        opened.append(conn)
        return conn

    yield fresh
    for conn in opened:
        conn.close()
    for name in made:
        assert cluster is not None
        cluster.drop_database(name)
