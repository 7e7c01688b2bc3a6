"""node.ops.logging_setup: the JSON and text log formats, the aiohttp noise filter, request ids and the access line."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, HttpProcessingError
from aiohttp.test_utils import TestClient, make_mocked_request

from node.ops import logging_setup
from node.web.http import REQUEST_ID, error_middleware

Client = Callable[..., Awaitable[TestClient]]


def record(msg: str = "hello %s", args: tuple[Any, ...] = ("world",), **extra: Any) -> logging.LogRecord:
    rec = logging.LogRecord("bbs.test", logging.INFO, __file__, 1, msg, args, None)
    rec.__dict__.update(extra)
    return rec


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    server = logging.getLogger("aiohttp.server")
    access = logging.getLogger(logging_setup.ACCESS_LOGGER)
    saved = (list(root.handlers), root.level, list(server.filters), access.level)
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved[0]:
        root.addHandler(handler)
    root.setLevel(saved[1])
    server.filters[:] = saved[2]
    access.setLevel(saved[3])


def test_json_lines_carry_the_extra_fields() -> None:
    line = json.loads(logging_setup.JsonFormatter().format(record(peer="did:key:z", count=3, note="café")))
    assert line["level"] == "info" and line["logger"] == "bbs.test" and line["msg"] == "hello world"
    assert (line["peer"], line["count"], line["note"]) == ("did:key:z", 3, "café")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["ts"])
    assert "exc" not in line
    try:
        raise ValueError("boom")
    except ValueError:
        failing = logging.LogRecord("bbs.test", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    line = json.loads(logging_setup.JsonFormatter().format(failing))
    assert line["level"] == "error" and "ValueError: boom" in line["exc"]


def test_text_lines_end_with_key_value_pairs() -> None:
    formatter = logging_setup.TextFormatter()
    rec = record(n=3, ratio=0.5, word="plain", quoted='say "hi"', nan=float("nan"), none=None, _private="x")
    line = formatter.format(rec)
    expected_time = logging.Formatter("%(asctime)s").formatTime(rec)
    assert line.startswith(f"{expected_time} INFO bbs.test hello world ")
    assert line.endswith(' n=3 ratio=0.5 word="plain" quoted="say \\"hi\\"" nan=NaN none=null')
    plain = record()
    assert formatter.format(plain) == f"{logging.Formatter().formatTime(plain)} INFO bbs.test hello world"
    assert formatter.formatTime(rec, "%Y") == time.strftime("%Y", time.localtime(rec.created))


def test_a_text_line_with_a_traceback_puts_its_key_value_pairs_before_it() -> None:
    """The pairs stay on the record's first line, and the traceback's last line is the exception alone (the chaos
    scenarios count tracebacks by that line: a request id after it made each occurrence another site)."""
    try:
        raise ValueError("boom")
    except ValueError:
        failing = record(request_id="r1", status=500)
        failing.exc_info = sys.exc_info()
    lines = logging_setup.TextFormatter().format(failing).splitlines()
    assert lines[0].endswith(' hello world request_id="r1" status=500')
    assert lines[1] == "Traceback (most recent call last):" and lines[-1] == "ValueError: boom"


def test_malformed_requests_become_one_warning() -> None:
    log_filter = logging_setup.MalformedHttpFilter()
    for exc in [BadHttpMessage("bad Content-Length"), web.RequestPayloadError("not gzip")]:
        rec = logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "Error handling request", None,
                                (type(exc), exc, None))  # fmt: skip
        assert log_filter.filter(rec)
        assert (rec.levelno, rec.levelname, rec.exc_info) == (logging.WARNING, "WARNING", None)
        assert rec.getMessage() == f"Error handling request: {type(exc).__name__}"
    server_error = HttpProcessingError(code=500, message="ours")
    rec = logging.LogRecord(
        "aiohttp.server", logging.ERROR, __file__, 1, "x", None, (HttpProcessingError, server_error, None)
    )
    assert log_filter.filter(rec) and rec.levelno == logging.ERROR and rec.exc_info is not None
    plain = record()
    assert log_filter.filter(plain) and plain.levelno == logging.INFO


def test_configure_replaces_the_handlers(restore_logging: None) -> None:
    stream = io.StringIO()
    logging_setup.configure("json", "warning", stream)
    logging_setup.configure("json", "warning", stream)  # twice: one handler, one filter
    root = logging.getLogger()
    assert len(root.handlers) == 1 and root.level == logging.WARNING
    server_filters = logging.getLogger("aiohttp.server").filters
    assert sum(isinstance(f, logging_setup.MalformedHttpFilter) for f in server_filters) == 1
    logging.getLogger("bbs.x").info("hidden")
    logging.getLogger("bbs.x").warning("shown", extra={"k": 1})
    assert [json.loads(line)["msg"] for line in stream.getvalue().splitlines()] == ["shown"]
    logging_setup.configure("text", "info", stream, access_log=False)
    assert logging.getLogger(logging_setup.ACCESS_LOGGER).level == logging.WARNING
    assert isinstance(root.handlers[0].formatter, logging_setup.TextFormatter)


@pytest.mark.parametrize(
    ("given", "kept"),
    [("req-42", True), ("a.b:c_d-e", True), ("x" * 64, True), ("x" * 65, False), ("has space", False),
     ("new\nline", False), ("", False), ("café", False)],
)  # fmt: skip
def test_request_ids(given: str, kept: bool) -> None:
    request = make_mocked_request("GET", "/", headers={logging_setup.REQUEST_ID_HEADER: given})
    request_id = logging_setup.request_id_of(request)
    if kept:
        assert request_id == given
    else:
        assert re.fullmatch(r"[0-9a-f]{32}", request_id)


def test_fresh_request_ids_are_unique() -> None:
    request = make_mocked_request("GET", "/")
    ids = {logging_setup.request_id_of(request) for _ in range(1000)}
    assert len(ids) == 1000


Seen = list[tuple[str, str, int, float]]


@pytest.fixture
async def logged(aiohttp_client: Client) -> AsyncIterator[tuple[TestClient, Seen, io.StringIO]]:
    seen: Seen = []
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging_setup.JsonFormatter())
    access = logging.getLogger(logging_setup.ACCESS_LOGGER)
    access.addHandler(handler)
    access.setLevel(logging.INFO)

    async def item(request: web.Request) -> web.Response:
        return web.json_response({"id": request.match_info["item_id"], "request_id": request[REQUEST_ID]})

    async def gone(request: web.Request) -> web.Response:
        raise web.HTTPGone()

    async def crash(request: web.Request) -> web.Response:
        raise RuntimeError("bug")

    app = web.Application(middlewares=[logging_setup.request_log_middleware])
    app[logging_setup.REQUEST_OBSERVER] = lambda method, route, status, seconds: seen.append(
        (method, route, status, seconds)
    )
    app.router.add_get("/items/{item_id}", item)
    app.router.add_get("/gone", gone)
    app.router.add_get("/crash", crash)
    yield await aiohttp_client(app), seen, stream
    access.removeHandler(handler)
    access.setLevel(logging.NOTSET)


async def test_every_request_is_observed_and_logged_once(
    logged: tuple[TestClient, Seen, io.StringIO],
) -> None:
    client, seen, stream = logged
    resp = await client.get("/items/42?secret=1", headers={"X-Request-Id": "r1", "Authorization": "Bearer tok"})
    assert await resp.json() == {"id": "42", "request_id": "r1"}
    assert (await client.get("/gone")).status == 410
    assert (await client.get("/crash")).status == 500
    assert (await client.get("/nowhere")).status == 404
    assert [(m, r, s) for m, r, s, _ in seen] == [
        ("GET", "/items/{item_id}", 200),
        ("GET", "/gone", 410),
        ("GET", "/crash", 500),
        ("GET", "unmatched", 404),
    ]
    assert all(seconds >= 0 for *_, seconds in seen)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    first = lines[0]
    assert (first["msg"], first["request_id"], first["route"], first["path"]) == (
        "GET /items/42 200",
        "r1",
        "/items/{item_id}",
        "/items/42",
    )
    assert first["remote"] == "127.0.0.1" and isinstance(first["duration_ms"], float)
    assert "secret" not in stream.getvalue() and "tok" not in stream.getvalue()
    assert [line["status"] for line in lines] == [200, 410, 500, 404]


async def test_the_error_middleware_answers_with_the_sanitised_id(aiohttp_client: Client) -> None:
    async def fail(request: web.Request) -> web.Response:
        raise web.HTTPBadRequest()

    app = web.Application(middlewares=[logging_setup.request_log_middleware, error_middleware])
    app.router.add_get("/fail", fail)
    client = await aiohttp_client(app)
    resp = await client.get("/fail", headers={"X-Request-Id": "bad id with spaces"})
    assert resp.status == 400 and re.fullmatch(r"[0-9a-f]{32}", resp.headers["X-Request-Id"])
