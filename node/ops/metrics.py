"""Prometheus metrics: HTTP traffic from the access-log middleware, store state from SQL at scrape time, and hooks.

Each application has its own registry (`app[METRICS]`). `/metrics` on the main listener needs the admin
token; `serve_separately` adds an unauthenticated listener on another address for a scraper on a private
network.

Hooks for other features:
- a `SqlGauge(name, help, labels, sql)` in `SQL_GAUGES` (node/ops/store.py, with the other SQL of ops): a gauge
  filled at every scrape from one query whose rows are (*label values, value). `:now_ms` is bound to the node's
  clock. A gauge whose table does not exist (yet) is left empty. Use it for live leases, candidates by status, etc.
  A statement that is not portable SQL gives PostgreSQL's form as `sql_pg` (docs/decisions.md record 50).
- `metrics_of(app).counter/gauge/histogram(name, help, labels)` for events counted in process (sync
  outcomes per peer, sync lag), get-or-create, so two modules asking for one name share it.
- `metrics_of(app).on_scrape(async_fn)` to refresh a gauge just before each scrape.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from node.ops import store
from node.store.db import Database
from node.web.appkeys import METRICS, METRICS_SOURCE, NODE, REQUEST_OBSERVER
from node.web.auth import guard
from node.web.http import Route

if TYPE_CHECKING:
    from node.service import Node

log = logging.getLogger("bbs.metrics")
_METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}


class _SqlCollector(Collector):
    """Serves the rows the last refresh read; refreshed by `Metrics.render` before every scrape."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple[Any, ...]]] = {}

    def collect(self) -> Iterable[Metric]:
        for gauge in store.SQL_GAUGES:
            rows = self.rows.get(gauge.name)
            if rows is None:
                continue
            family = GaugeMetricFamily(gauge.name, gauge.help, labels=list(gauge.labels))
            for row in rows:
                family.add_metric([str(v) for v in row[:-1]], float(row[-1]))
            yield family

    def describe(self) -> Iterable[Metric]:
        return []


class _DatabaseCollector(Collector):
    """The database's counters (node.store.db.WriterStats and ReadStats), read at scrape time."""

    def __init__(self, db: Callable[[], Database]) -> None:
        self.db = db

    def collect(self) -> Iterable[Metric]:
        s, r, w = self.db().stats, self.db().read_stats, self.db().wakeups.stats
        for name, help, value in (
            ("bbs_writer_transactions", "Write transactions the single writer ran (group commits)", s.transactions),
            ("bbs_writer_rolled_back", "Write transactions rolled back as a whole (none of their jobs acknowledged)",
             s.rolled_back),
            ("bbs_writer_jobs", "Write jobs run; jobs / transactions is the group-commit batch size", s.jobs),
            ("bbs_writer_busy_seconds", "Time the writer spent in transactions, COMMIT included; its rate is the"
             " writer's occupancy (near 1: the writer is the bottleneck)", s.busy_seconds),
            ("bbs_writer_cpu_seconds", "CPU time of the writer thread in its transactions (busy - cpu: waiting for"
             " the GIL or the disk)", s.cpu_seconds),
            ("bbs_writer_statements", "SQL statements the writer ran (BEGIN, SAVEPOINT and COMMIT included)",
             s.statements),
            ("bbs_writer_statement_seconds", "Wall time of the writer inside SQL statements, COMMIT included"
             " (busy - this: Python in the transaction)", s.statement_seconds),
            ("bbs_writer_statement_cpu_seconds", "CPU time of the writer inside SQL statements",
             s.statement_cpu_seconds),
            ("bbs_writer_commit_seconds", "Wall time of the writer's COMMITs (fsync, then the GIL)", s.commit_seconds),
            ("bbs_writer_commit_cpu_seconds", "CPU time of the writer's COMMITs", s.commit_cpu_seconds),
            ("bbs_commit_wakeups_received", "Other processes' commits this process was told of (PostgreSQL LISTEN),"
             " each waking its waiters", w.received),
            ("bbs_commit_listen_reconnects", "Times the LISTEN connection was lost and opened again (every waiter then"
             " reads again)", w.reconnects),
            ("bbs_reads_inline", "Quick reads answered on the event loop within the inline budget", r.inline),
            ("bbs_reads_moved", "Quick reads stopped at the inline budget (or finding the database busy) and run"
             " again on a reader thread",
             r.moved),
        ):  # fmt: skip
            yield CounterMetricFamily(name, help, value=value)

    def describe(self) -> Iterable[Metric]:
        return []


class _ProcessCollector(Collector):
    """This serving process among the node's (docs/decisions.md record 87): its id, whether it leads, the epoch of
    its latest term, and the terms it began. Each process answers its own /metrics."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def collect(self) -> Iterable[Metric]:
        leadership = self.node.leadership
        info = GaugeMetricFamily(
            "bbs_process_info", "This serving process of the node (one of several on PostgreSQL)", labels=["process_id"]
        )
        info.add_metric([self.node.process_id], 1.0)
        yield info
        yield GaugeMetricFamily(
            "bbs_leader", "1 while this process leads the node (runs its once-per-node work)", value=leadership.leading
        )
        yield GaugeMetricFamily(
            "bbs_leader_epoch",
            "The epoch of this process's latest term as leader (0: it never led; on SQLite always 0)",
            value=leadership.last_epoch,
        )
        yield CounterMetricFamily(
            "bbs_leader_takeovers",
            "Terms this process began as the node's leader since it started",
            value=leadership.takeovers,
        )
        pool = self.node.sealing.pool
        yield GaugeMetricFamily(
            "bbs_worker_processes_up",
            "1 once this process's worker processes (signing large batches, verifying large sync pages) have started;"
            " 0 before the first such work, or if they failed (the work then runs on threads)",
            value=1.0 if pool.up and not pool.failed else 0.0,
        )
        yield CounterMetricFamily("bbs_worker_runs", "Calls the worker processes answered", value=pool.runs)

    def describe(self) -> Iterable[Metric]:
        return []


class Metrics:
    """One application's registry, its HTTP metrics and the scrape hooks."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "bbs_http_requests",
            "HTTP requests by method, route and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "bbs_http_request_duration_seconds",
            "HTTP request latency by method and route",
            ["method", "route"],
            registry=self.registry,
        )
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._sql = _SqlCollector()
        self.registry.register(self._sql)
        self._hooks: list[Callable[[], Awaitable[None]]] = []
        self._made: dict[str, Any] = {}
        self._lock = asyncio.Lock()

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one request and record its latency (the labelled children are looked up once and kept).

        Methods outside the standard ones count as `OTHER`, so a client cannot mint labels."""
        if method not in _METHODS:
            method = "OTHER"
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                self.requests.labels(method, route, str(status)),
                self.latency.labels(method, route),
            )
        children[0].inc()
        children[1].observe(seconds)

    def _get(self, kind: type, name: str, help: str, labels: Iterable[str], **kwargs: Any) -> Any:
        existing = self._made.get(name)
        if existing is None:
            existing = self._made[name] = kind(name, help, list(labels), registry=self.registry, **kwargs)
        elif not isinstance(existing, kind):
            raise ValueError(f"metric {name} already exists as a {type(existing).__name__}")
        return existing

    def counter(self, name: str, help: str, labels: Iterable[str] = ()) -> Counter:
        """Get or create a counter in this registry."""
        return self._get(Counter, name, help, labels)

    def gauge(self, name: str, help: str, labels: Iterable[str] = ()) -> Gauge:
        """Get or create a gauge in this registry."""
        return self._get(Gauge, name, help, labels)

    def histogram(self, name: str, help: str, labels: Iterable[str] = (), **kwargs: Any) -> Histogram:
        """Get or create a histogram in this registry (kwargs: buckets)."""
        return self._get(Histogram, name, help, labels, **kwargs)

    def on_scrape(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Run `hook` before each scrape (to refresh gauges that are cheap to compute on demand)."""
        self._hooks.append(hook)

    async def render(self, app: web.Application) -> bytes:
        """The exposition text, after refreshing the SQL gauges and running the hooks."""
        async with self._lock:
            node = app[NODE]
            now_ms = node.now_ms()
            self._sql.rows = await node.db.read(lambda conn: store.query_gauges(conn, store.SQL_GAUGES, now_ms))
            for hook in self._hooks:
                try:
                    await hook()
                except Exception:  # one broken hook must not take the whole scrape down
                    log.exception("metrics hook %r failed", hook)
            return generate_latest(self.registry)


def metrics_of(app: web.Application) -> Metrics:
    """The application's metrics (created by `install`)."""
    return app[METRICS]


async def _metrics_handler(request: web.Request) -> web.Response:
    app = request.app.get(METRICS_SOURCE) or request.app
    body = await app[METRICS].render(app)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


METRICS_ROUTE = Route("GET", "/metrics", _metrics_handler, "Prometheus metrics", "admin", tag="ops")


def install(app: web.Application) -> Metrics:
    """Give the app its registry and an admin-only GET /metrics (call from the app factory)."""
    metrics = Metrics()
    node = app[NODE]
    metrics.registry.register(_DatabaseCollector(lambda: node.db))
    metrics.registry.register(_ProcessCollector(node))
    app[METRICS] = metrics
    app[REQUEST_OBSERVER] = metrics.observe_request  # called by the access-log middleware for every request
    app.router.add_get("/metrics", guard(METRICS_ROUTE, app[NODE].agents.authenticate))
    return metrics


def serve_separately(app: web.Application, host: str, port: int) -> None:
    """Also serve /metrics without authentication on host:port for as long as `app` runs."""

    async def listener(main: web.Application) -> AsyncIterator[None]:
        side = web.Application()
        side[METRICS_SOURCE] = main
        side.router.add_get("/metrics", _metrics_handler)
        runner = web.AppRunner(side, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        log.info("metrics listening", extra={"address": f"http://{host}:{port}/metrics"})
        yield
        await runner.cleanup()

    app.cleanup_ctx.append(listener)
