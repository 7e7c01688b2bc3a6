"""One problem+json shape for every error: every error class of node/ and a real 4xx from every REST route.

The routes come from the running app's own `/openapi.json` (built from the route table), so a route added later is
checked without touching this file. Each route is provoked through a real server: without credentials (401),
with a body that is not JSON (400) or does not validate (422), with an unknown id in its path (404) and with a bad
query parameter (422). Every answer must be `application/problem+json` with `type`, `title`, `status` (the HTTP
status), `detail` and a stable `code`, plus `field` when one input is at fault.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from yarl import URL

import node as node_package
from identity import keys
from node.app import create_app
from node.dashboard import dashboard_routes
from node.errors import BBSError
from node.federation.routes import SyncSettings
from node.nlip.endpoint import nlip_routes
from node.ops.metrics import METRICS_ROUTE
from node.service import Node
from node.web.http import PROBLEM_TYPE, Route, error_middleware
from sync.auth import sign_headers
from tests.conftest import AgentCreds
from tests.node.api_helpers import post

PROBLEM_KEYS = {"type", "title", "status", "detail", "code"}
CODE = re.compile(r"[a-z][a-z0-9_]*")
METHODS = ("get", "post", "put", "patch", "delete")
UNKNOWN_PARAMETER = "no_such_parameter"
# Path parameters: an id no node has.
UNKNOWN_IDS = {"agent_id": keys.SigningKey.generate().did, "ref": "f" * 64}
UNKNOWN_ID = "987654321"
# A body that validates, for the routes with an id in the path and a required body field (others take `{}`).
VALID_BODIES: dict[str, Any] = {"review": {"decision": "approve"}}


# ---- the shape ------------------------------------------------------------------------------------------------


def shape_errors(status: int, content_type: str, body: Any) -> list[str]:
    """What is wrong with one problem+json answer (nothing when it has the one shape)."""
    if content_type != "application/problem+json":
        return [f"Content-Type is {content_type!r}, not application/problem+json"]
    if not isinstance(body, dict):
        return [f"the body is not a JSON object: {body!r}"]
    errors = []
    if missing := PROBLEM_KEYS - set(body):
        errors.append(f"missing {sorted(missing)}")
    if extra := set(body) - PROBLEM_KEYS - {"field"}:
        errors.append(f"unexpected members {sorted(extra)}")
    if body.get("status") != status:
        errors.append(f"status member {body.get('status')!r} is not the HTTP status {status}")
    code = body.get("code")
    if not (isinstance(code, str) and CODE.fullmatch(code)):
        errors.append(f"code {code!r} is not a stable snake_case identifier")
    elif body.get("type") != PROBLEM_TYPE + code:
        errors.append(f"type {body.get('type')!r} is not {PROBLEM_TYPE + code!r}")
    for name in ("title", "detail"):
        if not (isinstance(body.get(name), str) and body[name]):
            errors.append(f"{name} is not a non-empty string")
    if "field" in body and not (isinstance(body["field"], str) and body["field"]):
        errors.append(f"field {body['field']!r} is not a non-empty string")
    return errors


# ---- every error class ----------------------------------------------------------------------------------------


def error_classes() -> list[type[BBSError]]:
    """Every subclass of BBSError defined anywhere in node/, found after importing all of node's modules."""
    for module in pkgutil.walk_packages(node_package.__path__, "node."):
        importlib.import_module(module.name)

    def walk(cls: type[BBSError]) -> Iterator[type[BBSError]]:
        for sub in cls.__subclasses__():
            yield sub
            yield from walk(sub)

    found = {cls for cls in walk(BBSError) if cls.__module__.startswith("node.")}
    return sorted({BBSError, *found}, key=lambda cls: (cls.__module__, cls.__qualname__))


def test_the_error_classes_are_found() -> None:
    names = {cls.__qualname__ for cls in error_classes()}
    assert {"BBSError", "InvalidInput", "NotFound", "Unauthorized", "StorageFull", "NotPromotable"} <= names


async def test_every_error_class_answers_one_problem_shape(
    aiohttp_client: Callable[..., Awaitable[TestClient]],
) -> None:
    """Each class, raised by a handler behind the node's error middleware, with and without a field."""
    classes = error_classes()

    async def raise_it(request: web.Request) -> web.Response:
        cls = classes[int(request.match_info["index"])]
        raise cls("what went wrong", field=request.query.get("field"))

    app = web.Application(middlewares=[error_middleware])
    app.router.add_get("/raise/{index}", raise_it)
    client = await aiohttp_client(app)
    findings: list[str] = []
    for index, cls in enumerate(classes):
        name = f"{cls.__module__}.{cls.__qualname__}"
        if not (400 <= cls.status < 600 and CODE.fullmatch(cls.code) and cls.title):
            findings.append(f"{name}: status {cls.status}, code {cls.code!r}, title {cls.title!r}")
        for params in ({}, {"field": "$.name"}):
            resp = await client.get(f"/raise/{index}", params=params)
            body = await resp.json(content_type=None)
            errors = shape_errors(resp.status, resp.content_type, body)
            if resp.status != cls.status or body.get("code") != cls.code or body.get("title") != cls.title:
                errors.append(f"answered {resp.status} {body.get('code')!r} {body.get('title')!r}")
            if body.get("detail") != "what went wrong" or body.get("field") != params.get("field"):
                errors.append(f"detail/field not carried: {body}")
            findings += [f"{name} {params}: {error}" for error in errors]
    assert not findings, "\n".join(findings)


def test_error_codes_are_unique_per_class() -> None:
    """A class's code names it alone: two classes never share a default code."""
    by_code: dict[str, list[str]] = {}
    for cls in error_classes():
        by_code.setdefault(cls.code, []).append(cls.__qualname__)
    assert {code: names for code, names in by_code.items() if len(names) > 1} == {}


async def test_a_search_the_index_cannot_answer_yet_is_a_503_with_retry_after(
    client: TestClient, node: Node, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    """Only the search index answers words: without one (not opened, or being built) the node says so."""
    agent = await make_agent("searcher")
    node.reads.index = None
    resp = await client.get("/v1/search", params={"q": "anything"}, headers=agent.headers)
    body = await resp.json(content_type=None)
    assert shape_errors(resp.status, resp.content_type, body) == []
    assert (resp.status, body["code"]) == (503, "search_index_building")
    assert int(resp.headers["Retry-After"]) >= 1
    resp = await client.get("/v1/search", params={"tags": "x"}, headers=agent.headers)
    assert resp.status == 200  # a search by filters alone is SQL's


# ---- every route ----------------------------------------------------------------------------------------------


@dataclass
class Operation:
    """One operation of /openapi.json."""

    method: str
    path: str
    spec: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.method} {self.path} ({self.spec['operationId']})"

    @property
    def security(self) -> str | None:
        schemes = [name for requirement in self.spec.get("security", []) for name in requirement]
        return schemes[0] if schemes else None

    @property
    def has_body(self) -> bool:
        return "requestBody" in self.spec

    def parameters(self, where: str) -> list[dict[str, Any]]:
        return [p for p in self.spec.get("parameters", []) if p["in"] == where]


@dataclass
class World:
    """A real node behind a real server, with one of each thing a path can name and the credentials to ask."""

    client: TestClient
    agent: AgentCreds
    admin: dict[str, str]
    peer: keys.SigningKey
    operations: list[Operation]
    ids: dict[str, str] = field(default_factory=dict)
    answered: dict[str, set[int]] = field(default_factory=dict)  # operation -> the 4xx statuses it gave
    findings: list[str] = field(default_factory=list)

    async def request(
        self,
        op: Operation,
        *,
        credentials: bool = True,
        path_ids: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> tuple[int, str, Any]:
        """Send one request for `op`: real ids in the path unless told otherwise, the right credentials."""
        path = op.path
        for param in op.parameters("path"):
            name = param["name"]
            path = path.replace("{" + name + "}", (path_ids or self.ids)[name])
        target = URL(path).with_query(query or {})
        headers: dict[str, str] = {}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if credentials and op.security == "bearer":
            headers.update(await self.bearer(op))
        elif credentials and op.security == "peerSignature":
            headers.update(sign_headers(self.peer, op.method, str(self.client.make_url(str(target))), body))
        resp = await self.client.request(op.method, target, data=body, headers=headers)
        return resp.status, resp.content_type, await resp.json(content_type=None)

    async def bearer(self, op: Operation) -> dict[str, str]:
        """The agent's key, or the admin token for an admin route (its answer to the agent says which)."""
        path = op.path
        for param in op.parameters("path"):
            path = path.replace("{" + param["name"] + "}", self.ids[param["name"]])
        resp = await self.client.request(
            op.method, URL(path).with_query({UNKNOWN_PARAMETER: "1"}), headers=self.agent.headers
        )
        body = await resp.json(content_type=None)
        return self.admin if resp.status == 403 and body.get("code") == "admin_required" else self.agent.headers

    def check(
        self,
        op: Operation,
        what: str,
        answer: tuple[int, str, Any],
        statuses: tuple[int, ...],
        field: str | None = None,
    ) -> None:
        """Record a finding unless the answer has one of `statuses`, the one shape and (when given) `field`."""
        status, content_type, body = answer
        errors = shape_errors(status, content_type, body)
        if status not in statuses:
            errors.insert(0, f"answered {status}, not {' or '.join(map(str, statuses))}")
        if field is not None and isinstance(body, dict) and body.get("field") != field:
            errors.append(f"field is {body.get('field')!r}, not {field!r}")
        if 400 <= status < 500:
            self.answered.setdefault(op.name, set()).add(status)
        self.findings += [f"{op.name}, {what}: {error} -- {json.dumps(body)[:300]}" for error in errors]

    def assert_no_findings(self) -> None:
        assert not self.findings, f"{len(self.findings)} answers out of shape:\n" + "\n".join(self.findings)


@pytest.fixture
async def world(
    aiohttp_client: Callable[..., Awaitable[TestClient]],
    node: Node,
    admin_headers: dict[str, str],
    make_agent: Callable[[str], Awaitable[AgentCreds]],
) -> World:
    client = await aiohttp_client(create_app(node, sync=SyncSettings(pull=False)))
    alice = await make_agent("alice")
    peer = keys.SigningKey.generate()
    resp = await client.post(
        "/v1/peers", json={"url": "http://127.0.0.1:9", "node_id": peer.did}, headers=admin_headers
    )
    assert resp.status == 201, await resp.text()
    entry = await post(client, alice, content="an entry a path can name")
    resp = await client.post("/v1/subscriptions", json={"tags": ["x"]}, headers=alice.headers)
    subscription = await resp.json()
    resp = await client.post("/v1/agent-workflows/tasks", json={"key": "task-1"}, headers=alice.headers)
    task = await resp.json()
    resp = await client.post("/v1/default-mode/simulate-future", json={"goal": "a goal"}, headers=alice.headers)
    candidate = (await resp.json())["candidate"]
    resp = await client.post("/v1/push/endpoints", json={"url": "http://127.0.0.1:10/push"}, headers=alice.headers)
    push_endpoint = await resp.json()
    resp = await client.post("/v1/spaces", json={"name": "a space"}, headers=alice.headers)
    assert resp.status == 201, await resp.text()
    space = await resp.json()
    document = await (await client.get("/openapi.json")).json()
    operations = [
        Operation(method.upper(), path, spec)
        for path, item in document["paths"].items()
        for method, spec in item.items()
        if method in METHODS
    ]
    ids = {
        "ref": str(entry["id"]),
        "sub_id": str(subscription["id"]),
        "agent_id": alice.agent_id,
        "task_id": str(task["id"]),
        "candidate_id": str(candidate["id"]),
        "endpoint_id": str(push_endpoint["id"]),
        "space_id": str(space["space_id"]),
        "node_id": peer.did,
    }
    return World(client, alice, admin_headers, peer, operations, ids)


async def test_every_path_parameter_has_a_real_id(world: World) -> None:
    """The fixture made one thing for every path parameter the routes use (a new one must be added to it)."""
    names = {param["name"] for op in world.operations for param in op.parameters("path")}
    assert names == set(world.ids)


async def test_without_credentials_every_protected_route_is_401(world: World) -> None:
    protected = [op for op in world.operations if op.security is not None]
    assert len(protected) > 30
    for op in protected:
        body = b"{}" if op.has_body else None
        world.check(op, "no credentials", await world.request(op, credentials=False, body=body), (401,))
    world.assert_no_findings()


async def test_a_body_that_is_not_json_is_400(world: World) -> None:
    with_body = [op for op in world.operations if op.has_body]
    assert len(with_body) > 20
    for op in with_body:
        answer = await world.request(op, body=b'{"not": json')
        world.check(op, "a body that is not JSON", answer, (400,))
        if answer[2].get("code") != "invalid_json":
            world.findings.append(f"{op.name}, a body that is not JSON: code {answer[2].get('code')!r}")
    world.assert_no_findings()


async def test_a_body_with_a_repeated_key_or_a_nul_is_refused_with_its_field(world: World) -> None:
    """node/store/submission.py: every JSON body, whatever the route (peer-signed ones answer 401 before reading it)."""
    for op in [op for op in world.operations if op.has_body and "peerSignature" not in str(op.spec.get("security"))]:
        answer = await world.request(op, body=b'{"a": {"b": 1, "b": 2}}')
        world.check(op, "a repeated key", answer, (400,), field="$.a.b")
        if answer[2].get("code") != "duplicate_key":
            world.findings.append(f"{op.name}, a repeated key: code {answer[2].get('code')!r}")
        answer = await world.request(op, body=b'{"a": ["ok", "\\u0000"], "b\\u0000": 1}')
        world.check(op, "a NUL", answer, (422,), field="$.a[1]")
    world.assert_no_findings()


async def test_a_body_that_fails_validation_is_422_with_its_field(world: World) -> None:
    for op in [op for op in world.operations if op.has_body]:
        world.check(op, "an array for a body", await world.request(op, body=b"[]"), (422,), field="$")
        answer = await world.request(op, body=json.dumps({UNKNOWN_PARAMETER: 1}).encode())
        world.check(op, "an unknown body member", answer, (422,), field=f"$.{UNKNOWN_PARAMETER}")
    world.assert_no_findings()


async def test_an_unknown_id_in_the_path_is_404(world: World) -> None:
    with_ids = [op for op in world.operations if op.parameters("path")]
    assert len(with_ids) >= 12
    for op in with_ids:
        unknown = {p["name"]: UNKNOWN_IDS.get(p["name"], UNKNOWN_ID) for p in op.parameters("path")}
        body = json.dumps(VALID_BODIES.get(op.spec["operationId"], {})).encode() if op.has_body else None
        answer = await world.request(op, path_ids=unknown, body=body)
        world.check(op, f"unknown {unknown}", answer, (404,))
        # Most of these name the path parameter in `field`; GET /v1/agents/{agent_id} and
        # DELETE /v1/subscriptions/{sub_id} leave it out. When present it must name the parameter.
        if "field" in answer[2] and answer[2]["field"] not in unknown:
            world.findings.append(f"{op.name}, unknown id: field {answer[2]['field']!r} names no path parameter")
    world.assert_no_findings()


def bad_value(schema: dict[str, Any]) -> str | None:
    """A query value the parameter's schema refuses, or None when any string would do."""
    options = [schema, *schema.get("anyOf", []), *schema.get("oneOf", [])]
    types = {option.get("type") for option in options}
    if "enum" in schema:
        return "no-such-value"
    if types & {"integer", "number"}:
        return "not-a-number"
    if "boolean" in types:
        return "perhaps"
    if schema.get("format") == "date-time":
        return "\x01 not this"
    patterns = [option["pattern"] for option in options if option.get("pattern")]
    if patterns:  # the first candidate every pattern refuses (a pattern refusing only NUL takes a control character)
        return next(v for v in ("\x01 not this", "\x00") if not any(re.search(p, v) for p in patterns))
    if "array" in types:
        items = schema.get("items") or next(o.get("items") for o in options if o.get("type") == "array")
        return bad_value(items)
    return None


async def test_a_bad_query_parameter_is_422_with_its_field(world: World) -> None:
    """Every route refuses a parameter it does not take; every typed parameter refuses a value of another type."""
    checked = 0
    for op in world.operations:
        body = json.dumps(VALID_BODIES.get(op.spec["operationId"], {})).encode() if op.has_body else None
        answer = await world.request(op, query={UNKNOWN_PARAMETER: "1"}, body=body)
        world.check(op, "an unknown query parameter", answer, (422,), field=f"$.{UNKNOWN_PARAMETER}")
        for param in op.parameters("query"):
            value = bad_value(param["schema"])
            if value is None:
                continue
            checked += 1
            answer = await world.request(op, query={param["name"]: value})
            name = param["name"]
            world.check(op, f"{name}={value!r}", answer, (422,))
            field_ = answer[2].get("field", "") if isinstance(answer[2], dict) else ""
            if not (field_ == f"$.{name}" or field_.startswith((f"$.{name}[", f"$.{name}."))):
                world.findings.append(f"{op.name}, {name}={value!r}: field {field_!r} does not name $.{name}")
    assert checked > 10
    world.assert_no_findings()


async def test_every_route_answers_a_4xx_in_the_one_shape(world: World) -> None:
    """The union of the provocations above, route by route: a route that cannot be made to answer a 4xx is listed."""
    for op in world.operations:
        if op.security is not None:
            body = b"{}" if op.has_body else None
            world.check(op, "no credentials", await world.request(op, credentials=False, body=body), (401,))
        if op.has_body:
            world.check(op, "a body that is not JSON", await world.request(op, body=b"{"), (400,))
        world.check(op, "an unknown query parameter", await world.request(op, query={UNKNOWN_PARAMETER: "1"}), (422,))
    silent = [op.name for op in world.operations if not world.answered.get(op.name)]
    assert not silent, "routes that answered no 4xx:\n" + "\n".join(silent)
    world.assert_no_findings()


def outside_routes() -> list[Route]:
    """The app's routes kept out of /openapi.json, besides the document itself: Prometheus's scrape, the dashboard,
    and POST /nlip (NLIP, not REST: its errors past authentication are NLIP messages, test_nlip_endpoint.py)."""
    return [METRICS_ROUTE, *dashboard_routes(), *nlip_routes()]


async def test_the_document_lists_every_rest_route_of_the_app(world: World) -> None:
    """The routes above come from /openapi.json: the app serves no other route but the document and the dashboard."""
    documented = {(op.method, op.path) for op in world.operations}
    served = {
        (route.method, route.resource.canonical)
        for route in world.client.app.router.routes()
        if route.resource is not None and route.method != "HEAD"
    }
    outside = {(route.method, route.path) for route in outside_routes()}
    assert served - outside - {("GET", "/openapi.json")} == documented


async def test_the_routes_outside_the_document_answer_in_the_one_shape(world: World) -> None:
    """/openapi.json, /metrics and the dashboard's reads, kept out of the document, answer in the one shape."""
    resp = await world.client.post("/openapi.json")  # it takes no body and ignores the query: a wrong method
    status, body = resp.status, await resp.json(content_type=None)
    assert shape_errors(status, resp.content_type, body) == [], body
    assert (status, body["code"]) == (405, "method_not_allowed")
    for route in outside_routes():
        if route.auth == "none":
            continue
        op = Operation(route.method, route.path, {"operationId": route.handler.__name__, "security": [{"bearer": []}]})
        path = re.sub(r"{(\w+)}", lambda match: world.ids.get(match[1], "1"), route.path)
        resp = await world.client.request(route.method, path)
        world.check(op, "no credentials", (resp.status, resp.content_type, await resp.json(content_type=None)), (401,))
        headers = world.admin if route.auth == "admin" else world.agent.headers
        resp = await world.client.request(route.method, path, params={UNKNOWN_PARAMETER: "1"}, headers=headers)
        answer = (resp.status, resp.content_type, await resp.json(content_type=None))
        world.check(op, "an unknown query parameter", answer, (422,), field=f"$.{UNKNOWN_PARAMETER}")
    world.assert_no_findings()
