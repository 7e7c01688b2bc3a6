"""node/features.py: the one list of the node's features, the only source of its routes, projectors,
projection tables and background work, and nothing in node/ registering anything as a side effect of an import."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import grimp
import msgspec
import networkx as nx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

import node as node_package
from identity import keys, records
from identity.schema import RECORD_TYPES
from identity.schema_v3 import struct_for
from node.app import create_app
from node.features import FEATURES, LOG, Feature, all_routes, joined
from node.service import Node
from node.store import db as dbmod
from node.store import projections
from node.store.conn import POSTGRESQL, Conn, engine_of
from node.web.appkeys import NODE, SYNC
from node.web.http import Route
from tests.conftest import AgentCreds
from tests.node.api_helpers import entry_record, link, link_record, post
from tests.node.workflows.helpers import WF, declare
from tests.pg_fixtures import OpenStore

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
NODE_DIR = Path(node_package.__file__).parent
# Routes an app serves besides the features' REST API: kept out of /openapi.json.
NOT_IN_API = {"/metrics", "/openapi.json", "/nlip", "/nlip/"}  # /nlip: NLIP, not REST (node/nlip/endpoint.py)
T0 = 1_767_323_045_000


def node_modules() -> list[ModuleType]:
    """Every module of the node package, imported."""
    names = [info.name for info in pkgutil.walk_packages([str(NODE_DIR)], "node.")]
    return [importlib.import_module(name) for name in ["node", *names]]


def served_api(app: web.Application) -> list[tuple[str, str]]:
    """(method, path) of the app's routes that belong to the REST API, in the order aiohttp matches them."""
    from node.dashboard import dashboard_routes

    dashboard = {(r.method, r.path) for r in dashboard_routes()}
    out = []
    for route in app.router.routes():
        resource = route.resource
        assert resource is not None
        key = (route.method, resource.canonical)
        if route.method != "HEAD" and resource.canonical not in NOT_IN_API and key not in dashboard:
            out.append(key)
    return out


def test_features_have_unique_names_and_routes() -> None:
    assert len({f.name for f in FEATURES}) == len(FEATURES)
    operations = [(r.method, r.path) for r in all_routes()]
    assert len(set(operations)) == len(operations)
    assert len({r.handler.__name__ for r in all_routes()}) == len(operations)  # handler names are operation ids


def test_every_route_table_of_the_node_is_one_features_routes() -> None:
    """A route table written anywhere in node/ (the dashboard's pages aside) reaches the app only by being
    listed as a feature's routes, and is listed once."""
    listed = [route for feature in FEATURES for route in feature.routes]
    tables: dict[str, list[Route]] = {}
    for module in node_modules():
        if module.__name__.startswith("node.dashboard"):
            continue
        for name, value in vars(module).items():
            if isinstance(value, list | tuple) and value and all(isinstance(r, Route) for r in value):
                tables[f"{module.__name__}.{name}"] = list(value)
    assert tables
    for name, table in tables.items():
        hits = [f.name for f in FEATURES if list(f.routes) == table]
        assert len(hits) == 1, f"{name} is the routes of {hits or 'no feature'}"
    assert sum(len(t) for t in tables.values()) == len(listed)


async def test_the_app_serves_exactly_the_features_routes_in_their_order(
    aiohttp_client: Callable[..., Awaitable[TestClient]], node: Node
) -> None:
    app = create_app(node)
    client = await aiohttp_client(app)
    assert served_api(app) == [(r.method, r.path) for r in all_routes()]
    resp = await client.get("/openapi.json")
    doc = await resp.json()
    documented = [(m.upper(), path) for path, ops in doc["paths"].items() for m in ops]
    assert sorted(documented) == sorted((r.method, r.path) for r in all_routes())


def test_the_log_joins_every_features_projectors_and_tables() -> None:
    for feature in FEATURES:
        assert bool(feature.projectors) == bool(feature.tables), f"{feature.name}: projectors without tables"
    assert len(set(LOG.tables)) == len(LOG.tables)
    # every record kind the log accepts (from clients, and of format v3 from peers) has exactly one projector
    assert (
        set(LOG.projectors)
        == set(records.RECORD_KINDS) | records.V3_KINDS | records.SPACE_KINDS | records.REDACTION_KINDS
    )
    substrate, workflows = (next(f for f in FEATURES if f.name == name) for name in ("substrate", "agent workflows"))
    assert joined([workflows, substrate]).tables == workflows.tables + substrate.tables  # feature by feature
    twice = Feature("twice", projectors={"link": projections.project_link}, tables=("links",))
    with pytest.raises(ValueError, match="twice projects link"):
        joined([substrate, twice])


def test_the_declarations_cannot_be_changed_in_place() -> None:
    with pytest.raises(TypeError):
        LOG.projectors["extra"] = LOG.projectors["entry"]  # type: ignore[index]
    for feature in FEATURES:
        assert isinstance(feature.routes, tuple) and isinstance(feature.tables, tuple)
        with pytest.raises(TypeError):
            feature.projectors["extra"] = LOG.projectors["entry"]  # type: ignore[index]
    assert isinstance(Feature("x", routes=[]).routes, tuple)  # a route list is copied, not shared


def test_every_projection_table_exists_in_the_migrated_schema(open_store: OpenStore) -> None:
    conn = open_store(None)
    tables = "SELECT name FROM sqlite_master WHERE type = 'table'"
    if engine_of(conn) == POSTGRESQL:
        tables = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
    names = {row[0] for row in conn.execute(tables)}
    assert set(LOG.tables) <= names


async def test_a_node_appends_and_rebuilds_through_the_log_it_is_given(data_dir: tuple[Path, str]) -> None:
    """The projections know no feature: a Node given a Log whose link projector also notes what it projects,
    and which holds only the substrate's tables, appends, rebuilds and snapshots through exactly that Log."""
    noted: list[tuple[int, bool]] = []

    def noting_link(conn: Conn, rec: Any, ctx: projections.Projection) -> None:
        noted.append((ctx.seq, ctx.notify))
        projections.project_link(conn, rec, ctx)

    substrate = next(f for f in FEATURES if f.name == "substrate")
    node = Node(data_dir[0], log=projections.Log({**substrate.projectors, "link": noting_link}, substrate.tables))
    node.open()
    try:
        alice = keys.SigningKey.generate()
        target = entry_record(alice, "the target", created_ms=T0)
        source = entry_record(alice, "the source", created_ms=T0 + 1)
        link = link_record(
            alice, records.compute_hash(source), records.compute_hash(target), "supports", created_ms=T0 + 2
        )
        items = [projections.Incoming(r, *records.check(r)) for r in (target, source, link)]
        appended = await node.db.write(lambda c: projections.append_many(c, items, origin="local", now_ms=T0))
        link_seq = appended[2][0]
        assert noted == [(link_seq, True)]
        before = await node.db.read(projections.snapshot)
        assert list(before) == list(substrate.tables) and len(before["links"]) == 1
        assert await node.db.write(projections.rebuild) == 3
        assert noted == [(link_seq, True), (link_seq, False)]  # replayed through it too, without notifications
        assert await node.db.read(projections.snapshot) == before
    finally:
        node.close()


def test_a_connection_without_a_log_appends_nothing(open_store: OpenStore) -> None:
    conn = open_store(None)
    record = entry_record(keys.SigningKey.generate(), "no log", created_ms=T0)
    with pytest.raises(RuntimeError, match="carries no log"), dbmod.transaction(conn, immediate=True):  # type: ignore[arg-type]  # either engine
        projections.append_many(conn, [projections.Incoming(record, *records.check(record))], origin="local", now_ms=T0)
    with pytest.raises(RuntimeError, match="carries no log"):
        projections.snapshot(conn)
    assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 0  # the append was rolled back


async def records_of_every_kind(client: TestClient, make_agent: MakeAgent) -> None:
    """Entries (tagged, addressed, linking), a link, agents, a task with a dependency, and messages (one depending on
    an entry)."""
    alice, bob = await make_agent("alice"), await make_agent("bob")
    first = await post(client, alice, content="a finding", tags=["t"], directed_to=[bob.agent_id])
    second = await post(
        client, bob, content="it holds", links=[{"target": first["record_hash"], "link_type": "supports"}]
    )
    await link(client, alice, source=second["record_hash"], target=first["record_hash"], link_type="responds_to")
    await declare(client, alice, {"key": "later", "title": "Later", "depends_on": ["first"]})
    await declare(client, alice, {"key": "first", "title": "First"})
    message = {"message_type": "status", "body": "hello", "to_agent": bob.agent_id,
               "dependency_ids": [first["record_hash"]]}  # fmt: skip
    resp = await client.post(f"{WF}/messages", json=message, headers=alice.headers)
    assert resp.status == 201, await resp.text()


def row_counts(conn: Conn) -> dict[str, int]:
    """Rows of every table of the schema (the engine's own aside), on either engine."""
    if engine_of(conn) == POSTGRESQL:
        tables = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    else:
        tables = "SELECT name FROM sqlite_master WHERE type = 'table'"
    names = [r[0] for r in conn.execute(tables)]
    return {n: conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names if not n.startswith("sqlite_")}


def copy_log(conn: Conn, rows: list[Any]) -> None:
    """Insert the log's rows (every column, seq included) into an empty database of either engine."""
    values = ", ".join("?" * len(rows[0]))
    overriding = " OVERRIDING SYSTEM VALUE" if engine_of(conn) == POSTGRESQL else ""  # seq is an identity there
    conn.executemany(f"INSERT INTO records{overriding} VALUES ({values})", [tuple(row) for row in rows])


async def test_each_features_projectors_fill_only_that_features_tables(
    client: TestClient, make_agent: MakeAgent, node: Node, tmp_path: Path, node_store: Callable[[], str | None]
) -> None:
    """Replayed alone into an empty schema, a feature's records fill its own tables and nothing else: each
    projector's tables are in the list, under its own feature."""
    await records_of_every_kind(client, make_agent)
    owner, member = await make_agent("owner"), await make_agent("member")  # a space and a member of it
    space = await node.spaces.create(owner.agent_id, "family", "")
    await node.spaces.set_role(owner.agent_id, space.space_id, member.agent_id, "reader")
    await node.redactions.redact(owner.agent_id, "ab" * 32, None)  # a redaction of a target not seen here
    log = await node.db.read(lambda c: c.execute("SELECT seq, hash, kind, body FROM records ORDER BY seq").fetchall())
    assert {row["kind"] for row in log} == set(RECORD_TYPES) | {"space", "space_member", "redaction", "space_host"}
    every_column = await node.db.read(lambda c: c.execute("SELECT * FROM records ORDER BY seq").fetchall())
    for feature in FEATURES:
        if not feature.projectors:
            continue
        conn = dbmod.connect_store(node_store() or tmp_path / f"{feature.name}.db")  # the node's engine
        dbmod.migrate_store(conn)
        copy_log(conn, every_column)  # the log itself, which projectors may read (spaces recompute a space)
        before = row_counts(conn)
        with dbmod.transaction(conn, immediate=True):
            for seq, record_hash, kind, body in log:
                if kind in feature.projectors:
                    record = json.loads(body)
                    struct = struct_for(record)
                    assert struct is not None
                    decoded = msgspec.convert(record, struct)
                    projection = projections.Projection(seq, record_hash, 0, notify=False)
                    feature.projectors[kind](conn, decoded, projection)
        filled = {name for name, count in row_counts(conn).items() if count != before[name]}
        conn.close()
        owned = set(feature.tables)
        assert filled <= owned, f"{feature.name} fills {sorted(filled - owned)}"
        assert set(feature.tables) <= filled, f"{feature.name} leaves tables empty"


async def test_building_two_apps_registers_nothing_twice(node: Node) -> None:
    routes_before = all_routes()
    projectors_before = dict(LOG.projectors)
    first, second = create_app(node), create_app(node)
    assert all_routes() == routes_before and dict(LOG.projectors) == projectors_before
    assert served_api(first) == served_api(second) == [(r.method, r.path) for r in routes_before]
    background = [ctx for feature in FEATURES for ctx in feature.background]
    for app in (first, second):
        assert app[NODE] is node
        # after the node's own open/close; on PostgreSQL each wrapped by node/app.py's `_off_if_unported`
        assert [getattr(ctx, "__wrapped__", ctx) for ctx in list(app.cleanup_ctx)[1:]] == background
        assert len(app.on_shutdown) == 2  # the long-poll wake-ups of the feed and federation, once each
    assert first[SYNC] is not second[SYNC]  # each app its own federation state


def module_level_mutations(tree: ast.Module) -> list[str]:
    """Statements run at import time (not inside a function or class) that change an object in place: how a
    module would fill another's registry. (A registering decorator would escape this; the declarations above
    are read-only, so none could fill them.)"""
    mutators = {"append", "extend", "update", "add", "insert", "setdefault", "register", "__setitem__"}
    found = []
    for stmt in tree.body:
        # the branches of a module-level `if` (`if TYPE_CHECKING:` and the like) run at import time too
        stmts = stmt.body + stmt.orelse if isinstance(stmt, ast.If) else [stmt]
        for s in stmts:
            if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Attribute):
                if s.value.func.attr in mutators:
                    found.append(f"line {s.lineno}: .{s.value.func.attr}(...)")
            elif isinstance(s, ast.AugAssign):
                found.append(f"line {s.lineno}: augmented assignment")
            elif isinstance(s, ast.Assign | ast.AnnAssign):
                targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                if any(isinstance(t, ast.Subscript | ast.Attribute) for t in targets):
                    found.append(f"line {s.lineno}: assignment into an object")
    return found


# node's modules and those of wire, which was node's subpackage until issue 33 (docs/decisions.md, record 49)
SOURCES = sorted([*NODE_DIR.rglob("*.py"), *(NODE_DIR.parent / "wire").rglob("*.py")])


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(NODE_DIR.parent)))
def test_no_module_registers_anything_when_imported(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert module_level_mutations(tree) == []


def test_every_app_key_is_in_appkeys() -> None:
    defined = {
        str(path.relative_to(NODE_DIR))
        for path in NODE_DIR.rglob("*.py")
        if "AppKey(" in path.read_text(encoding="utf-8")
    }
    assert defined == {"web/appkeys.py"}
    for module in node_modules():
        for name, value in vars(module).items():
            if isinstance(value, web.AppKey) and module.__name__ != "node.web.appkeys":
                assert getattr(importlib.import_module("node.web.appkeys"), name) is value, name


def test_the_registration_modules_are_in_no_import_cycle() -> None:
    """Imports inside functions count; those under TYPE_CHECKING do not (they name types, never run)."""
    graph = grimp.build_graph("node", "identity", "sync", cache_dir=None, exclude_type_checking_imports=True)
    edges = nx.DiGraph(
        (module, imported)
        for module in graph.modules
        if module.startswith("node")
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.startswith("node")
    )
    watched = {
        "node.app",
        "node.web.appkeys",
        "node.web.background",
        "node.features",
        "node.federation.peer_auth",
        "node.federation.routes",
        "node.store.projections",
        "node.service",
        "node.trust.service",
        "node.workflows.records",
    }
    cycles = [sorted(c) for c in nx.strongly_connected_components(edges) if len(c) > 1 and c & watched]
    assert cycles == []


def test_the_store_floor_is_given_the_log_and_imports_no_feature_list() -> None:
    """node.store reaches neither node/features.py nor a feature's projectors by import: the Log is passed in."""
    graph = grimp.build_graph("node", "identity", "wire", cache_dir=None, exclude_type_checking_imports=True)
    store = sorted(m for m in graph.modules if m == "node.store" or m.startswith("node.store."))
    assert "node.store.projections" in store
    reaching = [m for m in store for far in ("node.features", "node.workflows.records") if graph.chain_exists(m, far)]
    assert reaching == []
