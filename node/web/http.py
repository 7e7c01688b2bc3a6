"""HTTP plumbing: the route table, request decoding, problem+json errors and the OpenAPI document.

Each route is declared once with the Structs it reads and writes; the same
declaration drives validation and `/openapi.json`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import types
import typing
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from node.errors import (
    BBSError,
    ClientClosedRequest,
    InvalidInput,
    MalformedRequest,
    PayloadTooLarge,
    RequestTimeout,
    Unavailable,
    UnsupportedMediaType,
)
from node.store import idempotency, submission
from node.store.conn import ConnectionLost
from wire.api import Problem, SignedSubmission
from wire.validation import split_validation_error

log = logging.getLogger("bbs.http")
T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PROBLEM_TYPE = "https://agent-bbs.dev/problems/"
MAX_JSON_DEPTH = 32  # nesting of arrays/objects in a request body; deeper bodies are refused before any work
BODY_READ_TIMEOUT_S = 30.0  # a client trickling its body slower than this is cut off (408)
# The request's sanitised id, set by the access-log middleware (node/ops/logging_setup.py) before this one runs.
REQUEST_ID: web.RequestKey[str] = web.RequestKey("request_id", str)


@dataclass
class Route:
    """One operation: method, path, handler and the types behind its OpenAPI description."""

    method: str
    path: str
    handler: Handler
    summary: str
    auth: str  # 'none' | 'agent' | 'admin' | 'any' | 'peer'
    body: Any = None
    query: type[msgspec.Struct] | None = None
    responses: dict[int, Any] = field(default_factory=dict)
    tag: str = "core"
    text_types: tuple[str, ...] = ()  # other media types a 2xx answer may carry, as a text body (e.g. DOT)
    idempotent: bool = False  # honours the Idempotency-Key header


def problem_response(exc: BBSError, request_id: str | None = None) -> web.Response:
    """Render a domain error as RFC 9457 problem+json."""
    body = Problem(
        type=PROBLEM_TYPE + exc.code,
        title=exc.title,
        status=exc.status,
        code=exc.code,
        detail=exc.detail,
        field=exc.field,
    )
    headers = dict(exc.headers)
    if request_id:
        headers["X-Request-Id"] = request_id
    return web.Response(
        status=exc.status, body=msgspec.json.encode(body), content_type="application/problem+json", headers=headers
    )


_HTTP_CODES = {
    404: ("not_found", "no such route"),
    405: ("method_not_allowed", "method not allowed on this route"),
    413: ("payload_too_large", "request body too large"),
}


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map every failure to problem+json; nothing a client sends may yield a bare 500."""
    request_id = request.get(REQUEST_ID) or request.headers.get("X-Request-Id") or uuid.uuid4().hex
    try:
        response = await handler(request)
    except ClientClosedRequest as exc:
        log.info("client closed: %s %s (request %s): %s", request.method, request.path, request_id, exc.detail)
        return problem_response(exc, request_id)
    except BBSError as exc:
        return problem_response(exc, request_id)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code, detail = _HTTP_CODES.get(exc.status, ("http_error", exc.reason))
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        err = BBSError(detail, code=code, headers=allow)
        err.status, err.title = exc.status, exc.reason
        return problem_response(err, request_id)
    except ConnectionLost as exc:  # the database server restarted or is unreachable: nothing of it is a bug here
        log.warning("database connection lost on %s %s (request %s): %s", request.method, request.path, request_id, exc)
        lost = Unavailable("the node's database connection was lost; try again", code="database_unavailable")
        return problem_response(lost, request_id)
    except Exception as exc:
        if isinstance(exc, ConnectionResetError) and client_gone(request):  # e.g. writing to a client that left
            log.info("client closed: %s %s (request %s)", request.method, request.path, request_id)
            return problem_response(ClientClosedRequest("the client closed the connection"), request_id)
        log.exception("unhandled error on %s %s (request %s)", request.method, request.path, request_id)
        err = BBSError("internal error; the request id is in X-Request-Id", code="internal_error")
        err.status, err.title = 500, "Internal error"
        return problem_response(err, request_id)
    response.headers.setdefault("X-Request-Id", request_id)
    return response


def client_gone(request: web.BaseRequest) -> bool:
    """True once the request's connection is closed or closing (the client went away)."""
    return request.transport is None or request.transport.is_closing()


# Answers other than the dashboard's page and files are data: a browser that opens one directly (a JSON
# body, an SVG drawing of agent text) must neither sniff it into HTML nor run or load anything from it.
DATA_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"


async def security_headers(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """`on_response_prepare` hook: nosniff on every answer, and a no-content policy unless a route set its own."""
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Content-Security-Policy", DATA_CSP)


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """Encode a Struct (or plain value) as JSON."""
    return web.Response(
        status=status, body=msgspec.json.encode(value), content_type="application/json", headers=headers
    )


def _validation_error(exc: msgspec.ValidationError, prefix: str = "$") -> InvalidInput:
    message, path = split_validation_error(exc)
    if prefix != "$":
        path = prefix + path[1:]
    return InvalidInput(message, field=path)


async def read_json(request: web.Request) -> Any:
    """The request body as a JSON value; problem errors for the wrong media type, bad JSON or oversize bodies."""
    ctype = request.content_type
    if ctype not in ("application/json", "application/problem+json") and not ctype.endswith("+json"):
        raise UnsupportedMediaType("send the body as application/json", field="Content-Type")
    try:
        if request.content.is_eof():  # the whole body is already buffered (most requests): nothing to time
            raw = await request.read()
        else:
            async with asyncio.timeout(BODY_READ_TIMEOUT_S):
                raw = await request.read()
    except TimeoutError:
        raise RequestTimeout(f"the request body did not arrive within {BODY_READ_TIMEOUT_S:g} s") from None
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"request body exceeds {request.client_max_size} bytes") from None
    except web.RequestPayloadError as exc:  # e.g. a Content-Encoding: gzip body that does not decompress
        raise MalformedRequest(f"the request body could not be read: {exc}", code="invalid_body") from None
    except ConnectionResetError:  # aiohttp's payload error when the connection is lost mid-body
        raise ClientClosedRequest("the client closed the connection while sending its body") from None
    return decode_json(raw)


def decode_json(raw: bytes) -> Any:
    """A JSON body as a value; `invalid_json`, `too_deep`, `duplicate_key` or `nul_character` problems for what
    is not plain, shallow JSON with unique keys and no NUL (node/store/submission.py)."""
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise MalformedRequest(f"body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:  # nested beyond the decoder's own limit
        raise _too_deep_error() from None
    # Every level of nesting opens with a '[' or '{' byte (never part of a multi-byte UTF-8 character), so a
    # body with at most MAX_JSON_DEPTH of them cannot nest deeper: most bodies skip the walk.
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and _too_deep(value):
        raise _too_deep_error()
    submission.check_body(raw, value)
    return value


def _too_deep_error() -> MalformedRequest:
    return MalformedRequest(f"body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels", code="too_deep")


def _too_deep(value: Any) -> bool:
    """True if a decoded JSON value nests deeper than MAX_JSON_DEPTH (checked without recursion)."""
    level: list[Any] = [value]
    for _ in range(MAX_JSON_DEPTH):
        level = [
            child
            for item in level
            if isinstance(item, dict | list)
            for child in (item.values() if isinstance(item, dict) else item)
        ]
        if not level:
            return False
    return any(isinstance(item, dict | list) for item in level)


def convert(value: Any, typ: type[T], prefix: str = "$") -> T:
    """Validate a decoded JSON value against a Struct."""
    try:
        return msgspec.convert(value, typ)
    except msgspec.ValidationError as exc:
        raise _validation_error(exc, prefix) from None


def idempotency_header(request: web.Request) -> str | None:
    """The request's Idempotency-Key header (1 to 128 printable ASCII characters), if it has one."""
    value = request.headers.get(idempotency.HEADER)
    if value is not None and not (0 < len(value) <= 128 and value.isascii() and value.isprintable()):
        raise InvalidInput("Idempotency-Key must be 1 to 128 printable ASCII characters", field=idempotency.HEADER)
    return value


def signed_or(raw: Any, typ: type[Any], prefix: str = "$") -> Any:
    """A body that is either `{"record": <signed record>, ...}` (a SignedSubmission) or the node-signed `typ`."""
    if isinstance(raw, dict) and "record" in raw:
        return convert(raw, SignedSubmission, prefix)
    return convert(raw, typ, prefix)


def decode_query(request: web.Request, typ: type[T]) -> T:
    """Validate query parameters against a Struct: repeated or comma-separated values fill list fields."""
    list_fields = _list_fields(typ)
    raw: dict[str, Any] = {}
    for name in request.query:
        if name in raw:
            continue
        values = request.query.getall(name)
        if name in list_fields:
            # An empty value stays an empty item, so `?link_types=` fails validation rather than meaning "any".
            raw[name] = [part for v in values for part in v.split(",")]
        elif len(values) > 1:
            raise InvalidInput(f"parameter {name} given more than once", field=f"$.{name}")
        else:
            raw[name] = values[0]
    try:
        return msgspec.convert(raw, typ, strict=False)
    except msgspec.ValidationError as exc:
        raise _validation_error(exc) from None


_LIST_FIELDS: dict[Any, frozenset[str]] = {}


def _list_fields(typ: Any) -> frozenset[str]:
    """Names of a query Struct's list fields (computed once per type: get_type_hints costs ~0.5 ms a call)."""
    found = _LIST_FIELDS.get(typ)
    if found is None:
        hints = typing.get_type_hints(typ, include_extras=True)
        found = _LIST_FIELDS[typ] = frozenset(name for name, hint in hints.items() if _is_list(hint))
    return found


def _is_list(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _is_list(typing.get_args(hint)[0])
    if origin in (typing.Union, types.UnionType):
        return any(_is_list(a) for a in typing.get_args(hint))
    return origin is list


# ---- OpenAPI ----------------------------------------------------------------------------------------------


def openapi(routes: list[Route], *, title: str, version: str) -> dict[str, Any]:
    """An OpenAPI 3.1 document generated from the route table and its msgspec Structs."""
    by_type, components = _schemas(routes)
    paths: dict[str, Any] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, by_type)
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "agent API key or admin token"},
                "peerSignature": {"type": "apiKey", "in": "header", "name": "Signature", "description": "RFC 9421"},
            },
        },
    }


def _schemas(routes: list[Route]) -> tuple[dict[Any, Any], dict[str, Any]]:
    """The schema of each body and response type of the routes (a union body as `oneOf`), and the components."""
    types_used: list[Any] = [Problem]
    for route in routes:
        if route.body is not None:
            types_used.extend(_members(route.body))
        types_used.extend(t for t in route.responses.values() if t is not None)
    schemas, components = msgspec.json.schema_components(types_used, ref_template="#/components/schemas/{name}")
    by_type: dict[Any, Any] = dict(zip(types_used, schemas, strict=True))
    for route in routes:
        if route.body is not None and len(_members(route.body)) > 1:
            by_type[route.body] = {"oneOf": [by_type[m] for m in _members(route.body)]}
    return by_type, components


def _operation(route: Route, by_type: dict[Any, Any]) -> dict[str, Any]:
    """One route's operation object."""
    op: dict[str, Any] = {
        "summary": route.summary,
        "operationId": route.handler.__name__,
        "tags": [route.tag],
        "responses": _responses(route, by_type),
    }
    if route.auth in ("agent", "admin", "any"):
        op["security"] = [{"bearer": []}]
    elif route.auth == "peer":
        op["security"] = [{"peerSignature": []}]
    params = _parameters(route)
    if params:
        op["parameters"] = params
    if route.body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": by_type[route.body]}}}
    return op


def _parameters(route: Route) -> list[dict[str, Any]]:
    """A route's path parameters, its query Struct's fields, and the idempotency header when it takes one."""
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _path_params(route.path)
    ]
    if route.query is not None:
        qschema = msgspec.json.schema(route.query)
        qdefs = qschema.get("$defs", {})
        target = qdefs.get(route.query.__name__, qschema)
        required = set(target.get("required", []))
        for name, prop in target.get("properties", {}).items():
            params.append({"name": name, "in": "query", "required": name in required, "schema": _inline(prop, qdefs)})
    if route.idempotent:
        params.append(
            {
                "name": idempotency.HEADER,
                "in": "header",
                "required": False,
                "description": "a retry with the same key returns the first answer and writes nothing",
                "schema": {"type": "string", "minLength": 1, "maxLength": 128},
            }
        )
    return params


def _responses(route: Route, by_type: dict[Any, Any]) -> dict[str, Any]:
    """A route's success responses, then a problem+json response for each error status it can answer."""
    responses: dict[str, Any] = {}
    for status, typ in route.responses.items():
        if typ is None:
            responses[str(status)] = {"description": "no content"}
        else:
            content = {"application/json": {"schema": by_type[typ]}}
            content.update({media: {"schema": {"type": "string"}} for media in route.text_types})
            responses[str(status)] = {"description": "success", "content": content}
    problem_ref = {"$ref": "#/components/schemas/Problem"}
    for status in _error_statuses(route):
        responses[str(status)] = {
            "description": "problem",
            "content": {"application/problem+json": {"schema": problem_ref}},
        }
    return responses


def _members(typ: Any) -> list[Any]:
    """The alternatives of a union type, or the type itself."""
    if typing.get_origin(typ) in (typing.Union, types.UnionType):
        return list(typing.get_args(typ))
    return [typ]


def _error_statuses(route: Route) -> list[int]:
    statuses = [400, 422]
    if route.auth != "none":
        statuses += [401, 403]
    if route.auth in ("agent", "admin", "any"):
        statuses.append(429)  # node.web.limits: per-credential rate limit
    if route.body is not None:
        statuses += [413, 415]
    if "{" in route.path or route.method != "GET":
        statuses += [404, 409]
    return sorted(set(statuses) - set(route.responses))


def _path_params(path: str) -> list[str]:
    return re.findall(r"{(\w+)}", path)


def _inline(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Resolve local $refs so query parameter schemas stand alone."""
    text = json.dumps(schema)
    if "$ref" not in text:
        return schema
    if "$ref" in schema:
        return _inline(defs[schema["$ref"].rsplit("/", 1)[1]], defs)
    return {
        k: (
            _inline(v, defs)
            if isinstance(v, dict)
            else [_inline(i, defs) if isinstance(i, dict) else i for i in v]
            if isinstance(v, list)
            else v
        )
        for k, v in schema.items()
    }
