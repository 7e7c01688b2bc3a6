"""Peer authentication of the sync endpoints, and validation of what an authenticated peer sends."""

from __future__ import annotations

import time

import aiohttp

from identity import keys
from sync.auth import sign_headers
from tests.sync.conftest import PeerNode, make_peer  # noqa: F401  (fixture)


async def signed(
    session: aiohttp.ClientSession,
    key: keys.SigningKey,
    method: str,
    url: str,
    body: bytes | None = None,
    *,
    now: float | None = None,
    send_body: bytes | None = None,
    extra: dict[str, str] | None = None,
) -> tuple[int, dict]:
    headers = sign_headers(key, method, url, body, now=now)
    headers.update(extra or {})
    if body is not None:
        headers["Content-Type"] = "application/json"
    async with session.request(method, url, data=send_body if send_body is not None else body, headers=headers) as r:
        return r.status, await r.json(content_type=None)


async def two(make_peer) -> tuple[PeerNode, PeerNode]:  # type: ignore[no-untyped-def]  # noqa: F811
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    return a, b


async def test_unsigned_and_bearer_requests_are_refused(make_peer) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    a, _b = await two(make_peer)
    agent_key = (await a.node.agents.create("agent", "Agent")).api_key
    for headers in ({}, {"Authorization": f"Bearer {agent_key}"}, a.admin):
        async with a.session.get(a.url + "/v1/sync/changes?v=2", headers=headers) as resp:
            assert resp.status == 401
            assert (await resp.json())["code"] == "signature_required"
        async with a.session.post(a.url + "/v1/sync/fetch", json={"type": "fetch", "hashes": ["a" * 64]}) as resp:
            assert resp.status == 401


async def test_configured_peer_is_served(make_peer) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    a, b = await two(make_peer)
    status, body = await signed(a.session, b.node.key, "GET", a.url + "/v1/sync/changes?v=2&since=0")
    assert status == 200 and body["type"] == "changes" and body["node_id"] == a.node_id and body["v"] == 2


async def test_unknown_key_is_refused(make_peer) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    a, _b = await two(make_peer)
    stranger = keys.SigningKey.generate()
    status, body = await signed(a.session, stranger, "GET", a.url + "/v1/sync/changes?v=2")
    assert status == 403 and body["code"] == "unknown_peer"


async def test_replayed_request_is_refused(make_peer) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    a, b = await two(make_peer)
    url = a.url + "/v1/sync/changes?v=2&since=0"
    headers = sign_headers(b.node.key, "GET", url)
    async with a.session.get(url, headers=headers) as resp:
        assert resp.status == 200
    async with a.session.get(url, headers=headers) as resp:
        assert resp.status == 401 and (await resp.json())["code"] == "replayed_request"


async def test_stale_request_is_refused(make_peer) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    a, b = await two(make_peer)
    status, body = await signed(a.session, b.node.key, "GET", a.url + "/v1/sync/changes?v=2", now=time.time() - 600)
    assert status == 401 and body["code"] == "stale_request"
    status, body = await signed(a.session, b.node.key, "GET", a.url + "/v1/sync/changes?v=2", now=time.time() + 600)
    assert status == 401 and body["code"] == "stale_request"


async def test_tampered_body_and_retargeted_signature_are_refused(make_peer) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    a, b = await two(make_peer)
    body = b'{"type":"fetch","hashes":["' + b"a" * 64 + b'"]}'
    other = body.replace(b"a" * 64, b"b" * 64)
    status, problem = await signed(a.session, b.node.key, "POST", a.url + "/v1/sync/fetch", body, send_body=other)
    assert status == 401 and problem["code"] == "bad_signature"
    headers = sign_headers(b.node.key, "POST", a.url + "/v1/sync/fetch", body)
    headers["Content-Type"] = "application/json"
    async with a.session.post(a.url + "/v1/sync/reconcile", data=body, headers=headers) as resp:
        assert resp.status == 401 and (await resp.json())["code"] == "bad_signature"
    headers = sign_headers(b.node.key, "GET", a.url + "/v1/sync/changes?v=2&since=0")
    async with a.session.get(a.url + "/v1/sync/changes?v=2&since=5", headers=headers) as resp:
        assert resp.status == 401 and (await resp.json())["code"] == "bad_signature"  # the query is signed


async def test_bad_input_from_an_authenticated_peer(make_peer) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    a, b = await two(make_peer)
    key = b.node.key
    cases = [
        ("GET", "/v1/sync/changes?v=2&limit=0", None, 422, "$.limit"),
        ("GET", "/v1/sync/changes?v=2&since=-1", None, 422, "$.since"),
        ("GET", "/v1/sync/changes?v=2&epoch=not-hex", None, 422, "$.epoch"),
        ("GET", "/v1/sync/changes?v=2&v=2", None, 422, "$.v"),
        ("POST", "/v1/sync/fetch", b'{"type":"fetch","hashes":["xyz"]}', 422, "$.hashes[0]"),
        ("POST", "/v1/sync/fetch", b'{"type":"fetch","hashes":[]}', 422, "$.hashes"),
        ("POST", "/v1/sync/fetch", b'{"type":"fetch"', 400, None),
        ("POST", "/v1/sync/fetch", b'{"type":"reconcile","message":"61"}', 422, "$.type"),
        ("POST", "/v1/sync/reconcile", b'{"type":"reconcile","message":"6"}', 422, "$.message"),
        ("POST", "/v1/sync/reconcile", b'{"type":"reconcile","message":"6101"}', 422, "$.message"),
    ]
    for method, path, body, status, field in cases:
        got, problem = await signed(a.session, key, method, a.url + path, body)
        assert got == status, (path, body, problem)
        if field is not None:
            assert problem["field"] == field, (path, body, problem)
    headers = sign_headers(key, "POST", a.url + "/v1/sync/fetch", b"x")
    headers["Content-Type"] = "text/plain"
    async with a.session.post(a.url + "/v1/sync/fetch", data=b"x", headers=headers) as resp:
        assert resp.status == 415
