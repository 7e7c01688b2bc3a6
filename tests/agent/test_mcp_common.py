"""agent.mcp_common: what every MCP tool module shares. `tool` defines a ToolDef; `BBSServer` hands each call the
Client its provider gives (`client_of`); `convert` turns tool arguments into wire Structs, naming a bad argument;
`lean`/`out` shape results without verification material; `domain_errors` turns the node's errors into tool
errors an agent can act on. The server-side tests run tools against a real node on loopback."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from agent.client import BBSClientError, Client
from agent.mcp_common import (
    HINTS,
    OMITTED_ENTRY_FIELDS,
    BBSServer,
    ToolDef,
    client_of,
    convert,
    domain_errors,
    lean,
    out,
    tool,
    untitled,
)
from node.wire.api import PostEntry, ReadQuery
from tests.conftest import AgentCreds

# ---- tool ------------------------------------------------------------------------------------------------


async def shout(ctx: Context, word: str) -> str:
    return word.upper()


def test_tool_defines_a_tooldef_and_registers_nothing() -> None:
    spec = tool("Shout a word.")(shout)
    assert spec == ToolDef(shout, "Shout a word.", False)
    read_only = tool("Shout, read only.", read_only=True)(shout)
    assert read_only.read_only is True and read_only.fn is shout
    with pytest.raises(AttributeError):
        spec.description = "changed"  # type: ignore[misc]


# ---- convert ---------------------------------------------------------------------------------------------


def test_convert_leaves_out_arguments_not_given() -> None:
    entry = convert(
        {"entry_type": "finding", "performative": "inform", "content": "hi", "tags": None, "confidence": 0.9},
        PostEntry,
    )
    assert isinstance(entry, PostEntry)
    assert (entry.content, entry.tags, entry.confidence, entry.idempotency_key) == ("hi", [], 0.9, None)
    assert convert({"hops": None, "direction": None}, ReadQuery) == ReadQuery()


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"entry_type": "finding", "performative": "inform", "content": "x", "confidence": 2}, "confidence"),
        ({"entry_type": "memo", "performative": "inform", "content": "x"}, "entry_type"),
        ({"entry_type": "finding", "performative": "inform", "content": "x", "tags": [""]}, "tags[0]"),
    ],
)
def test_convert_names_the_bad_argument(arguments: dict[str, Any], named: str) -> None:
    with pytest.raises(ToolError) as caught:
        convert(arguments, PostEntry)
    text = str(caught.value)
    assert text.startswith("validation_error: ") and text.endswith(f"(argument {named})")
    assert "$." not in text


def test_convert_names_a_missing_field_in_its_message() -> None:
    with pytest.raises(ToolError, match=r"^validation_error: Object missing required field `content`"):
        convert({"entry_type": "finding", "performative": "inform"}, PostEntry)


# ---- lean and out ----------------------------------------------------------------------------------------


def test_lean_drops_verification_fields_of_entries_only() -> None:
    entry = {"record_hash": "h", "content": "x", "signature": "sig", "content_fingerprint": "fp", "id": 1}
    other = {"signature": "kept: not an entry", "name": "n"}
    result = lean({"entries": [entry], "other": other, "nested": [[entry]]})
    assert result["entries"] == [{"record_hash": "h", "content": "x", "id": 1}]
    assert result["other"] == other
    assert result["nested"] == [[{"record_hash": "h", "content": "x", "id": 1}]]
    assert {"signature", "content_fingerprint"} == OMITTED_ENTRY_FIELDS
    assert entry["signature"] == "sig"  # the input is left as it was


def test_lean_turns_structs_into_json_values() -> None:
    class Item(msgspec.Struct):
        record_hash: str
        signature: str
        tags: list[str]

    assert lean([Item("h", "sig", ["a"])]) == [{"record_hash": "h", "tags": ["a"]}]
    assert lean("plain") == "plain" and lean(3) == 3 and lean(None) is None


def test_out_is_the_lean_value_as_json() -> None:
    text = out({"record_hash": "h", "signature": "s", "content": "é"})
    assert json.loads(text) == {"record_hash": "h", "content": "é"}
    assert out([]) == "[]"


# ---- domain_errors ---------------------------------------------------------------------------------------


async def raising(exc: BaseException, arguments: dict[str, str] | None = None) -> str:
    async with domain_errors(arguments):
        raise exc
    return "unreachable"  # pragma: no cover


async def test_domain_errors_passes_results_through() -> None:
    async with domain_errors():
        value = 42
    assert value == 42


async def test_a_client_error_becomes_a_tool_error_with_argument_and_hint() -> None:
    with pytest.raises(ToolError) as caught:
        await raising(BBSClientError(404, "entry_not_found", "no entry 7", "$.target"))
    assert str(caught.value) == f"entry_not_found: no entry 7 (argument target). {HINTS['entry_not_found']}"


async def test_arguments_rename_node_fields_to_tool_arguments() -> None:
    with pytest.raises(ToolError) as caught:
        await raising(BBSClientError(422, "validation_error", "too long", "$.body"), {"body": "content"})
    assert "(argument content)" in str(caught.value)


async def test_no_argument_and_no_hint_when_there_is_none() -> None:
    for field in (None, "$", ""):
        with pytest.raises(ToolError) as caught:
            await raising(BBSClientError(409, "some_new_code", "it clashed", field))
        assert str(caught.value) == "some_new_code: it clashed."


async def test_other_exceptions_are_not_hidden() -> None:
    with pytest.raises(KeyError):
        await raising(KeyError("a bug"))


def test_every_hint_tells_what_to_do() -> None:
    assert all(hint.endswith(".") and hint[0].isupper() for hint in HINTS.values())


# ---- BBSServer and client_of, against a real node --------------------------------------------------------


@pytest.fixture
async def agent_client(client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]) -> AsyncIterator[Client]:
    creds = await make_agent("alice")
    async with Client(str(client.make_url("")), api_key=creds.api_key, retries=0) as rest:
        yield rest


@tool("Read one entry by id.", read_only=True)
async def read_one(ctx: Context, ref: str) -> str:
    async with domain_errors({"ref": "ref"}):
        return out(await (await client_of(ctx)).get_entry(ref))


@tool("Post a finding and return it.")
async def post_finding(ctx: Context, content: str, tags: list[str] | None = None) -> str:
    entry = convert({"entry_type": "finding", "performative": "inform", "content": content, "tags": tags}, PostEntry)
    async with domain_errors({"content": "content"}):
        return out(await (await client_of(ctx)).post_entry(entry))


def server_with(provider: Callable[[], Awaitable[Client]], *specs: ToolDef) -> BBSServer:
    server = BBSServer(provider)
    for spec in specs:
        server.add_tool(
            spec.fn,
            description=spec.description,
            annotations=ToolAnnotations(read_only_hint=spec.read_only),
            structured_output=False,
        )
    return server


def text_of(result: Any) -> str:
    assert not result.is_error
    return str(result.content[0].text)


async def test_a_tool_reaches_the_node_through_the_provider_s_client(agent_client: Client) -> None:
    calls = 0

    async def provider() -> Client:
        nonlocal calls
        calls += 1
        return agent_client

    server = server_with(provider, post_finding)
    assert server.client_provider is provider and server.name == "agent-bbs"
    posted = json.loads(text_of(await server.call_tool("post_finding", {"content": "over mcp", "tags": ["t"]})))
    assert posted["content"] == "over mcp" and posted["tags"] == ["t"]
    assert "signature" not in posted and "content_fingerprint" not in posted and posted["record_hash"]
    assert calls == 1  # one client per call
    stored = await agent_client.get_entry(str(posted["id"]))
    assert stored.entries[0].record_hash == posted["record_hash"]


async def test_a_node_error_reaches_the_agent_as_a_tool_error(agent_client: Client) -> None:
    async def provider() -> Client:
        return agent_client

    with pytest.raises(ToolError) as caught:
        await server_with(provider, read_one).call_tool("read_one", {"ref": "999999"})
    assert "entry_not_found" in str(caught.value) and HINTS["entry_not_found"] in str(caught.value)
    with pytest.raises(ToolError) as bad:
        await server_with(provider, post_finding).call_tool("post_finding", {"content": "x", "tags": [""]})
    assert "validation_error" in str(bad.value) and "(argument tags[0])" in str(bad.value)


async def test_an_unreachable_node_is_a_tool_error_with_its_hint(client: TestClient) -> None:
    url = str(client.make_url(""))
    await client.close()
    async with Client(url, api_key="bbs_nobody", retries=0) as gone:

        async def provider() -> Client:
            return gone

        with pytest.raises(ToolError) as caught:
            await server_with(provider, post_finding).call_tool("post_finding", {"content": "lost"})
    assert "unreachable" in str(caught.value) and HINTS["unreachable"] in str(caught.value)


async def test_client_of_refuses_a_server_that_is_not_a_bbs_server() -> None:
    from mcp.server.mcpserver import MCPServer

    plain = MCPServer("other")
    with pytest.raises(AssertionError):
        await client_of(Context(mcp_server=plain))


def test_untitled_drops_title_keywords_but_keeps_a_property_named_title() -> None:
    schema = {
        "title": "declareArguments",
        "properties": {"title": {"title": "Title", "type": "string"}, "key": {"title": "Key", "type": "string"}},
        "required": ["title"],
        "$defs": {"X": {"title": "X", "anyOf": [{"title": "A", "type": "string"}, {"type": "null"}]}},
    }
    assert untitled(schema) == {
        "properties": {"title": {"type": "string"}, "key": {"type": "string"}},
        "required": ["title"],
        "$defs": {"X": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
    }
