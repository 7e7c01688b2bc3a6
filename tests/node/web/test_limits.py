"""Limits: per-credential rate limits (429 + Retry-After), body and JSON depth limits, slow bodies, page and
hops caps, subscriptions per agent, and a full disk that keeps serving reads and loses nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.app import create_app
from node.service import Node
from node.web.limits import RateLimit, TokenBuckets
from tests.conftest import AgentCreds, FakeClock
from tests.node.disk_full import fill, free

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
POST = {"entry_type": "finding", "performative": "inform"}


async def problem(resp: Any, status: int, code: str) -> dict[str, Any]:
    body = await resp.json(content_type=None)
    assert resp.status == status, body
    assert resp.content_type == "application/problem+json"
    assert body["code"] == code, body
    return dict(body)


def test_token_bucket_refills_at_its_rate(clock: FakeClock) -> None:
    buckets = TokenBuckets(RateLimit(rate=2.0, burst=3), clock)
    assert [buckets.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a") == pytest.approx(0.5)
    assert buckets.take("b") == 0.0  # buckets are per key
    clock.advance(0.5)
    assert buckets.take("a") == 0.0
    assert buckets.wait("a") > 0 and buckets.wait("unseen") == 0.0  # looking spends nothing
    assert buckets.take("a") > 0


async def test_rate_limit_is_per_credential_with_retry_after(
    aiohttp_client: Callable[..., Awaitable[TestClient]], node: Node, make_agent: MakeAgent
) -> None:
    client = await aiohttp_client(create_app(node, RateLimit(rate=0.001, burst=5)))
    alice, bob = await make_agent("alice"), await make_agent("bob")
    for i in range(5):
        resp = await client.post("/v1/entries", json={**POST, "content": f"a{i}"}, headers=alice.headers)
        assert resp.status == 201
    refused = await client.post("/v1/entries", json={**POST, "content": "one too many"}, headers=alice.headers)
    await problem(refused, 429, "rate_limited")
    assert int(refused.headers["Retry-After"]) >= 1
    resp = await client.get("/v1/search?q=one", headers=bob.headers)  # another agent is unaffected
    assert resp.status == 200
    # the refused write stored nothing
    count = await node.db.read(lambda c: c.execute("SELECT count(*) FROM entries").fetchone()[0])
    assert count == 5
    assert (await client.get("/healthz")).status == 200  # requests without a key have their own bucket


async def test_requests_without_a_key_share_one_bucket_per_address(
    aiohttp_client: Callable[..., Awaitable[TestClient]], node: Node, make_agent: MakeAgent
) -> None:
    """Health, node info and the key-proof handshake (which writes a challenge) cannot be flooded either."""
    client = await aiohttp_client(create_app(node, RateLimit(rate=0.001, burst=4)))
    alice = await make_agent("alice")
    for path in ("/healthz", "/v1/node", "/openapi.json"):
        assert (await client.get(path)).status == 200
    resp = await client.post("/v1/auth/challenge", json={"agent_id": alice.agent_id})
    assert resp.status == 201  # the fourth request without a key
    refused = await client.post("/v1/auth/challenge", json={"agent_id": alice.agent_id})
    body = await problem(refused, 429, "rate_limited")
    assert "without a key" in body["detail"] and int(refused.headers["Retry-After"]) >= 1
    assert await node.challenges.pending() == 1  # the refused request held nothing
    assert (await client.get("/v1/inbox", headers=alice.headers)).status == 200  # a key has its own bucket
    # peer-signed sync routes are bounded by their own caps, not by this bucket: refused for the signature
    resp = await client.get("/v1/sync/changes?wait_ms=0")
    assert resp.status == 401


async def test_an_address_whose_keys_keep_failing_is_refused_before_the_look_up(
    aiohttp_client: Callable[..., Awaitable[TestClient]], node: Node, make_agent: MakeAgent
) -> None:
    """Random key ids each get a fresh bucket, so the 401s of an address are counted in a bucket of their own."""
    client = await aiohttp_client(create_app(node, RateLimit(rate=0.001, burst=3)))
    alice = await make_agent("alice")
    for i in range(3):
        made_up = {"Authorization": f"Bearer bbs_{i:016x}_not-a-secret"}
        assert (await client.get("/v1/inbox", headers=made_up)).status == 401
    refused = await client.get("/v1/inbox", headers=alice.headers)  # even a good key, from that address
    body = await problem(refused, 429, "rate_limited")
    assert "do not verify" in body["detail"] and int(refused.headers["Retry-After"]) >= 1
    assert (await client.get("/healthz")).status == 200  # requests without a key have their own bucket


def test_buckets_are_keyed_by_credential() -> None:
    from aiohttp.test_utils import make_mocked_request

    from node.web.limits import credential_key

    def key(header: str | None) -> str | None:
        return credential_key(make_mocked_request("GET", "/", headers={"Authorization": header} if header else {}))

    assert key(None) is None
    assert key("Bearer bbs_0123456789abcdef_secret") == "bbs_0123456789abcdef"
    assert key("Bearer bbss_fedcba9876543210_secret") == "bbss_fedcba9876543210"  # session tokens: their own
    assert key("Bearer nonsense") == key("Bearer also_nonsense") == "malformed"


async def test_default_app_and_config_limits(tmp_path: Any) -> None:
    from node.ops import config

    assert RateLimit().rate == 0  # create_app without a limit (the test fixtures) does not limit
    cfg = config.load(environ={"BBS_RATE_LIMIT_PER_S": "5", "BBS_RATE_LIMIT_BURST": "10"})
    assert (cfg.rate_limit_per_s, cfg.rate_limit_burst) == (5.0, 10)
    with pytest.raises(config.ConfigError, match="rate_limit_burst"):
        config.load(environ={"BBS_RATE_LIMIT_BURST": "0"})
    defaults = config.load(environ={})
    assert (defaults.anon_rate_limit_per_s, defaults.anon_rate_limit_burst) == (50.0, 500)
    cfg = config.load(environ={"BBS_ANON_RATE_LIMIT_PER_S": "0", "BBS_ANON_RATE_LIMIT_BURST": "7"})
    assert (cfg.anon_rate_limit_per_s, cfg.anon_rate_limit_burst) == (0.0, 7)
    for bad in ({"BBS_ANON_RATE_LIMIT_PER_S": "-1"}, {"BBS_ANON_RATE_LIMIT_BURST": "0"}):
        with pytest.raises(config.ConfigError, match="ANON_RATE_LIMIT"):
            config.load(environ=bad)
    assert RateLimit(5, 10).anonymous() == RateLimit(5, 10)  # unset: as the per-credential limit
    assert RateLimit(5, 10, 1, 2).anonymous() == RateLimit(1, 2)


async def test_unauthenticated_requests_have_their_own_limit(
    aiohttp_client: Callable[..., Awaitable[TestClient]], node: Node, make_agent: MakeAgent
) -> None:
    """A flood of challenge asks from one address is cut at the anonymous limit while keys keep their own."""
    client = await aiohttp_client(create_app(node, RateLimit(rate=1000, burst=1000, anon_rate=0.001, anon_burst=3)))
    alice = await make_agent("alice")
    answers = [(await client.post("/v1/auth/challenge", json={"agent_id": alice.agent_id})).status for _ in range(6)]
    assert answers == [201, 201, 201, 429, 429, 429] and await node.challenges.pending() == 3
    refused = await client.get("/healthz")
    body = await problem(refused, 429, "rate_limited")
    assert "without a key" in body["detail"] and int(refused.headers["Retry-After"]) >= 1
    for _ in range(5):
        assert (await client.get("/v1/inbox", headers=alice.headers)).status == 200


async def test_an_address_whose_peer_signatures_keep_failing_is_refused_before_verifying(
    aiohttp_client: Callable[..., Awaitable[TestClient]], node: Node
) -> None:
    from identity import keys
    from sync.auth import sign_headers

    client = await aiohttp_client(create_app(node, RateLimit(rate=1000, burst=1000, anon_rate=0.001, anon_burst=2)))
    stranger = keys.SigningKey.generate()
    url = str(client.make_url("/v1/sync/changes"))
    assert (await client.get("/v1/sync/changes")).status == 401  # unsigned
    assert (await client.get("/v1/sync/changes", headers=sign_headers(stranger, "GET", url))).status == 403
    refused = await client.get("/v1/sync/changes", headers=sign_headers(stranger, "GET", url))
    body = await problem(refused, 429, "rate_limited")
    assert "signatures that do not verify" in body["detail"] and int(refused.headers["Retry-After"]) >= 1
    assert (await client.get("/healthz")).status == 200  # requests without a key: a bucket of their own


async def test_body_size_and_depth_limits(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    big = b'{"content": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    resp = await client.post("/v1/entries", data=big, headers={**alice.headers, "Content-Type": "application/json"})
    await problem(resp, 413, "payload_too_large")
    deep = "[" * 40 + "]" * 40
    resp = await client.post(
        "/v1/entries",
        data=f'{{"entry_type": "finding", "performative": "inform", "content": "d", "metadata": {{"x": {deep}}}}}',
        headers={**alice.headers, "Content-Type": "application/json"},
    )
    await problem(resp, 400, "too_deep")
    very_deep = "[" * 100_000 + "]" * 100_000
    resp = await client.post(
        "/v1/entries", data=very_deep, headers={**alice.headers, "Content-Type": "application/json"}
    )
    assert resp.status in (400, 413)
    assert await node.db.read(lambda c: c.execute("SELECT count(*) FROM entries").fetchone()[0]) == 0


async def test_slow_body_times_out(
    monkeypatch: pytest.MonkeyPatch, client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    from node.web import http

    monkeypatch.setattr(http, "BODY_READ_TIMEOUT_S", 0.3)
    alice = await make_agent("alice")

    async def trickle() -> Any:
        yield b'{"entry_type": "finding", '
        await asyncio.sleep(3)
        yield b'"performative": "inform", "content": "late"}'

    resp = await client.post(
        "/v1/entries", data=trickle(), headers={**alice.headers, "Content-Type": "application/json"}
    )
    await problem(resp, 408, "request_timeout")
    assert await node.db.read(lambda c: c.execute("SELECT count(*) FROM entries").fetchone()[0]) == 0


async def test_page_and_hops_caps(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    resp = await client.post("/v1/entries", json={**POST, "content": "root"}, headers=alice.headers)
    ref = (await resp.json())["id"]
    await problem(await client.get("/v1/search?q=x&limit=100000", headers=alice.headers), 422, "validation_error")
    await problem(await client.get(f"/v1/entries/{ref}?hops=1000", headers=alice.headers), 422, "validation_error")
    await problem(await client.get("/v1/inbox?limit=100000", headers=alice.headers), 422, "validation_error")
    ready = "/v1/agent-workflows/tasks/ready?limit=100000"
    await problem(await client.get(ready, headers=alice.headers), 422, "validation_error")


async def test_subscriptions_per_agent_are_capped(client: TestClient, make_agent: MakeAgent) -> None:
    from node.inbox.service import MAX_SUBSCRIPTIONS

    alice = await make_agent("alice")
    for i in range(MAX_SUBSCRIPTIONS):
        resp = await client.post("/v1/subscriptions", json={"tags": [f"t{i}"]}, headers=alice.headers)
        assert resp.status == 201
    resp = await client.post("/v1/subscriptions", json={"tags": ["over"]}, headers=alice.headers)
    await problem(resp, 409, "too_many_subscriptions")


async def test_disk_full_is_507_reads_continue_nothing_lost(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    alice = await make_agent("alice")
    stored = []
    for i in range(20):
        resp = await client.post("/v1/entries", json={**POST, "content": f"kept {i}"}, headers=alice.headers)
        stored.append((await resp.json())["id"])
    await node.db.write(fill(1))
    try:
        for i in range(2000):  # fill what room is left with small entries; each one acknowledged must stay
            resp = await client.post("/v1/entries", json={**POST, "content": f"filler {i}"}, headers=alice.headers)
            if resp.status == 507:
                break
            assert resp.status == 201
            stored.append((await resp.json())["id"])
        else:
            raise AssertionError("the capped database never filled")
        writes = [
            client.post("/v1/entries", json={**POST, "content": f"w{i} " + "y" * 50_000}, headers=alice.headers),
            client.post("/v1/links", json={"source": str(stored[0]), "target": str(stored[1]), "link_type": "supports",
                                           "annotation": "z" * 1000}, headers=alice.headers),
            client.post("/v1/agent-workflows/tasks", json={"key": "full", "title": "t" * 400,
                                                            "checkpoint": {"x": "c" * 60_000}}, headers=alice.headers),
        ]  # fmt: skip
        for i, call in enumerate(writes):
            resp = await call
            body = await resp.json(content_type=None)
            assert resp.status == 507 and body["code"] == "storage_full", (i, resp.status, body)
        # reads are still served while full
        ids = ",".join(str(i) for i in stored[-20:])
        resp = await client.get(f"/v1/entries?ids={ids}", headers=alice.headers)
        assert resp.status == 200
        assert len((await resp.json())["entries"]) == 20
        assert (await client.get("/v1/search?q=kept", headers=alice.headers)).status == 200
        assert (await client.get("/healthz")).status == 200
    finally:
        await node.db.write(free)
    kept = await node.db.read(lambda c: {r[0] for r in c.execute("SELECT id FROM entries")})
    assert set(stored) <= kept  # every acknowledged entry is still there
    if node.db.pg_url is None:  # SQLite's own check of its file; PostgreSQL rolled the failed statements back
        integrity = await node.db.read(lambda c: c.execute("PRAGMA integrity_check").fetchone()[0])
        assert integrity == "ok"
    resp = await client.post("/v1/entries", json={**POST, "content": "after"}, headers=alice.headers)
    assert resp.status == 201 and (await resp.json())["id"] > stored[-1]


async def test_long_query_reaches_the_app_as_problem_json(tmp_path: Any) -> None:
    """`bbs serve` raises aiohttp's 8 KiB request-line limit, so a long (documented) query is validated by the
    node and answered with problem+json, not refused in plain text by the HTTP parser (found by schemathesis)."""
    import aiohttp

    from scenarios.fednet import ServedNode

    served = ServedNode("long", tmp_path / "long")
    served.init()
    async with aiohttp.ClientSession() as session:
        await served.start(session)
        try:
            agent = await served.agent(session, "reader")
            junk = "%C3%A9" * 5000  # 30 KB of percent-encoded text
            url = f"{served.url}/v1/entries/0?direction={junk}"
            async with session.get(url, headers={"Authorization": agent["Authorization"]}) as resp:
                assert resp.status == 422
                assert resp.content_type == "application/problem+json"
        finally:
            served.kill()


async def test_empty_list_query_values_are_refused_not_ignored(client: TestClient, make_agent: MakeAgent) -> None:
    """`?link_types=&link_types=` used to be read as no filter at all (found by schemathesis)."""
    alice = await make_agent("alice")
    for query in ("link_types=&link_types=", "link_types=supports,", "entry_type=", "tags="):
        resp = await client.get(f"/v1/search?q=x&{query}", headers=alice.headers)
        body = await problem(resp, 422, "validation_error")
        assert body["field"].startswith("$.")
