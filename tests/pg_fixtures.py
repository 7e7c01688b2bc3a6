"""The PostgreSQL half of the tests: its fixtures, and what happens where PostgreSQL is not installed.

A test that uses `pg_cluster` (directly or through `pg_url` / `pg_migrated_url`) is a PostgreSQL test: it is marked
`postgresql` at collection; so is the PostgreSQL case of a test run on both engines (`open_store`, whose
"postgresql" parameter carries the mark). Where no PostgreSQL server programs are found (scenarios/pg_cluster.py
`find_bindir`) those tests are deselected, named in the report's header and summary, and the SQLite half runs as
before; where `CI` is set (.ci/run sets CI=true, and installs the postgresql package) a missing PostgreSQL is an
error instead, so CI never passes without running them. tests/conftest.py imports these.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from node.ops.datadir import initialise
from node.store import db, pg_conn, pg_schema
from node.store.conn import Conn
from node.store.projections import Log
from scenarios import pg_cluster as cluster_mod

BINDIR = cluster_mod.find_bindir()
PG_FIXTURES = {"pg_cluster", "pg_url", "pg_migrated_url", "pg_template"}
_DESELECTED = pytest.StashKey[int]()
_HOW = "install PostgreSQL (Debian: apt-get install postgresql) to run them"


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--store postgresql`: the second pass of the in-process tests, each node's database on PostgreSQL."""
    parser.addoption(
        "--store",
        choices=("sqlite", "postgresql"),
        default="sqlite",
        help="the engine of the nodes the tests create (`node_store`); postgresql runs only the tests that create "
        "one, except those marked sqlite_only",
    )


_PASS = {"store": "sqlite"}  # this run's `--store`, for `examples` (read at import, when no fixture is at hand)


def pytest_configure(config: pytest.Config) -> None:
    """Remember this run's `--store` (each xdist worker configures with the run's options)."""
    _PASS["store"] = config.getoption("store")


def examples(count: int) -> int:
    """A hypothesis story's example count: `count` in the first pass; a quarter (at least 10) in the `--store
    postgresql` pass, where each example creates its databases anew and the first pass explored the orders already."""
    return count if _PASS["store"] != "postgresql" else max(10, count // 4)


def pytest_report_header(config: pytest.Config) -> str:
    """One line saying which PostgreSQL the PostgreSQL tests use, or that they will not run."""
    store = f"; the tests' nodes run on {config.getoption('store')}"
    if BINDIR is None:
        return f"postgresql: not installed; the PostgreSQL tests are deselected ({_HOW}){store}"
    return f"postgresql: {BINDIR}{store}"


def _on_postgresql_pass(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The `--store postgresql` pass keeps the tests whose nodes take their store from `node_store`, less those
    marked sqlite_only (a test about SQLite itself, its reason given in the mark); the rest ran in the first pass."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        uses_store = "node_store" in getattr(item, "fixturenames", ())
        (kept if uses_store and item.get_closest_marker("sqlite_only") is None else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    for item in kept:
        item.add_marker(pytest.mark.postgresql)
    items[:] = kept


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the PostgreSQL tests; deselect them where PostgreSQL is absent, or fail the run under CI."""
    if config.getoption("store") == "postgresql":
        _on_postgresql_pass(config, items)
    marked = []
    for item in items:
        if item.get_closest_marker("postgresql") is not None:
            marked.append(item)
        elif PG_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgresql)
            marked.append(item)
    if BINDIR is not None or not marked:
        return
    if os.environ.get("CI"):
        raise pytest.UsageError(
            f"CI is set but PostgreSQL is not installed: {len(marked)} PostgreSQL tests cannot run ({_HOW})"
        )
    config.stash[_DESELECTED] = len(marked)
    config.hook.pytest_deselected(items=marked)
    items[:] = [item for item in items if item not in marked]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say, at the end too, how many PostgreSQL tests did not run and why."""
    count = terminalreporter.config.stash.get(_DESELECTED, 0)
    if count:
        terminalreporter.write_line(f"{count} PostgreSQL tests deselected: PostgreSQL is not installed ({_HOW})")


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[cluster_mod.Cluster]:
    """A throwaway PostgreSQL cluster for this test process, stopped and removed at its end."""
    assert BINDIR is not None  # tests using it are deselected otherwise
    cluster = cluster_mod.start(BINDIR, in_memory=True)  # a database copied and dropped per test: see `start`
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def pg_template(pg_cluster: cluster_mod.Cluster) -> str:
    """A database migrated to the head (node/store/migrations_pg), the template of `pg_migrated_url`'s copies."""
    name = pg_cluster.create_database()
    conn = pg_conn.connect(pg_cluster.url(name))
    try:
        pg_schema.migrate(conn)
    finally:
        conn.close()  # a template must have no connections when it is copied
    return name


@pytest.fixture
def standby() -> Iterator[list[cluster_mod.Cluster]]:
    """A list for the test's `Cluster.standby_copy` replicas, each stopped and removed after the test."""
    made: list[cluster_mod.Cluster] = []
    yield made
    for cluster in made:
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: cluster_mod.Cluster) -> Iterator[str]:
    """The connection string of a new empty database, dropped after the test."""
    name = pg_cluster.create_database()
    yield pg_cluster.url(name)
    pg_cluster.drop_database(name)


@pytest.fixture
def pg_store_url(pg_cluster: cluster_mod.Cluster) -> Iterator[str]:
    """The `postgresql://` URL (what `--store` takes) of a new empty database, dropped after the test."""
    name = pg_cluster.create_database()
    yield pg_cluster.store_url(name)
    pg_cluster.drop_database(name)


@pytest.fixture
def pg_migrated_url(pg_cluster: cluster_mod.Cluster, pg_template: str) -> Iterator[str]:
    """The connection string of a new database holding the head schema (a copy of `pg_template`), dropped after."""
    name = pg_cluster.create_database(template=pg_template)
    yield pg_cluster.url(name)
    pg_cluster.drop_database(name)


@pytest.fixture
def pg_folder(pg_cluster: cluster_mod.Cluster, pg_template: str, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A node's folder initialised on a new PostgreSQL database (a copy of the migrated template), and its URL."""
    name = pg_cluster.create_database(template=pg_template)
    url = pg_cluster.store_url(name)
    initialise(tmp_path / "node", url)
    yield tmp_path / "node", url
    pg_cluster.drop_database(name)


@pytest.fixture
def node_store(request: pytest.FixtureRequest) -> Iterator[Callable[[], str | None]]:
    """Where a node the test creates keeps its database: call it once per node, and pass the answer to
    `initialise(path, store_url)`. None (SQLite, bbs.db in the folder) in the first pass; with `--store
    postgresql`, a new database copied from the migrated template each call, dropped after the test."""
    if request.config.getoption("store") != "postgresql":
        yield lambda: None
        return
    cluster: cluster_mod.Cluster = request.getfixturevalue("pg_cluster")
    template: str = request.getfixturevalue("pg_template")
    made: list[str] = []

    def new_database() -> str:
        made.append(cluster.create_database(template=template))
        return cluster.store_url(made[-1])

    yield new_database
    for name in made:
        cluster.drop_database(name)


OpenStore = Callable[[Log | None], Conn]  # a new database of one engine, migrated to the head, carrying the log


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenStore]:
    """Run the test once per engine: `open_store(log)` opens a connection to a new database of this run's engine
    (a SQLite file under tmp_path, or a PostgreSQL database copied from the migrated template), migrated to the
    head and carrying `log`; closed after the test. `request.param` names the engine."""
    opened: list[Conn] = []
    url = request.getfixturevalue("pg_migrated_url") if request.param == "postgresql" else None

    def open_one(log: Log | None) -> Conn:
        conn: Conn
        if url is None:
            conn = db.connect(tmp_path / "store.db", log=log)
            db.migrate(conn)
        else:
            conn = pg_conn.connect(url, log=log)
        opened.append(conn)
        return conn

    yield open_one
    for conn in opened:
        conn.close()  # type: ignore[attr-defined]  # both engines' connections close; the Conn protocol does not say


T = TypeVar("T")


def on_both_engines(tmp_path: Path, pg_url: str, log: Log, story: Callable[[Conn], T]) -> tuple[T, T]:
    """`story` run on a new SQLite file migrated to the head and on the migrated PostgreSQL database at `pg_url`,
    each carrying `log`: (SQLite's answer, PostgreSQL's), for a test that compares them; both closed after."""
    sqlite = db.connect(tmp_path / "both-engines.db", log=log)
    postgres = pg_conn.connect(pg_url, log=log)
    try:
        db.migrate(sqlite)
        return story(sqlite), story(postgres)
    finally:
        sqlite.close()
        postgres.close()
