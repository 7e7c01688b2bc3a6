"""The OpenAPI document: valid OpenAPI 3.1, generated from the route table, covering every route."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from openapi_spec_validator import validate

from node.features import all_routes


async def document(client: TestClient) -> dict[str, Any]:
    resp = await client.get("/openapi.json")
    assert resp.status == 200 and resp.content_type == "application/json"
    body: dict[str, Any] = await resp.json()
    return body


async def test_openapi_is_valid_3_1(client: TestClient) -> None:
    doc = await document(client)
    assert doc["openapi"].startswith("3.1")
    validate(doc)  # raises on any violation of the OpenAPI 3.1 schema, including unresolvable $refs


async def test_every_route_is_documented(client: TestClient) -> None:
    doc = await document(client)
    routes = all_routes()
    assert routes
    for route in routes:
        op = doc["paths"].get(route.path, {}).get(route.method.lower())
        assert op is not None, f"{route.method} {route.path} missing from /openapi.json"
        assert op["summary"] == route.summary
        declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
        assert declared == set(route.path.replace("}", "{").split("{")[1::2]), route.path
        if route.auth in ("agent", "admin", "any"):
            assert op["security"] == [{"bearer": []}]
        for status in route.responses:
            assert str(status) in op["responses"]
    documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert documented == {(r.method, r.path) for r in routes}


async def test_core_operations_describe_their_inputs(client: TestClient) -> None:
    doc = await document(client)
    schemas = doc["components"]["schemas"]
    post = doc["paths"]["/v1/entries"]["post"]
    alternatives = post["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
    assert {a["$ref"].rsplit("/", 1)[1] for a in alternatives} == {"PostEntry", "SignedSubmission"}
    assert schemas["PostEntry"]["properties"]["confidence"]["maximum"] == 1.0
    assert schemas["PostEntry"]["additionalProperties"] is False
    search = {p["name"]: p for p in doc["paths"]["/v1/search"]["get"]["parameters"]}
    assert {"q", "tags", "entry_type", "performative", "author", "min_confidence", "since", "limit", "offset",
            "hops", "link_types", "direction"} <= set(search)  # fmt: skip
    assert search["limit"]["schema"]["maximum"] == 200 and search["hops"]["schema"]["maximum"] == 3
    for p in search.values():
        assert "$ref" not in str(p["schema"]), p  # query parameter schemas stand alone
    problem = doc["paths"]["/v1/entries"]["post"]["responses"]["422"]["content"]["application/problem+json"]
    assert problem["schema"] == {"$ref": "#/components/schemas/Problem"}


async def test_the_validator_catches_a_broken_document(client: TestClient) -> None:
    """The check above can fail: a dangling $ref or a missing response description is refused."""
    doc = await document(client)
    dangling = copy.deepcopy(doc)
    dangling["paths"]["/healthz"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] = {
        "$ref": "#/components/schemas/NoSuchThing"
    }
    with pytest.raises(Exception):  # noqa: B017  (the validator raises several error types)
        validate(dangling)
    undescribed = copy.deepcopy(doc)
    del undescribed["paths"]["/healthz"]["get"]["responses"]["200"]["description"]
    with pytest.raises(Exception):  # noqa: B017
        validate(undescribed)


async def test_the_idempotency_header_is_documented_where_it_is_honoured(client: TestClient) -> None:
    doc = await document(client)
    with_header = sorted(
        f"{method.upper()} {path}"
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if any(p["in"] == "header" and p["name"] == "Idempotency-Key" for p in op.get("parameters", []))
    )
    assert with_header == [
        "POST /v1/agent-workflows/messages",
        "POST /v1/agent-workflows/tasks/{task_id}/complete",
        "POST /v1/agent-workflows/tasks/{task_id}/release",
        "POST /v1/default-mode/consolidate",
        "POST /v1/default-mode/critic",
        "POST /v1/default-mode/incubate",
        "POST /v1/default-mode/promote/{candidate_id}",
        "POST /v1/default-mode/reflect-session",
        "POST /v1/default-mode/simulate-future",
        "POST /v1/default-mode/stakeholder-simulation",
        "POST /v1/entries",
        "POST /v1/links",
    ]
