"""node.web.http: request decoding, problem+json errors, the security headers and the OpenAPI document."""

from __future__ import annotations

import asyncio
import gzip
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import aiohttp
import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, make_mocked_request
from openapi_spec_validator import validate

from node.app import create_app
from node.errors import BBSError, Conflict, InvalidInput, MalformedRequest
from node.service import Node
from node.web import http
from tests.conftest import AgentCreds
from wire.api import SignedSubmission

Client = Callable[..., Awaitable[TestClient]]


class Item(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    size: Annotated[int, msgspec.Meta(ge=0)] = 0


class Filter(msgspec.Struct, forbid_unknown_fields=True):
    tags: list[str] = []
    limit: int = 10
    exact: bool = False
    after: int | None = None


def raises(fn: Callable[[], Any]) -> BBSError:
    with pytest.raises(BBSError) as info:
        fn()
    return info.value


# ---- problems and the middleware ------------------------------------------------------------------------------


def test_problem_response() -> None:
    err = Conflict("already there", field="$.name", code="name_taken", headers={"Retry-After": "1"})
    resp = http.problem_response(err, "req-1")
    assert resp.status == 409 and resp.content_type == "application/problem+json"
    assert resp.headers["X-Request-Id"] == "req-1" and resp.headers["Retry-After"] == "1"
    assert resp.body is not None
    assert msgspec.json.decode(resp.body) == {  # type: ignore[arg-type]
        "type": http.PROBLEM_TYPE + "name_taken",
        "title": "Conflict",
        "status": 409,
        "code": "name_taken",
        "detail": "already there",
        "field": "$.name",
    }
    assert "X-Request-Id" not in http.problem_response(err).headers


@pytest.fixture
async def app_client(aiohttp_client: Client) -> TestClient:
    async def domain(request: web.Request) -> web.Response:
        raise InvalidInput("bad size", field="$.size")

    async def conflict(request: web.Request) -> web.Response:
        raise web.HTTPConflict()

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound("/ok")

    async def crash(request: web.Request) -> web.Response:
        raise RuntimeError("a bug of ours")

    async def ok(request: web.Request) -> web.Response:
        return http.json_response({"ok": True}, headers={"X-Extra": "1"})

    async def echo(request: web.Request) -> web.Response:
        return http.json_response(http.convert(await http.read_json(request), Item, "$.item"))

    app = web.Application(middlewares=[http.error_middleware], client_max_size=1024)
    app.on_response_prepare.append(http.security_headers)
    for path, handler in [("/domain", domain), ("/conflict", conflict), ("/redirect", redirect), ("/crash", crash)]:
        app.router.add_get(path, handler)
    app.router.add_get("/ok", ok)
    app.router.add_post("/echo", echo)
    return await aiohttp_client(app)


async def body(resp: Any) -> dict[str, Any]:
    data: dict[str, Any] = await resp.json(content_type=None)
    return data


async def test_the_middleware_maps_every_failure_to_a_problem(
    app_client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    resp = await app_client.get("/domain", headers={"X-Request-Id": "abc"})
    assert resp.status == 422 and resp.headers["X-Request-Id"] == "abc"
    assert (await body(resp))["field"] == "$.size"
    resp = await app_client.get("/nowhere")
    assert (resp.status, (await body(resp))["code"]) == (404, "not_found")
    resp = await app_client.post("/ok")
    assert (resp.status, (await body(resp))["code"]) == (405, "method_not_allowed")
    assert "GET" in resp.headers["Allow"].split(",")
    resp = await app_client.get("/conflict")
    problem = await body(resp)
    assert (resp.status, problem["code"], problem["title"]) == (409, "http_error", "Conflict")
    with caplog.at_level(logging.ERROR, logger="bbs.http"):
        resp = await app_client.get("/crash")
    problem = await body(resp)
    assert (resp.status, problem["code"]) == (500, "internal_error")
    assert "a bug of ours" not in problem["detail"]  # the traceback goes to the log, not the client
    assert any("unhandled error on GET /crash" in r.getMessage() for r in caplog.records)
    resp = await app_client.get("/redirect", allow_redirects=False)
    assert resp.status == 302  # not an error: passed through


async def test_success_gets_a_request_id_and_the_security_headers(app_client: TestClient) -> None:
    resp = await app_client.get("/ok")
    assert resp.status == 200 and await resp.json() == {"ok": True} and resp.headers["X-Extra"] == "1"
    assert len(resp.headers["X-Request-Id"]) == 32
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert resp.headers["Content-Security-Policy"] == http.DATA_CSP
    assert (await app_client.get("/ok", headers={"X-Request-Id": "mine"})).headers["X-Request-Id"] == "mine"


async def test_security_headers_keep_a_routes_own_policy() -> None:
    response = web.Response(headers={"Content-Security-Policy": "default-src 'self'"})
    await http.security_headers(make_mocked_request("GET", "/"), response)
    assert response.headers["Content-Security-Policy"] == "default-src 'self'"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


# ---- bodies ---------------------------------------------------------------------------------------------------


async def test_read_json_accepts_json_media_types(app_client: TestClient) -> None:
    for ctype in ["application/json", "application/problem+json", "application/vnd.example+json"]:
        resp = await app_client.post("/echo", data=b'{"name": "x"}', headers={"Content-Type": ctype})
        assert await resp.json() == {"name": "x", "size": 0}, ctype


async def test_read_json_refuses_what_is_not_a_json_body(app_client: TestClient) -> None:
    resp = await app_client.post("/echo", data=b'{"name": "x"}', headers={"Content-Type": "text/plain"})
    problem = await body(resp)
    assert (resp.status, problem["code"], problem["field"]) == (415, "unsupported_media_type", "Content-Type")
    resp = await app_client.post("/echo", data=b"{", headers={"Content-Type": "application/json"})
    assert (resp.status, (await body(resp))["code"]) == (400, "invalid_json")
    resp = await app_client.post("/echo", json={"name": "x" * 2000})
    problem = await body(resp)
    assert (resp.status, problem["code"]) == (413, "payload_too_large") and "1024" in problem["detail"]
    resp = await app_client.post("/echo", json={"name": "x", "size": -1})
    problem = await body(resp)
    assert (resp.status, problem["field"]) == (422, "$.item.size")
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    resp = await app_client.post("/echo", data=gzip.compress(b'{"name": "zipped"}'), headers=headers)
    assert await resp.json() == {"name": "zipped", "size": 0}
    resp = await app_client.post("/echo", data=b"not gzip", headers=headers)  # the server then drops the connection
    assert (resp.status, (await body(resp))["code"]) == (400, "invalid_body")


async def test_a_body_trickling_in_too_slowly_is_408(app_client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "BODY_READ_TIMEOUT_S", 0.2)
    assert app_client.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", app_client.port)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 408")
    writer.close()


def test_decode_json_bounds_nesting() -> None:
    depth = http.MAX_JSON_DEPTH
    assert http.decode_json(("[" * depth + "]" * depth).encode()) == eval("[" * depth + "]" * depth)
    err = raises(lambda: http.decode_json(("[" * (depth + 1) + "]" * (depth + 1)).encode()))
    assert (err.status, err.code) == (400, "too_deep")
    err = raises(lambda: http.decode_json(b"[" * 100_000 + b"]" * 100_000))
    assert err.code == "too_deep"
    assert http.decode_json(b'{"a": "' + b"[{" * 100 + b'"}') == {"a": "[{" * 100}
    err = raises(lambda: http.decode_json(b'{"a": 1,}'))
    assert isinstance(err, MalformedRequest) and err.code == "invalid_json"


def test_convert_names_the_field_at_fault() -> None:
    assert http.convert({"name": "n"}, Item) == Item(name="n")
    assert raises(lambda: http.convert({}, Item)).field == "$.name"  # the missing field itself
    assert raises(lambda: http.convert({"name": "n", "colour": 1}, Item)).field == "$.colour"
    assert raises(lambda: http.convert({"name": 3}, Item, "$.entries[2]")).field == "$.entries[2].name"
    err = raises(lambda: http.convert([], Item))
    assert (err.status, err.code, err.field) == (422, "validation_error", "$")


def test_signed_or() -> None:
    assert http.signed_or({"record": {"kind": "entry"}}, Item) == SignedSubmission(record={"kind": "entry"})
    assert http.signed_or({"name": "n"}, Item) == Item(name="n")
    assert raises(lambda: http.signed_or({"record": {}, "extra": 1}, Item, "$.x")).field == "$.x.extra"


@pytest.mark.parametrize(
    ("value", "ok"), [("k", True), ("k" * 128, True), ("k" * 129, False), ("", False), ("caf\u00e9", False)]
)
def test_idempotency_header(value: str, ok: bool) -> None:
    request = make_mocked_request("POST", "/", headers={"Idempotency-Key": value})
    if ok:
        assert http.idempotency_header(request) == value
    else:
        assert raises(lambda: http.idempotency_header(request)).field == "Idempotency-Key"
    assert http.idempotency_header(make_mocked_request("POST", "/")) is None


def query(path: str) -> web.Request:
    return make_mocked_request("GET", path)


def test_decode_query() -> None:
    assert http.decode_query(query("/"), Filter) == Filter()
    decoded = http.decode_query(query("/?tags=a,b&tags=c&limit=5&exact=true&after=7"), Filter)
    assert decoded == Filter(tags=["a", "b", "c"], limit=5, exact=True, after=7)
    assert http.decode_query(query("/?tags="), Filter).tags == [""]  # an empty item, not "any"
    assert raises(lambda: http.decode_query(query("/?limit=1&limit=2"), Filter)).field == "$.limit"
    assert raises(lambda: http.decode_query(query("/?limit=ten"), Filter)).field == "$.limit"
    assert raises(lambda: http.decode_query(query("/?exact=perhaps"), Filter)).field == "$.exact"
    assert raises(lambda: http.decode_query(query("/?colour=red"), Filter)).field == "$.colour"


# ---- the OpenAPI document -------------------------------------------------------------------------------------


async def handler(request: web.Request) -> web.Response:
    return web.Response()


async def other(request: web.Request) -> web.Response:
    return web.Response()


async def third(request: web.Request) -> web.Response:
    return web.Response()


async def fourth(request: web.Request) -> web.Response:
    return web.Response()


async def fifth(request: web.Request) -> web.Response:
    return web.Response()


def test_openapi_describes_each_route() -> None:
    routes = [
        http.Route("POST", "/items", handler, "Post an item", "agent", body=Item | SignedSubmission,
                   responses={201: Item}, idempotent=True, tag="items"),
        http.Route("GET", "/items/{item_id}", other, "One item", "any", query=Filter, responses={200: Item},
                   text_types=("text/plain",)),
        http.Route("DELETE", "/items/{item_id}/x", third, "Delete", "admin", responses={204: None}),
        http.Route("GET", "/open", fourth, "Open", "none", responses={200: Item}),
        http.Route("POST", "/peer", fifth, "Peer", "peer", body=Item, responses={200: Item}),
    ]  # fmt: skip
    document = http.openapi(routes, title="T", version="1")
    validate(document)
    post = document["paths"]["/items"]["post"]
    assert (post["operationId"], post["tags"], post["security"]) == ("handler", ["items"], [{"bearer": []}])
    assert [p["name"] for p in post["parameters"]] == ["Idempotency-Key"]
    assert len(post["requestBody"]["content"]["application/json"]["schema"]["oneOf"]) == 2
    assert set(post["responses"]) == {"201", "400", "401", "403", "413", "415", "404", "409", "422", "429"}
    get = document["paths"]["/items/{item_id}"]["get"]
    names = [(p["name"], p["in"]) for p in get["parameters"]]
    assert names == [("item_id", "path"), ("tags", "query"), ("limit", "query"), ("exact", "query"), ("after", "query")]
    assert "$ref" not in str(get["parameters"])  # query schemas stand alone
    assert set(get["responses"]["200"]["content"]) == {"application/json", "text/plain"}
    assert document["paths"]["/items/{item_id}/x"]["delete"]["responses"]["204"] == {"description": "no content"}
    assert "security" not in document["paths"]["/open"]["get"]
    assert set(document["paths"]["/open"]["get"]["responses"]) == {"200", "400", "422"}
    assert document["paths"]["/peer"]["post"]["security"] == [{"peerSignature": []}]
    assert set(document["components"]["schemas"]) >= {"Item", "Problem", "SignedSubmission"}
    assert document["info"] == {"title": "T", "version": "1"}


def test_route_defaults() -> None:
    route = http.Route("GET", "/", handler, "s", "none")
    assert (route.body, route.query, route.responses, route.tag, route.text_types, route.idempotent) == (
        None,
        None,
        {},
        "core",
        (),
        False,
    )


# ---- a client that leaves while sending its body -------------------------------------------------------------


async def _leave_mid_body(port: int, api_key: str) -> None:
    """Send headers and part of a JSON body over a raw socket, then close it."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST /v1/entries HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api_key}\r\n"
        "Content-Type: application/json\r\nContent-Length: 400\r\n\r\n"
    )
    writer.write(head.encode() + b'{"entry_type": "finding", "content": "half of')
    await writer.drain()
    await asyncio.sleep(0.1)  # the handler is waiting for the rest of the body
    writer.close()
    await writer.wait_closed()


async def _until_logged(caplog: pytest.LogCaptureFixture, status: int) -> logging.LogRecord:
    for _ in range(200):
        found = [r for r in caplog.records if r.name == "bbs.access" and getattr(r, "status", None) == status]
        if found:
            return found[0]
        await asyncio.sleep(0.02)
    raise AssertionError(f"no access line with status {status}: {[r.getMessage() for r in caplog.records]}")


@pytest.mark.parametrize("cancel_handlers", [False, True])
async def test_a_client_leaving_mid_body_is_a_499_never_a_500(
    node: Node,
    make_agent: Callable[[str], Awaitable[AgentCreds]],
    admin_headers: dict[str, str],
    caplog: pytest.LogCaptureFixture,
    cancel_handlers: bool,
) -> None:
    """As `bbs serve` runs (handlers finish: the body read fails) and with aiohttp's handler cancellation on (the
    handler is cancelled): an info line, a 499 in the access log and /metrics, no error, no 5xx, nothing stored."""
    agent = await make_agent("alice")
    runner = web.AppRunner(create_app(node), access_log=None, handler_cancellation=cancel_handlers)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    caplog.set_level(logging.INFO)
    try:
        await _leave_mid_body(port, agent.api_key)
        line = await _until_logged(caplog, 499)
        assert line.getMessage() == "POST /v1/entries 499"
        url = f"http://127.0.0.1:{port}/metrics"
        async with aiohttp.ClientSession() as session, session.get(url, headers=admin_headers) as resp:
            text = await resp.text()
        stored = await node.db.read(lambda c: c.execute("SELECT count(*) FROM entries").fetchone()[0])
    finally:
        await runner.cleanup()
    assert 'status="499"' in text and not re.search(r'bbs_http_requests_total\{[^}]*status="5', text)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]
    if not cancel_handlers:
        assert any(r.name == "bbs.http" and "client closed" in r.getMessage() for r in caplog.records)
    assert stored == 0


async def test_a_reset_from_a_client_that_left_is_a_499_and_any_other_a_500(
    aiohttp_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    async def leaves(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.close()  # as if the client had gone: then writing to it fails
        raise ConnectionResetError("Cannot write to closing transport")

    async def resets(request: web.Request) -> web.Response:
        raise ConnectionResetError("a reset the node met elsewhere (a peer, say)")

    app = web.Application(middlewares=[http.error_middleware])
    app.router.add_get("/leaves", leaves)
    app.router.add_get("/resets", resets)
    client = await aiohttp_client(app)
    caplog.set_level(logging.INFO, logger="bbs.http")
    with pytest.raises(aiohttp.ClientError):
        await client.get("/leaves")
    for _ in range(100):
        if any("client closed: GET /leaves" in r.getMessage() for r in caplog.records):
            break
        await asyncio.sleep(0.02)
    assert [r.levelno for r in caplog.records if "/leaves" in r.getMessage()] == [logging.INFO]
    resp = await client.get("/resets")
    assert (resp.status, (await body(resp))["code"]) == (500, "internal_error")
