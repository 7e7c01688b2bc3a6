"""REST routes of federation: peer administration, the digest, and the peer-signed sync endpoints.

`sync_context` (an aiohttp cleanup context) holds what every process serving the node needs; `pull_context` runs
the scheduler that pulls from every configured peer, in the process leading the node.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

import aiohttp
import msgspec
from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from node.errors import InvalidInput
from node.federation.node_replay import NodeReplay
from node.federation.peer_auth import authenticate_peer, signed_body
from node.federation.store import NodeSyncStore
from node.ops.metrics import metrics_of
from node.store.side import SideConnection
from node.web.appkeys import NODE, SYNC, SYNC_SETTINGS
from node.web.http import Route, convert, decode_json, decode_query, json_response, read_json
from sync import messages as m
from sync.auth import PeerAuthError, PeerVerifier
from sync.puller import Puller, Scheduler
from sync.replay import FENCE_NAME, ReplayFence
from sync.server import BadSyncMessage, SyncServer

log = logging.getLogger("bbs.sync")


@dataclass
class SyncState:
    """Federation objects of one running app."""

    store: NodeSyncStore
    server: SyncServer
    verifier: PeerVerifier
    scheduler: Scheduler | None = None
    # a node on PostgreSQL (any number of processes): the boot generation and nonces in its database (record 86)
    replay: NodeReplay | None = None


def _state(request: web.Request) -> SyncState:
    return request.app[SYNC]


def _decode(body: bytes, typ: type[msgspec.Struct]) -> msgspec.Struct:
    return convert(decode_json(body), typ)


def _speaks(v: int) -> None:
    """A peer of a sync protocol version this node does not speak (its own and the one before it) is answered 422
    naming the ones it speaks (`sync.client.spoken_versions` reads them)."""
    if v not in m.SYNC_VERSIONS:
        spoken = " and ".join(f"v{n}" for n in sorted(m.SYNC_VERSIONS, reverse=True))
        raise InvalidInput(
            f"this node speaks sync protocol {spoken}, not v{v}: upgrade the older node",
            field="$.v",
            code="unsupported_sync_version",
        )


async def sync_changes(request: web.Request) -> web.Response:
    peer_id = await authenticate_peer(request, None)
    q = decode_query(request, m.ChangesQuery)
    _speaks(q.v)
    return json_response(await _state(request).server.changes(q, peer_id))


async def sync_fetch(request: web.Request) -> web.Response:
    body = await signed_body(request)
    peer_id = await authenticate_peer(request, body)
    req = _decode(body, m.FetchRequest)
    assert isinstance(req, m.FetchRequest)
    _speaks(req.v)
    return json_response(await _state(request).server.fetch(req, peer_id))


async def sync_bodies(request: web.Request) -> web.Response:
    body = await signed_body(request)
    peer_id = await authenticate_peer(request, body)
    req = _decode(body, m.BodiesRequest)
    assert isinstance(req, m.BodiesRequest)
    _speaks(req.v)
    try:
        return json_response(await _state(request).server.bodies(req, peer_id))
    except BadSyncMessage as exc:
        raise InvalidInput(str(exc), field=exc.field, code=exc.code) from None


async def sync_reconcile(request: web.Request) -> web.Response:
    body = await signed_body(request)
    peer_id = await authenticate_peer(request, body)
    req = _decode(body, m.ReconcileRequest)
    assert isinstance(req, m.ReconcileRequest)
    _speaks(req.v)
    try:
        return json_response(await _state(request).server.reconcile(req, peer_id))
    except BadSyncMessage as exc:
        raise InvalidInput(str(exc), field=exc.field, code=exc.code) from None


async def sync_digest(request: web.Request) -> web.Response:
    q = decode_query(request, m.DigestQuery)
    _speaks(q.v)
    return json_response(await _state(request).store.digest(q.v, q.space))


async def add_peer(request: web.Request) -> web.Response:
    body = convert(await read_json(request), m.PeerIn)
    state = _state(request)
    status = await state.store.add_peer(body)
    if state.scheduler is not None:
        state.scheduler.poke()
    return json_response(status, 201)


async def list_peers(request: web.Request) -> web.Response:
    return json_response(await _state(request).store.listing())


PEER_ROUTES: list[Route] = [
    Route(
        "POST",
        "/v1/peers",
        add_peer,
        "Add (or re-address) a peer node to pull from and accept sync requests from (admin)",
        "admin",
        body=m.PeerIn,
        responses={201: m.PeerStatus},
        tag="federation",
    ),
    Route(
        "GET",
        "/v1/peers",
        list_peers,
        "Peers: cursor, lag, last error, per-record outcome counters; equivocating authors (admin)",
        "admin",
        responses={200: m.PeerList},
        tag="federation",
    ),
    Route(
        "GET",
        "/v1/sync/digest",
        sync_digest,
        "Count and SHA-256 of the sorted versions of the public federation's records (space=: of one space's, equal"
        " on its hosts once in sync); v=2: of the v2-compatible ones (admin)",
        "admin",
        query=m.DigestQuery,
        responses={200: m.Digest},
        tag="federation",
    ),
    Route(
        "GET",
        "/v1/sync/changes",
        sync_changes,
        "Changes feed: federated records after a cursor, long-polling with wait_ms; ids=1: ids and sizes, ids=2: the"
        " same packed in binary (peer-signed)",
        "peer",
        query=m.ChangesQuery,
        responses={200: m.FeedReply},
        tag="federation",
    ),
    Route(
        "POST",
        "/v1/sync/fetch",
        sync_fetch,
        "Federated versions by address or version (peer-signed)",
        "peer",
        body=m.FetchRequest,
        responses={200: m.Records},
        tag="federation",
    ),
    Route(
        "POST",
        "/v1/sync/bodies",
        sync_bodies,
        "The bodies of records by their seqs here, after a compact ids page: bodies alone, in seq order (peer-signed)",
        "peer",
        body=m.BodiesRequest,
        responses={200: m.Bodies},
        tag="federation",
    ),
    Route(
        "POST",
        "/v1/sync/reconcile",
        sync_reconcile,
        "One negentropy reconciliation round, this node responding (peer-signed)",
        "peer",
        body=m.ReconcileRequest,
        responses={200: m.ReconcileReply},
        tag="federation",
    ),
]


@dataclass(frozen=True)
class SyncSettings:
    """How this node pulls from its peers (`bbs serve` fills it from the config: sync, sync_wait_ms,
    reconcile_every_s, sync_min_poll_ms). `pull=False` serves the sync endpoints but never pulls."""

    pull: bool = True
    wait_ms: int = 20_000
    reconcile_every_s: float = 300.0
    min_poll_ms: int = 250


class PeerHealthCollector(Collector):
    """/metrics families of the puller's per-peer health (sync/messages.py PeerHealth), read at scrape time."""

    FAMILIES = (
        ("bbs_sync_failures", "Failed sync attempts with the peer (each backs off)", "failures", True),
        ("bbs_sync_consecutive_failures", "Failed sync attempts with the peer since its last good round",
         "consecutive_failures", False),
        ("bbs_sync_fetch_failures", "Failed fetches by hash from the peer (unreachable or unrequested records)",
         "fetch_failures", True),
        ("bbs_sync_throttled_polls", "Polls delayed to keep sync_min_poll_ms after an early empty long-poll",
         "throttled_polls", True),
        ("bbs_sync_reconnect_reconciliations", "Reconciliations run at once when the peer answered again",
         "reconnect_reconciliations", True),
        ("bbs_sync_resigned_requests", "Requests signed again because the peer had restarted",
         "resigned_requests", True),
        ("bbs_sync_waiting_for_peer", "1 while the peer answers 403 unknown_peer: it has not added this node yet",
         "waiting_for_peer", False),
    )  # fmt: skip

    def __init__(self, state: SyncState) -> None:
        self.state = state

    def collect(self) -> Iterable[Metric]:
        health = self.state.scheduler.puller.health if self.state.scheduler is not None else {}
        for name, help, attr, counter in self.FAMILIES:
            family = (CounterMetricFamily if counter else GaugeMetricFamily)(name, help, labels=["peer"])
            for peer, h in sorted(health.items()):
                family.add_metric([peer], float(getattr(h, attr)))
            yield family
        offsets = GaugeMetricFamily(
            "bbs_sync_peer_clock_offset_seconds",
            "The peer's clock minus this node's, from the Date of its last answer (beyond 5 s: fix with NTP)",
            labels=["peer"],
        )
        for peer, h in sorted(health.items()):
            if h.clock_offset_s is not None:
                offsets.add_metric([peer], h.clock_offset_s)
        yield offsets
        legacy = CounterMetricFamily(
            "bbs_sync_previous_release_requests",
            "Peer requests accepted without a boot id (peers of the previous release), under the replay fence",
        )
        legacy.add_metric([], self.state.verifier.legacy)
        yield legacy
        if self.state.replay is not None:  # a node on PostgreSQL (record 86)
            drawn = CounterMetricFamily(
                "bbs_sync_boot_generations_drawn",
                "Boot generations this process drew: the database held none (its first, or the peer nonces were lost"
                " in a crash of the server, a failover or a restore)",
            )
            drawn.add_metric([], self.state.replay.drawn)
            yield drawn

    def describe(self) -> Iterable[Metric]:
        return []


def install(app: web.Application) -> None:
    """Mount federation's state on an app being built (after `app[SYNC_SETTINGS]` is set): the sync store,
    server and verifier, and the long-poll wake-up on shutdown. `sync_context` runs the scheduler."""
    node = app[NODE]
    store = node.sync
    # PostgreSQL: the boot id and the nonces are the node's, not this process's; on a connection of their own, so
    # that a flood of challenge asks (node.side) never queues a peer request behind it
    url = node.db.pg_url
    replay = None if url is None else NodeReplay(SideConnection(url))
    state = SyncState(store, SyncServer(store), PeerVerifier(), replay=replay)
    app[SYNC] = state
    metrics_of(app).registry.register(PeerHealthCollector(state))

    async def wake_long_polls(app: web.Application) -> None:
        state.server.closing.set()

    app.on_shutdown.append(wake_long_polls)


async def sync_context(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context of every process: the replay fence of the peers' signed requests, and the long-polls' wake-up
    on stopping. The pulling is `pull_context`'s, leader work."""
    state = app[SYNC]
    if state.replay is None:
        # read once the previous process is gone (bbs serve holds the data lock by now): its accepted signatures
        state.verifier.fence = ReplayFence.load(app[NODE].data.root / FENCE_NAME)
    else:  # the node's generation (drawn if the database holds none), and no file: nonces outlive this process
        try:
            state.verifier.boot_id = (await state.replay.current())[0]
        except PeerAuthError as exc:  # the database is down: the first peer request or GET /v1/node draws it
            log.warning("the boot generation could not be read at start: %s", exc.detail)
    state.server.closing.clear()
    try:
        yield
    finally:
        state.server.closing.set()


async def pull_context(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context: the scheduler pulling from every configured peer (unless `app[SYNC_SETTINGS].pull` is
    false), once per node (node/features.py wraps it in `leader_only`), stopped before the node closes."""
    state = app[SYNC]
    settings = app[SYNC_SETTINGS]
    if not settings.pull:
        yield
        return
    session = aiohttp.ClientSession()
    state.scheduler = scheduler = Scheduler(
        Puller(
            state.store,
            app[NODE].node_keys.signer,
            session,
            wait_ms=settings.wait_ms,
            reconcile_every_s=settings.reconcile_every_s,
            min_poll_s=settings.min_poll_ms / 1000,
            listed=state.server.listed,  # what a peer lists to the puller is never listed back to it
        )
    )
    task = asyncio.create_task(scheduler.run(), name="sync scheduler")
    try:
        yield
    finally:
        scheduler.halt()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        state.scheduler = None
        await session.close()
        if state.replay is not None:
            await state.replay.side.close()
