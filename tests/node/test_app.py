"""node.app: the application factory. `create_app` mounts every route of node/features.py (each guarded), the
OpenAPI document of exactly those routes, the dashboard and /metrics; opens the node on start-up and closes it on
cleanup after the features' background work has stopped; bounds request bodies and (when told) request rates.
`build` does the same for a data folder, initialising it first."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from node import __version__
from node.app import MAX_BODY_BYTES, _off_if_unported, build, create_app
from node.features import FEATURES, all_routes
from node.federation.routes import SyncSettings
from node.ops.datadir import DataDir, require_node
from node.service import Node
from node.store import conn as neutral
from node.web import limits
from node.web.appkeys import LIMIT, NODE, SYNC_SETTINGS
from tests.conftest import AgentCreds

MakeClient = Callable[..., Awaitable[TestClient]]
BACKGROUND_TASKS = {"trust refresh", "notification expiry sweep", "sync scheduler"}


def registered(app: web.Application) -> set[tuple[str, str]]:
    return {(route.method, route.resource.canonical) for route in app.router.routes() if route.resource is not None}


def test_every_feature_route_is_mounted(data_dir: tuple[Path, str]) -> None:
    app = create_app(Node(data_dir[0]))
    mounted = registered(app)
    routes = all_routes()
    assert routes == [route for feature in FEATURES for route in feature.routes]
    missing = [(r.method, r.path) for r in routes if (r.method, r.path) not in mounted]
    assert not missing
    assert {("GET", "/openapi.json"), ("GET", "/metrics"), ("GET", "/")} <= mounted  # document, metrics, dashboard


async def test_openapi_documents_the_feature_routes_and_nothing_else(client: TestClient) -> None:
    resp = await client.get("/openapi.json")
    assert resp.status == 200 and resp.content_type == "application/json"
    doc = await resp.json()
    assert doc["info"] == {"title": "Agent BBS", "version": __version__}
    documented = {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}
    assert documented == {(r.method, r.path) for r in all_routes()}
    assert "/" not in doc["paths"] and "/openapi.json" not in doc["paths"]  # the dashboard stays out


async def test_routes_are_guarded_by_their_auth(client: TestClient, admin_headers: dict[str, str]) -> None:
    assert (await client.get("/healthz")).status == 200  # auth "none"
    refused = await client.get("/v1/peers")  # admin
    assert refused.status == 401 and refused.content_type == "application/problem+json"
    assert (await client.get("/v1/peers", headers=admin_headers)).status == 200
    unsigned = await client.get("/v1/sync/changes")  # peer-signed
    assert unsigned.status == 401


async def test_answers_carry_the_security_headers(client: TestClient) -> None:
    for path in ("/healthz", "/no/such/route"):
        resp = await client.get(path)
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert "Content-Security-Policy" in resp.headers
    missing = await client.get("/no/such/route")
    assert missing.status == 404 and (await missing.json())["code"] == "not_found"


async def test_the_lifecycle_opens_and_closes_the_node(
    aiohttp_client: MakeClient, data_dir: tuple[Path, str], caplog: pytest.LogCaptureFixture
) -> None:
    node = Node(data_dir[0])
    assert not node.db.is_open
    app = create_app(node, sync=SyncSettings(pull=True))
    assert not node.db.is_open  # building opens nothing
    client = await aiohttp_client(app)
    assert node.db.is_open
    info = await (await client.get("/v1/node")).json()
    assert info["node_id"] == require_node(data_dir[0]) == node.node_id
    running = {t.get_name() for t in asyncio.all_tasks()}
    assert running >= BACKGROUND_TASKS  # every feature's background work started
    with caplog.at_level(logging.WARNING):
        await client.close()
    assert not node.db.is_open
    assert not BACKGROUND_TASKS & {t.get_name() for t in asyncio.all_tasks()}
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # nothing failed on a closed node


async def test_an_opened_node_is_used_as_it_is(aiohttp_client: MakeClient, node: Node) -> None:
    client = await aiohttp_client(create_app(node))
    assert node.db.is_open
    assert (await client.get("/healthz")).status == 200
    await client.close()
    assert not node.db.is_open  # the app closes the node it ran, however it was opened


async def test_a_body_over_the_limit_is_refused(
    client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    agent = await make_agent("alice")
    big = b'{"content": "' + b"x" * MAX_BODY_BYTES + b'"}'
    resp = await client.post("/v1/entries", data=big, headers={**agent.headers, "Content-Type": "application/json"})
    assert resp.status == 413
    problem = await resp.json()
    assert problem["code"] == "payload_too_large" and str(MAX_BODY_BYTES) in problem["detail"]
    small = await client.post(
        "/v1/entries",
        json={"entry_type": "finding", "performative": "inform", "content": "fits"},
        headers=agent.headers,
    )
    assert small.status == 201, await small.text()


async def test_the_rate_limit_is_the_one_given(aiohttp_client: MakeClient, data_dir: tuple[Path, str]) -> None:
    limit = limits.RateLimit(rate=0.001, burst=2)
    app = create_app(Node(data_dir[0]), rate_limit=limit, sync=SyncSettings(pull=False))
    assert app[LIMIT] is limit
    client = await aiohttp_client(app)
    assert [(await client.get("/v1/node")).status for _ in range(2)] == [200, 200]
    refused = await client.get("/v1/node")
    assert refused.status == 429 and int(refused.headers["Retry-After"]) >= 1
    assert (await refused.json())["code"] == "rate_limited"


def test_defaults_when_no_limit_or_sync_settings_are_given(data_dir: tuple[Path, str]) -> None:
    node = Node(data_dir[0])
    app = create_app(node)
    assert app[NODE] is node
    assert app[LIMIT] == limits.RateLimit() and app[LIMIT].rate == 0  # no limiting
    assert app[SYNC_SETTINGS] == SyncSettings()


@pytest.mark.sqlite_only(reason="build() initialises an empty folder with the default store, a SQLite file in it")
async def test_build_initialises_an_empty_folder(aiohttp_client: MakeClient, tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    app = build(root)
    assert DataDir(root).exists()
    node = app[NODE]
    assert not node.db.is_open and node.node_id == require_node(root)
    client = await aiohttp_client(app)
    assert (await (await client.get("/v1/node")).json())["node_id"] == node.node_id
    await client.close()
    assert build(root)[NODE].node_id == node.node_id  # an existing node is kept


async def test_a_background_feature_failing_to_start_on_postgresql_is_logged_and_left_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`_off_if_unported` (record 80): a PostgreSQL error while a feature's background work starts is logged with the
    feature's name and the app goes on; its stop runs after a start that succeeded; any other error stops the app."""
    stopped: list[str] = []

    def context(error: Exception | None) -> Callable[[web.Application], AsyncIterator[None]]:
        async def run(app: web.Application) -> AsyncIterator[None]:
            if error is not None:
                raise error
            yield
            stopped.append("stopped")

        return run

    app = web.Application()
    unported = _off_if_unported("push", context(neutral.OperationalError("could not determine data type")))
    with caplog.at_level(logging.ERROR, logger="bbs.app"):
        async for _ in unported(app):
            pass
    assert "push: not available on PostgreSQL yet" in caplog.text
    async for _ in _off_if_unported("trust", context(None))(app):
        pass
    assert stopped == ["stopped"]
    with pytest.raises(ValueError):
        async for _ in _off_if_unported("bug", context(ValueError("a bug")))(app):
            pass
