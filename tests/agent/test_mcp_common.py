"""agent.mcp_common: what every MCP tool module shares. `tool` defines a ToolDef that the SDK serves as a
`StrictTool`; `BBSServer` hands each call the Client its provider gives (`client_of`); `convert`/`pick` turn tool
arguments into wire Structs, naming a bad argument;
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

from agent.client import BBSClientError, Client
from agent.mcp_common import (
    HINTS,
    OMITTED_ENTRY_FIELDS,
    BBSServer,
    StrictTool,
    ToolDef,
    client_of,
    convert,
    domain_errors,
    lean,
    out,
    pick,
    tool,
)
from agent.mcp_schema import ArgumentSpec, arguments
from tests.conftest import AgentCreds
from wire.api import PostEntry, ReadQuery

# ---- tool ------------------------------------------------------------------------------------------------


WORD = ArgumentSpec({"word": {"type": "string", "maxLength": 5}}, ["word"])


async def shout(ctx: Context, args: dict[str, Any]) -> str:
    return str(args["word"]).upper()


def test_tool_defines_a_tooldef_with_every_annotation_and_registers_nothing() -> None:
    spec = tool("Shout a word.", WORD, rest=("GET /x",))(shout)
    assert isinstance(spec, ToolDef) and spec.fn is shout and spec.name == "shout" and spec.rest == ("GET /x",)
    hints = spec.annotations
    assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == (False, False, False)
    read_only = tool("Shout, read only.", WORD, read_only=True)(shout).annotations
    assert (read_only.read_only_hint, read_only.destructive_hint, read_only.idempotent_hint) == (True, False, True)
    with pytest.raises(AttributeError):
        spec.description = "changed"  # type: ignore[misc]


async def test_the_sdk_serves_a_tooldef_with_its_own_schema_and_checks_arguments_first() -> None:
    served = tool("Shout a word.", WORD)(shout).sdk_tool()
    assert isinstance(served, StrictTool)
    assert served.parameters == {
        "type": "object",
        "properties": {"word": {"type": "string"}},
        "required": ["word"],
        "additionalProperties": False,
    }
    server = BBSServer(_no_client, tools=[served])
    assert text_of(await server.call_tool("shout", {"word": "hi"})) == "HI"
    cases: list[tuple[dict[str, Any], str]] = [({}, "word"), ({"word": 3}, "word"), ({"word": "toolong"}, "word"),
                                              ({"w": 1}, "w")]  # fmt: skip
    for given, named in cases:
        with pytest.raises(ToolError) as caught:
            await server.call_tool("shout", given)
        text = str(caught.value)
        assert text.startswith("validation_error: ") and f"(argument {named})" in text and "\n" not in text, text


async def test_a_crash_in_a_tool_is_an_error_without_its_text() -> None:
    async def crash(ctx: Context, args: dict[str, Any]) -> str:
        raise RuntimeError("secret detail")

    server = BBSServer(_no_client, tools=[tool("Crash.", WORD)(crash).sdk_tool()])
    with pytest.raises(ToolError) as caught:
        await server.call_tool("crash", {"word": "x"})
    assert "secret" not in str(caught.value) and str(caught.value).startswith("internal_error: ")


async def _no_client() -> Client:
    raise AssertionError("no client is needed")


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
    assert text.startswith("validation_error: ") and text.endswith(f"(argument {named}). {HINTS['validation_error']}")
    assert "$." not in text


def test_convert_names_a_missing_field_in_its_message() -> None:
    with pytest.raises(ToolError, match=r"^validation_error: Object missing required field `content`"):
        convert({"entry_type": "finding", "performative": "inform"}, PostEntry)


def test_pick_takes_the_struct_s_fields_under_their_argument_names() -> None:
    args = {"key_arg": "k", "content": "c", "other": 1}
    entry = pick({"entry_type": "finding", "performative": "inform", **args}, PostEntry)
    assert entry.content == "c"
    query = pick({"hops": 2, "unrelated": True}, ReadQuery)
    assert query == ReadQuery(hops=2)
    renamed = pick({"depth": 1}, ReadQuery, {"hops": "depth"})
    assert renamed.hops == 1


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


async def read_one(ctx: Context, args: dict[str, Any]) -> str:
    async with domain_errors({"ref": "ref"}):
        return out(await (await client_of(ctx)).get_entry(args["ref"]))


async def post_finding(ctx: Context, args: dict[str, Any]) -> str:
    entry = pick({"entry_type": "finding", "performative": "inform", **args}, PostEntry)
    async with domain_errors({"content": "content"}):
        return out(await (await client_of(ctx)).post_entry(entry))


READ_ONE = tool("Read one entry by id.", ArgumentSpec({"ref": {"type": "string"}}, ["ref"]), read_only=True)(read_one)
POST_FINDING = tool("Post a finding and return it.", arguments(PostEntry, skip=("entry_type", "performative")))(
    post_finding
)


def server_with(provider: Callable[[], Awaitable[Client]], *specs: ToolDef) -> BBSServer:
    return BBSServer(provider, tools=[spec.sdk_tool() for spec in specs])


def text_of(result: Any) -> str:
    assert not result.is_error
    return str(result.content[0].text)


async def test_a_tool_reaches_the_node_through_the_provider_s_client(agent_client: Client) -> None:
    calls = 0

    async def provider() -> Client:
        nonlocal calls
        calls += 1
        return agent_client

    server = server_with(provider, POST_FINDING)
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
        await server_with(provider, READ_ONE).call_tool("read_one", {"ref": "999999"})
    assert "entry_not_found" in str(caught.value) and HINTS["entry_not_found"] in str(caught.value)
    with pytest.raises(ToolError) as bad:
        await server_with(provider, POST_FINDING).call_tool("post_finding", {"content": "x", "tags": [""]})
    assert "validation_error" in str(bad.value) and "(argument tags[0])" in str(bad.value)


async def test_an_unreachable_node_is_a_tool_error_with_its_hint(client: TestClient) -> None:
    url = str(client.make_url(""))
    await client.close()
    async with Client(url, api_key="bbs_nobody", retries=0) as gone:

        async def provider() -> Client:
            return gone

        with pytest.raises(ToolError) as caught:
            await server_with(provider, POST_FINDING).call_tool("post_finding", {"content": "lost"})
    assert "unreachable" in str(caught.value) and HINTS["unreachable"] in str(caught.value)


async def test_client_of_refuses_a_server_that_is_not_a_bbs_server() -> None:
    from mcp.server.mcpserver import MCPServer

    plain = MCPServer("other")
    with pytest.raises(AssertionError):
        await client_of(Context(mcp_server=plain))
