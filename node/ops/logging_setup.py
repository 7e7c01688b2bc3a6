"""Structured logs: text or one JSON object per line, and one access line per HTTP request.

The access line carries method, route pattern, path, status, duration and request id. It never carries
headers (bearer tokens live there), query strings (search text is content) or bodies.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import math
import os
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from node.errors import ClientClosedRequest
from node.web.appkeys import REQUEST_OBSERVER
from node.web.http import REQUEST_ID, Handler, client_gone

ACCESS_LOGGER = "bbs.access"
REQUEST_ID_HEADER = "X-Request-Id"
CLIENT_CLOSED = ClientClosedRequest.status  # 499: the client went away; not a server error
_ACCESS_LOG = logging.getLogger(ACCESS_LOGGER)
_SAFE_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_ID_PREFIX = os.urandom(8).hex()
_ID_COUNTER = itertools.count(1)
# Attributes every LogRecord has; anything else on a record came from `extra=` and is a structured field.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "taskName"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


def _json_text(value: Any) -> str:
    """`json.dumps(value, default=str)`, without the encoder's cost for the ints, floats and plain ASCII
    strings of an access line (written for every request)."""
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is float and math.isfinite(value):
        return repr(value)
    if kind is str and value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return f'"{value}"'
    return json.dumps(value, default=str)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the record's extra fields, and exc when present."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(_fields(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`time level logger message key=value ...` for people reading a terminal or journald."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")
        self._second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # the stdlib's name
        """The stdlib's `asctime` (local time, `,mmm`), with the per-second part computed once per second."""
        if datefmt:
            return super().formatTime(record, datefmt)
        second, text = self._second  # one read: other threads log through this formatter too
        if second != int(record.created):
            second = int(record.created)
            text = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = (second, text)
        return self.default_msec_format % (text, record.msecs) if self.default_msec_format else text

    def formatMessage(self, record: logging.LogRecord) -> str:  # the stdlib's name
        """The record's first line with its key=value pairs: a traceback (`format` adds it) comes after them, so its
        last line is the exception alone."""
        line = super().formatMessage(record)
        extra = " ".join(
            [f"{k}={_json_text(v)}" for k, v in record.__dict__.items() if k not in _STANDARD and k[:1] != "_"]
        )
        return f"{line} {extra}" if extra else line


class MalformedHttpFilter(logging.Filter):
    """aiohttp logs every request it cannot parse (no Host, a bad Content-Length, a header too long) at ERROR
    with a traceback, before the app sees it; it has answered 400. It does the same for a body that does not
    decompress, when it drains one the node did not read (a request refused before its body). Anyone can send
    those, so they become one warning line each rather than a flood of tracebacks. Every other aiohttp.server
    record is left alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        client_error = isinstance(exc, HttpProcessingError) and (exc.code or 400) < 500
        if client_error or isinstance(exc, web.RequestPayloadError):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            # the class only: aiohttp's message may quote the request line (a query string) or a header value
            record.msg, record.args = "%s: %s", (record.getMessage(), type(exc).__name__)
            record.exc_info, record.exc_text = None, None
        return True


def configure(fmt: str = "text", level: str = "info", stream: TextIO | None = None, *, access_log: bool = True) -> None:
    """Send every log record of the process to `stream` (stderr) in the chosen format, replacing other handlers."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # aiohttp's own access logger is replaced by ours (bbs serve passes access_log=None to run_app).
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, MalformedHttpFilter) for f in server_log.filters):
        server_log.addFilter(MalformedHttpFilter())
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.NOTSET if access_log else logging.WARNING)


def request_id_of(request: web.Request) -> str:
    """The request's id: the client's X-Request-Id when it is a short safe token, else a fresh one."""
    given = request.headers.get(REQUEST_ID_HEADER)
    return given if given and _SAFE_ID.fullmatch(given) else _random_id()


def _random_id() -> str:
    """A fresh id: 16 random hex digits drawn once per process, then a 16-digit counter.

    Unique within and (with overwhelming likelihood) across processes, and no syscall per request: under
    load every call that releases the GIL on the loop thread waits behind the writer and crypto threads.
    """
    return f"{_ID_PREFIX}{next(_ID_COUNTER):016x}"


def route_label(request: web.Request) -> str:
    """The matched route's pattern (`/v1/entries/{entry_id}`), or `unmatched`: bounded, and free of ids."""
    route = request.match_info.route
    resource = getattr(route, "resource", None)
    return resource.canonical if resource is not None else "unmatched"


# Told about every request once it is answered: (method, route pattern, status, seconds); see REQUEST_OBSERVER.
RequestObserver = Callable[[str, str, int, float], None]
# Where access records say they come from (what `Logger.info` would find by walking the stack).
_ACCESS_CALLER = (__file__, 0, "request_log_middleware")


@web.middleware
async def request_log_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Per request: one access line at info, the app's request observer (metrics), and one request id that
    request and response agree on. One middleware, one timing and one status for both outputs."""
    request_id = request_id_of(request)
    request[REQUEST_ID] = request_id  # the inner error middleware answers with this sanitised id
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    except asyncio.CancelledError:
        if client_gone(request):
            status = CLIENT_CLOSED  # the handler was cancelled because the client went away (handler_cancellation)
        raise
    finally:
        seconds = time.perf_counter() - started
        route = None
        observe = request.app.get(REQUEST_OBSERVER)
        if observe is not None:
            route = route_label(request)
            observe(request.method, route, status, seconds)
        log = _ACCESS_LOG
        if log.isEnabledFor(logging.INFO):
            method, path = request.method, request.path
            # makeRecord + handle is what Logger.info does, minus the stack walk that finds the caller.
            log.handle(
                log.makeRecord(
                    ACCESS_LOGGER,
                    logging.INFO,
                    _ACCESS_CALLER[0],
                    _ACCESS_CALLER[1],
                    "%s %s %s",
                    (method, path, status),
                    None,
                    _ACCESS_CALLER[2],
                    {
                        "request_id": request_id,
                        "method": method,
                        "route": route_label(request) if route is None else route,
                        "path": path,
                        "status": status,
                        "duration_ms": round(seconds * 1000, 2),
                        "remote": request.remote,
                    },
                )
            )
