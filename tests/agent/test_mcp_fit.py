"""What an agent meets first over MCP (issue 32): every REST parameter of the operations behind a tool has an MCP
spelling, the tool list fits its budget with annotations on every tool, and a search page stays compact.

The parity walk reads the node's own /openapi.json (a real aiohttp server on loopback) and each ToolDef's `rest`
operations; the budget is measured as tests/agent/test_mcp_stdio.py measures the wire (json.dumps of the SDK's
tool models, by_alias)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient
from mcp import Client as MCPClient

from agent.client import Client
from agent.mcp_common import ToolDef
from agent.mcp_server import TOOLS, build_server
from tests.conftest import AgentCreds

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
BUDGET_CHARS = 12_000  # the whole tools/list, for the whole round: the space and redaction parameters must fit in it

# REST names every tool spells the same way.
EVERYWHERE = {"Idempotency-Key": "idempotency_key"}
# REST parameters with no MCP spelling (at most three), and why.
NOT_OVER_MCP = {
    "record": "a record signed by its author: the bridge (bbs mcp --identity) signs for the agent, a tool never "
    "takes a signed record",
    "author": "the admin names the author of a promotion; an MCP caller is an agent and promotes as itself",
}
# Tools that reach no REST operation.
LOCAL_TOOLS = {"working_memory"}


async def provider() -> Client:
    raise AssertionError("listing tools does not reach the node")


async def listed_tools() -> list[Any]:
    async with MCPClient(build_server(provider)) as session:
        return (await session.list_tools()).tools


def rest_parameters(document: dict[str, Any], operation: dict[str, Any]) -> set[str]:
    """The names of an operation's path, query and header parameters and of its JSON body's fields."""
    names = {p["name"] for p in operation.get("parameters", [])}
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")

    def fields(schema: dict[str, Any]) -> set[str]:
        if "$ref" in schema:
            return fields(document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]])
        if "oneOf" in schema or "anyOf" in schema:
            return set().union(*(fields(s) for s in schema.get("oneOf", schema.get("anyOf", []))))
        return set(schema.get("properties", {}))

    return names | (fields(body) if body else set())


async def test_every_rest_parameter_behind_a_tool_has_an_mcp_spelling(client: TestClient) -> None:
    document = await (await client.get("/openapi.json")).json()
    assert len(NOT_OVER_MCP) <= 3
    missing: list[str] = []
    used_exceptions: set[str] = set()
    for spec in TOOLS:
        assert spec.rest or spec.name in LOCAL_TOOLS, f"{spec.name} names no REST operation"
        arguments = set(spec.arguments.properties)
        for op in spec.rest:
            method, path = op.split(" ", 1)
            assert path in document["paths"] and method.lower() in document["paths"][path], f"{spec.name}: {op}?"
            for name in rest_parameters(document, document["paths"][path][method.lower()]):
                spelled = EVERYWHERE.get(name) or spec.renames.get(name) or name
                if spelled in arguments:
                    continue
                if name in NOT_OVER_MCP:
                    used_exceptions.add(name)
                    continue
                missing.append(f"{spec.name}: {op} {name}")
    assert missing == []
    assert used_exceptions == set(NOT_OVER_MCP)  # each exception is still needed


async def test_the_seed_s_parameters_of_the_six_primitives_are_tool_arguments() -> None:
    seed = {
        "post": {"links", "directed_to", "idempotency_key", "entry_type", "performative", "content", "confidence",
                 "tags"},
        "read": {"ids", "include_links", "hops", "link_types", "direction"},
        "search": {"q", "tags", "entry_type", "performative", "author", "min_confidence", "since", "limit", "offset",
                   "hops", "link_types", "direction"},
        "link": {"source", "target", "link_type", "annotation", "idempotency_key"},
        "subscribe": {"tags", "entry_types", "performatives", "authors", "directed"},
        "inbox": {"limit", "since", "mark_delivered"},
    }  # fmt: skip
    schemas = {t.name: set(t.input_schema["properties"]) for t in await listed_tools()}
    for name, parameters in seed.items():
        assert parameters <= schemas[name], (name, parameters - schemas[name])


async def test_the_tool_list_fits_its_budget_with_annotations_on_every_tool() -> None:
    tools = await listed_tools()
    size = len(json.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]))
    assert size <= BUDGET_CHARS, size
    for t in tools:
        wire = t.model_dump(mode="json", by_alias=True, exclude_none=True)
        assert set(wire["annotations"]) >= {"readOnlyHint", "destructiveHint", "idempotentHint"}, t.name
        assert wire["inputSchema"]["additionalProperties"] is False, t.name
        assert len(t.description) <= 200, t.name
        for name, prop in wire["inputSchema"]["properties"].items():
            assert "title" not in prop and "anyOf" not in prop, (t.name, name)  # one type, no pydantic leftovers
    read_only = {t.name for t in tools if t.annotations and t.annotations.read_only_hint}
    assert read_only == {"read", "search", "working_memory"}


def test_each_tool_def_is_listed_once_under_its_function_s_name() -> None:
    names = [spec.name for spec in TOOLS]
    assert len(names) == len(set(names)) and all(isinstance(spec, ToolDef) for spec in TOOLS)
