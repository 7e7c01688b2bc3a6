"""REST routes of push endpoints, the app's set-up, the dispatcher as a background task, and its metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from node.errors import InvalidInput, Unavailable
from node.ops.metrics import metrics_of
from node.push import store as push_store
from node.push.dispatcher import Dispatcher
from node.push.endpoints import Endpoint, Origin, PushEndpoints, check_url
from node.push.sender import PushSettings
from node.web.appkeys import NODE, PUSH, PUSH_SETTINGS
from node.web.auth import agent_id
from node.web.http import Route, convert, json_response, read_json
from sync.store import RoundFailures
from wire.push import PushEndpointIn, PushEndpointList, PushEndpointOut, PushState, PushStatus, PushTestOut
from wire.time import format_ms

COUNTERS = ("messages_sent", "messages_failed", "attempts_failed", "notifications_pushed")
ENDPOINTS_RELOAD_S = 1.0  # PostgreSQL: how often the leading process takes the endpoints again and scans
log = logging.getLogger("bbs.push")


@dataclass
class PushHolder:
    """The app's push service: the endpoints, and the dispatcher while the app runs; `own` are the node's
    listening origins (`bbs serve` adds them to the settings), refused as endpoints."""

    endpoints: PushEndpoints
    dispatcher: Dispatcher | None = None
    retired: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))

    def running(self) -> Dispatcher:
        if self.dispatcher is None:
            raise Unavailable("the push dispatcher is not running")
        return self.dispatcher

    def state(self, endpoint: Endpoint) -> PushState:
        sender = self.dispatcher.senders.get(endpoint.id) if self.dispatcher else None
        return sender.state if sender is not None else PushState()

    def out(self, endpoint: Endpoint) -> PushEndpointOut:
        return PushEndpointOut(
            id=endpoint.id,
            agent_id=endpoint.agent_id,
            url=endpoint.url,
            tiers=sorted(endpoint.tiers),
            reasons=sorted(endpoint.reasons),
            created_at=format_ms(endpoint.created_ms),
            state=self.state(endpoint),
        )

    async def reload(self) -> None:
        """The dispatcher takes the endpoints anew; the counts of deleted ones stay in the totals."""
        if self.dispatcher is None:
            return
        before = {i: s.state for i, s in self.dispatcher.senders.items()}
        await self.dispatcher.reload()
        for gone in set(before) - set(self.dispatcher.senders):
            for name in COUNTERS:
                self.retired[name] += getattr(before[gone], name)


def configure(app: web.Application, allowlist: str, host: str, ports: Iterable[int | None]) -> None:
    """Push settings from `bbs serve`'s config: the allowlist (comma-separated URL prefixes) and the node's
    listening origins (`host` with each port given), refused as endpoints."""
    prefixes = tuple(p.strip() for p in allowlist.split(",") if p.strip())
    own = tuple(Origin(host.lower(), port) for port in ports if port)
    app[PUSH_SETTINGS] = PushSettings(allowlist=prefixes, own=own)


def settings_of(app: web.Application) -> PushSettings:
    return app.get(PUSH_SETTINGS) or PushSettings()


def _holder(request: web.Request) -> PushHolder:
    return request.app[PUSH]


def _endpoint_id(request: web.Request) -> int:
    raw = request.match_info["endpoint_id"]
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise InvalidInput("endpoint id must be an integer", field="endpoint_id")
    return int(raw)


def own_origins(request: web.Request, configured: Iterable[Origin]) -> list[Origin]:
    """The node's listening origins: the configured ones and the one this request reached."""
    own = list(configured)
    with contextlib.suppress(ValueError, UnicodeError):
        url = request.url
        if url.host and url.port:
            own.append(Origin(url.host.lower(), url.port))
    return own


async def post_endpoint(request: web.Request) -> web.Response:
    body = convert(await read_json(request), PushEndpointIn)
    holder, settings = _holder(request), settings_of(request.app)
    check_url(
        body.url,
        own=own_origins(request, settings.own),
        peers=await holder.endpoints.peer_urls(),
        allowlist=settings.allowlist,
    )
    endpoint, created = await holder.endpoints.register(agent_id(request), body)
    await holder.reload()
    return json_response(holder.out(endpoint), 201 if created else 200)


async def list_endpoints(request: web.Request) -> web.Response:
    holder = _holder(request)
    return json_response(PushEndpointList([holder.out(e) for e in await holder.endpoints.of_agent(agent_id(request))]))


async def delete_endpoint(request: web.Request) -> web.Response:
    holder = _holder(request)
    await holder.endpoints.delete(agent_id(request), _endpoint_id(request))
    await holder.reload()
    return web.Response(status=204)


async def test_endpoint(request: web.Request) -> web.Response:
    holder = _holder(request)
    endpoint = await holder.endpoints.get(agent_id(request), _endpoint_id(request))
    return json_response(await holder.running().test(endpoint))


async def push_status(request: web.Request) -> web.Response:
    holder, settings = _holder(request), settings_of(request.app)
    dispatcher = holder.dispatcher
    return json_response(
        PushStatus(
            endpoints=[holder.out(e) for e in await holder.endpoints.all()],
            in_flight=dispatcher.in_flight if dispatcher else 0,
            max_concurrency=settings.max_concurrency,
            coalesce_ms=int(settings.coalesce_s * 1000),
        )
    )


class _PushCollector(Collector):
    """Push totals and breaker states, read at scrape time."""

    def __init__(self, holder: PushHolder) -> None:
        self.holder = holder

    def collect(self) -> Iterable[Metric]:
        senders = list(self.holder.dispatcher.senders.values()) if self.holder.dispatcher else []
        helps = {
            "messages_sent": "Push messages an endpoint accepted (2xx)",
            "messages_failed": "Push messages given up after every retry or skipped while a breaker was open",
            "attempts_failed": "Push attempts that failed (no answer, timeout, non-2xx)",
            "notifications_pushed": "Notifications carried by accepted push messages (listed or counted)",
        }
        for name in COUNTERS:
            total = self.holder.retired[name] + sum(getattr(s.state, name) for s in senders)
            yield CounterMetricFamily(f"bbs_push_{name}", helps[name], value=total)
        breakers = GaugeMetricFamily(
            "bbs_push_endpoints", "Push endpoints by circuit-breaker state", labels=["breaker"]
        )
        for state in ("closed", "open", "half_open"):
            breakers.add_metric([state], sum(1 for s in senders if s.state.breaker == state))
        yield breakers
        in_flight = self.holder.dispatcher.in_flight if self.holder.dispatcher else 0
        yield GaugeMetricFamily("bbs_push_in_flight", "Push requests in flight", value=in_flight)

    def describe(self) -> Iterable[Metric]:
        return []


def install(app: web.Application) -> None:
    """Mount the push service on an app being built (the dispatcher starts with `push_context`)."""
    node = app[NODE]
    holder = PushHolder(PushEndpoints(node.db, node.now_ms))
    app[PUSH] = holder
    metrics_of(app).registry.register(_PushCollector(holder))


async def push_context(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context of every process: the dispatcher's endpoints and HTTP session, from start-up (after the node
    opened) until the app stops, so a test push and the status answer in any process. Its scanning and sending is
    `push_dispatching`'s, leader work."""
    holder = app[PUSH]
    node = app[NODE]
    dispatcher = Dispatcher(node.db, node.key, holder.endpoints, settings_of(app))
    await dispatcher.start()
    holder.dispatcher = dispatcher
    try:
        yield
    finally:
        holder.dispatcher = None
        await dispatcher.stop()


async def push_dispatching(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context: the dispatcher scanning new notifications and pushing them, once per node (node/features.py
    wraps it in `leader_only`). A term starts from the newest notification (a push is a hint: the inbox holds what
    was made before). On PostgreSQL, where another process may register an endpoint or commit a notification, it
    takes the endpoints again and scans every `ENDPOINTS_RELOAD_S` as well."""
    holder = app[PUSH]
    node = app[NODE]
    dispatcher = holder.dispatcher
    if dispatcher is None:
        yield
        return
    dispatcher.cursor = await node.db.read(push_store.newest_notification_id)
    await holder.reload()
    tasks = [asyncio.create_task(dispatcher.run(), name="push dispatcher")]
    if node.db.pg_url is not None:

        async def reload() -> None:
            rounds = RoundFailures(log, "reloading the push endpoints")
            while True:
                await asyncio.sleep(ENDPOINTS_RELOAD_S)
                try:
                    await holder.reload()
                    dispatcher.poke()
                    rounds.passed()
                except Exception as exc:
                    if node.db.is_open:
                        rounds.failed(exc)

        tasks.append(asyncio.create_task(reload(), name="push endpoints reload"))
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


ROUTES: list[Route] = [
    Route(
        "POST",
        "/v1/push/endpoints",
        post_endpoint,
        "Register a push endpoint (NLIP messages on new notifications); the same URL again updates it",
        "agent",
        body=PushEndpointIn,
        responses={201: PushEndpointOut, 200: PushEndpointOut},
        tag="push",
    ),
    Route(
        "GET",
        "/v1/push/endpoints",
        list_endpoints,
        "Your push endpoints, with what the node knows of their deliveries",
        "agent",
        responses={200: PushEndpointList},
        tag="push",
    ),
    Route(
        "DELETE",
        "/v1/push/endpoints/{endpoint_id}",
        delete_endpoint,
        "Remove one of your push endpoints",
        "agent",
        responses={204: None},
        tag="push",
    ),
    Route(
        "POST",
        "/v1/push/endpoints/{endpoint_id}/test",
        test_endpoint,
        "Send one test push to one of your endpoints now and report the outcome",
        "agent",
        responses={200: PushTestOut},
        tag="push",
    ),
    Route(
        "GET",
        "/v1/push/status",
        push_status,
        "Every push endpoint of the node with its delivery state (admin)",
        "admin",
        responses={200: PushStatus},
        tag="push",
    ),
]
