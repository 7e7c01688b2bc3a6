"""node.web.appkeys: the typed keys of the node's aiohttp application. A built app holds each key the factory sets,
with the object its type names; the metrics side listener reaches the main app through METRICS_SOURCE."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient

from node.app import create_app
from node.federation.routes import SyncSettings, SyncState
from node.ops import metrics
from node.push.routes import PushHolder
from node.service import Node
from node.web import appkeys, limits
from node.web.appkeys import (
    LIMIT,
    METRICS,
    METRICS_SOURCE,
    NODE,
    PUSH,
    PUSH_SETTINGS,
    REQUEST_OBSERVER,
    SEARCH_INDEXER,
    SYNC,
    SYNC_SETTINGS,
)
from scenarios.fednet import free_port


def test_every_key_is_a_distinct_app_key() -> None:
    found = {name: value for name, value in vars(appkeys).items() if isinstance(value, web.AppKey)}
    assert set(found) == {
        "NODE", "LIMIT", "METRICS", "METRICS_SOURCE", "REQUEST_OBSERVER", "SYNC", "SYNC_SETTINGS", "PUSH",
        "PUSH_SETTINGS", "SEARCH_INDEXER",
    }  # fmt: skip
    assert len(set(map(id, found.values()))) == len(found)
    names = [repr(key) for key in found.values()]
    assert len(set(names)) == len(names)


def test_a_built_app_holds_each_key_with_its_object(data_dir: tuple[Path, str]) -> None:
    node = Node(data_dir[0])
    limit = limits.RateLimit(rate=5, burst=10)
    settings = SyncSettings(pull=False, wait_ms=1000)
    app = create_app(node, rate_limit=limit, sync=settings)
    assert app[NODE] is node
    assert app[LIMIT] is limit
    assert app[SYNC_SETTINGS] is settings
    assert isinstance(app[METRICS], metrics.Metrics) and metrics.metrics_of(app) is app[METRICS]
    assert app[REQUEST_OBSERVER] == app[METRICS].observe_request
    state = app[SYNC]
    assert isinstance(state, SyncState) and state.store is node.sync and state.scheduler is None
    assert METRICS_SOURCE not in app  # only the side listener of metrics.serve_separately holds it
    assert isinstance(app[PUSH], PushHolder) and app[PUSH].dispatcher is None  # the dispatcher runs from start-up
    assert PUSH_SETTINGS not in app  # set by `bbs serve` (push_routes.configure); defaults otherwise
    assert SEARCH_INDEXER not in app  # set at start-up, when the node opened its search index


async def test_requests_reach_the_observer_the_app_holds(client: TestClient, admin_headers: dict[str, str]) -> None:
    assert (await client.get("/healthz")).status == 200
    scrape = await client.get("/metrics", headers=admin_headers)
    assert scrape.status == 200
    assert 'route="/healthz"' in await scrape.text()


async def test_the_side_listener_reports_the_main_app_through_metrics_source(
    aiohttp_client: Callable[..., Awaitable[TestClient]], node: Node
) -> None:
    app = create_app(node, sync=SyncSettings(pull=False))
    port = free_port()
    metrics.serve_separately(app, "127.0.0.1", port)
    client = await aiohttp_client(app)
    assert (await client.get("/healthz")).status == 200
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as resp:
        assert resp.status == 200  # no credential on the side listener
        text = await resp.text()
    assert 'route="/healthz"' in text  # the main app's requests, not the side app's
