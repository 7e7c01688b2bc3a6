"""Structured request logs: one line per request with its id, never tokens, query strings or bodies."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Awaitable, Callable, Iterator

import pytest
from aiohttp.test_utils import TestClient

from node.ops import logging_setup
from tests.conftest import AgentCreds

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Route the process's logs to a buffer as JSON lines; restore the previous handlers after."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    logging_setup.configure("json", "info", stream)
    yield stream
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved[0]:
        root.addHandler(handler)
    root.setLevel(saved[1])


def access_lines(stream: io.StringIO) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [line for line in lines if line["logger"] == logging_setup.ACCESS_LOGGER]


async def test_one_line_per_request_with_its_id(
    json_log: io.StringIO, client: TestClient, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    secret_text = "the launch code is 0000"
    resp = await client.post(
        "/v1/entries",
        json={"entry_type": "finding", "performative": "inform", "content": secret_text},
        headers={**alice.headers, "X-Request-Id": "req-42"},
    )
    assert resp.status == 201 and resp.headers["X-Request-Id"] == "req-42"
    resp = await client.get("/v1/search", params={"q": "launch code"}, headers=alice.headers)
    assert resp.status == 200
    lines = access_lines(json_log)
    assert len(lines) == 2
    post, search = lines
    assert post["request_id"] == "req-42" and post["status"] == 201 and post["route"] == "/v1/entries"
    assert post["method"] == "POST" and isinstance(post["duration_ms"], float) and post["level"] == "info"
    assert search["request_id"] == resp.headers["X-Request-Id"] and search["path"] == "/v1/search"
    everything = json_log.getvalue()
    assert alice.api_key not in everything
    assert secret_text not in everything and "launch" not in everything


async def test_unsafe_request_ids_are_replaced_and_errors_keep_the_id(
    json_log: io.StringIO, client: TestClient, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    resp = await client.post(
        "/v1/entries", json={"entry_type": "bogus"}, headers={**alice.headers, "X-Request-Id": "x" * 200}
    )
    assert resp.status == 422
    given = resp.headers["X-Request-Id"]
    assert given != "x" * 200 and len(given) == 32
    assert (await resp.json())["code"]
    (line,) = access_lines(json_log)
    assert line["request_id"] == given and line["status"] == 422


async def test_access_log_can_be_switched_off(client: TestClient) -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    try:
        logging_setup.configure("text", "info", stream, access_log=False)
        assert (await client.get("/healthz")).status == 200
        logging.getLogger("bbs.test").info("hello", extra={"peer": "did:key:z"})
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
        logging.getLogger(logging_setup.ACCESS_LOGGER).setLevel(logging.NOTSET)
    text = stream.getvalue()
    assert "/healthz" not in text
    assert 'INFO bbs.test hello peer="did:key:z"' in text


async def test_unparseable_requests_log_one_warning_not_a_traceback(json_log: io.StringIO, client: TestClient) -> None:
    """Requests aiohttp refuses before the app (no Host, a bad Content-Length) are 400s anyone can send."""
    import asyncio

    for request in (
        b"GET /healthz HTTP/1.1\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
        writer.write(request)
        await writer.drain()
        assert (await reader.read()).startswith(b"HTTP/1.")
        writer.close()
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    server = [line for line in lines if line["logger"] == "aiohttp.server"]
    assert len(server) == 2, lines
    assert all(line["level"] == "warning" and "exc" not in line for line in server)
    assert all(str(line["msg"]).startswith("Error handling request") for line in server)


async def test_a_body_that_does_not_decompress_is_one_warning(json_log: io.StringIO, client: TestClient) -> None:
    """A request refused before its body is read (401 here) still has its body drained by aiohttp."""
    import asyncio

    body = b"\x1f\x8b\x08\x00garbage-garbage"
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(
        b"POST /v1/entries HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
    )
    await writer.drain()
    assert (await reader.read()).startswith(b"HTTP/1.1 401")
    writer.close()
    await asyncio.sleep(0.05)
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    server = [line for line in lines if line["logger"] == "aiohttp.server"]
    assert server and all(line["level"] == "warning" and "exc" not in line for line in server)


async def test_an_unparseable_request_line_is_not_logged(json_log: io.StringIO, client: TestClient) -> None:
    """aiohttp's own message for a too-long request line quotes it: the query string must not reach the log."""
    import asyncio

    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(b"GET /v1/search?q=" + b"secret" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    assert (await reader.read()).startswith(b"HTTP/1.")
    writer.close()
    assert "secret" not in json_log.getvalue()
