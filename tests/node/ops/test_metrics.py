"""Prometheus /metrics: protected on the main port, open on a separate listener, counting real traffic."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from node.app import create_app
from node.ops import metrics, store
from node.service import Node
from scenarios.fednet import free_port
from tests.conftest import AgentCreds, FakeClock

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample as {(name, sorted labels): value}."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def scrape(client: TestClient, headers: dict[str, str]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    resp = await client.get("/metrics", headers=headers)
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"].startswith("text/plain")
    return samples(await resp.text())


async def test_metrics_need_the_admin_token(client: TestClient, make_agent: MakeAgent) -> None:
    resp = await client.get("/metrics")
    assert resp.status == 401 and resp.content_type == "application/problem+json"
    agent = await make_agent("alice")
    resp = await client.get("/metrics", headers=agent.headers)
    assert resp.status == 403 and (await resp.json())["code"] == "admin_required"


async def test_requests_records_and_notifications_are_counted(
    client: TestClient, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    for i in range(3):
        resp = await client.post(
            "/v1/entries",
            json={
                "entry_type": "finding",
                "performative": "inform",
                "content": f"fact {i}",
                "directed_to": [bob.agent_id],
            },
            headers=alice.headers,
        )
        assert resp.status == 201, await resp.text()
    resp = await client.post("/v1/entries", json={"entry_type": "nope"}, headers=alice.headers)
    assert resp.status == 422
    resp = await client.get("/no/such/route/12345")
    assert resp.status == 404

    got = await scrape(client, admin_headers)
    post = (("method", "POST"), ("route", "/v1/entries"), ("status", "201"))
    assert got[("bbs_http_requests_total", post)] == 3
    assert got[("bbs_http_requests_total", (("method", "POST"), ("route", "/v1/entries"), ("status", "422")))] == 1
    assert got[("bbs_http_requests_total", (("method", "GET"), ("route", "unmatched"), ("status", "404")))] == 1
    assert got[("bbs_http_request_duration_seconds_count", (("method", "POST"), ("route", "/v1/entries")))] == 4
    # 3 entries + 2 agent identity documents, all written here
    assert got[("bbs_records", (("kind", "entry"), ("origin", "local")))] == 3
    assert got[("bbs_records", (("kind", "agent"), ("origin", "local")))] == 2
    assert got[("bbs_notifications", (("status", "pending"),))] == 3
    # the id of the unmatched path never becomes a label
    assert not any("12345" in str(key) for key in got)


async def test_the_single_writer_is_measured(
    client: TestClient, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    alice = await make_agent("alice")
    before = await scrape(client, admin_headers)
    body = {"entry_type": "finding", "performative": "inform"}
    answers = await asyncio.gather(
        *(client.post("/v1/entries", json={**body, "content": f"fact {i}"}, headers=alice.headers) for i in range(12))
    )
    assert [a.status for a in answers] == [201] * 12
    after = await scrape(client, admin_headers)

    def grew(name: str) -> float:
        return after[(name, ())] - before[(name, ())]

    assert grew("bbs_writer_jobs_total") >= 12  # each post is at least one job (merged or alone)
    assert 1 <= grew("bbs_writer_transactions_total") <= grew("bbs_writer_jobs_total")
    assert grew("bbs_writer_busy_seconds_total") > 0
    assert after[("bbs_writer_rolled_back_total", ())] == 0
    # where the writer's time went: every transaction runs BEGIN, its statements and COMMIT, inside its busy time
    assert grew("bbs_writer_statements_total") >= 3 * grew("bbs_writer_transactions_total")
    assert 0 < grew("bbs_writer_commit_seconds_total") < grew("bbs_writer_statement_seconds_total")
    assert grew("bbs_writer_statement_seconds_total") <= grew("bbs_writer_busy_seconds_total")
    assert grew("bbs_writer_cpu_seconds_total") > 0
    assert grew("bbs_writer_commit_cpu_seconds_total") <= grew("bbs_writer_cpu_seconds_total")
    assert grew("bbs_writer_statement_cpu_seconds_total") <= grew("bbs_writer_statement_seconds_total")


async def test_sql_gauge_hook_and_missing_tables(
    client: TestClient, admin_headers: dict[str, str], monkeypatch: pytest.MonkeyPatch, make_agent: MakeAgent
) -> None:
    await make_agent("carol")
    gauges = [
        *store.SQL_GAUGES,
        store.SqlGauge("bbs_test_agents", "agents by name", ("name",), "SELECT name, 1 FROM local_agents"),
        store.SqlGauge("bbs_test_missing", "a feature not installed", (), "SELECT count(*) FROM no_such_table"),
        store.SqlGauge("bbs_test_clock", "now", (), "SELECT :now_ms"),
    ]
    monkeypatch.setattr(store, "SQL_GAUGES", gauges)
    got = await scrape(client, admin_headers)
    assert got[("bbs_test_agents", (("name", "carol"),))] == 1
    assert not any(name == "bbs_test_missing" for name, _ in got)
    assert got[("bbs_test_clock", ())] > 0


async def test_in_process_metrics_and_scrape_hooks(client: TestClient, admin_headers: dict[str, str]) -> None:
    m = metrics.metrics_of(client.app)
    outcome = m.counter("bbs_test_outcomes", "sync outcomes", ["peer", "outcome"])
    assert m.counter("bbs_test_outcomes", "sync outcomes", ["peer", "outcome"]) is outcome
    outcome.labels("did:key:zPeer", "saved").inc(5)
    lag = m.gauge("bbs_test_lag", "lag")

    async def refresh() -> None:
        lag.set(7)

    async def broken() -> None:
        raise RuntimeError("a broken hook must not break the scrape")

    m.on_scrape(broken)
    m.on_scrape(refresh)
    with pytest.raises(ValueError):
        m.gauge("bbs_test_outcomes", "clash")
    got = await scrape(client, admin_headers)
    assert got[("bbs_test_outcomes_total", (("outcome", "saved"), ("peer", "did:key:zPeer")))] == 5
    assert got[("bbs_test_lag", ())] == 7


async def test_separate_listener_serves_metrics_without_token(
    aiohttp_client: Callable[..., Awaitable[TestClient]], node: Node
) -> None:
    app = create_app(node)
    port = free_port()
    metrics.serve_separately(app, "127.0.0.1", port)
    client = await aiohttp_client(app)
    assert (await client.get("/healthz")).status == 200
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as resp:
        assert resp.status == 200
        got = samples(await resp.text())
    assert got[("bbs_http_requests_total", (("method", "GET"), ("route", "/healthz"), ("status", "200")))] == 1
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/v1/node") as resp:
        assert resp.status == 404  # only /metrics lives on the side listener
    assert isinstance(app, web.Application)


async def test_tasks_and_live_leases(
    client: TestClient, make_agent: MakeAgent, admin_headers: dict[str, str], clock: FakeClock
) -> None:
    alice = await make_agent("alice")
    base = "/v1/agent-workflows/tasks"
    for key in ("build", "ship"):
        resp = await client.post(base, json={"key": key, "title": key}, headers=alice.headers)
        assert resp.status == 201, await resp.text()
    resp = await client.post(f"{base}/build/lease", json={"seconds": 60}, headers=alice.headers)
    assert resp.status in (200, 201), await resp.text()
    got = await scrape(client, admin_headers)
    assert got[("bbs_leases_live", (("home", "here"),))] == 1
    assert sum(v for (name, _), v in got.items() if name == "bbs_tasks") == 2
    clock.advance(61)  # the lease runs out by the node's clock
    got = await scrape(client, admin_headers)
    assert ("bbs_leases_live", (("home", "here"),)) not in got
