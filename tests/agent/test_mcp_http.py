"""Remote MCP: the real SDK client over streamable HTTP against `bbs serve --mcp-port`, bearer-authenticated."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from agent.client import Client
from agent.mcp_common import lean
from agent.mcp_results import search_page
from tests.agent.conftest import ServedNode
from tests.agent.tool_names import ALL_TOOLS
from wire.api import SearchQuery

pytestmark = [pytest.mark.slow, pytest.mark.remote_mcp]  # served_node with --mcp-port (tests/agent/conftest.py)


@asynccontextmanager
async def remote_session(node: ServedNode, token: str) -> AsyncIterator[ClientSession]:
    assert node.mcp_url is not None
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
        streamable_http_client(node.mcp_url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def ok(result: Any) -> Any:
    body = "".join(block.text for block in result.content)
    assert not result.is_error, body
    return json.loads(body)


async def test_every_tool_over_streamable_http(served_node: ServedNode) -> None:
    alice, bob = served_node.create_agent("alice"), served_node.create_agent("bob")
    async with (
        Client(served_node.url, api_key=alice["api_key"]) as rest,
        Client(served_node.url, api_key=bob["api_key"]) as bob_rest,
        remote_session(served_node, alice["api_key"]) as session,
    ):
        listed = await session.list_tools()
        assert {t.name for t in listed.tools} == ALL_TOOLS
        assert ok(await session.call_tool("subscribe", {"tags": ["net"]}))["agent_id"] == alice["agent_id"]
        first = ok(await session.call_tool("post", {"content": "Packet loss on the uplink", "tags": ["net"]}))
        assert first["author_id"] == alice["agent_id"]  # the token decides who posts
        second = ok(await session.call_tool("post", {"content": "Loss stops after a cable swap"}))
        link = ok(
            await session.call_tool(
                "link", {"source": str(second["id"]), "target": str(first["id"]), "link_type": "responds_to"}
            )
        )
        assert link["author_id"] == alice["agent_id"]
        read = ok(await session.call_tool("read", {"ids": [first["record_hash"]], "hops": 1}))
        assert read == lean(await rest.read([first["record_hash"]], _hops(1)))
        found = ok(await session.call_tool("search", {"q": "uplink"}))
        assert found == search_page(await rest.search(SearchQuery(q="uplink")))
        posted = await bob_rest.post("Uplink replaced", tags=["net"])
        box = ok(await session.call_tool("inbox", {}))
        assert [n["record_hash"] for n in box["notifications"]] == [posted.record_hash]
        ids = [n["notification_id"] for n in box["notifications"]]
        assert ok(await session.call_tool("inbox", {"ack": ids})) == {"acknowledged": 1}
        bad = await session.call_tool("read", {"ids": ["1"], "hops": 7})
        assert bad.is_error and "hops" in bad.content[0].text  # type: ignore[union-attr]


def _hops(n: int) -> Any:
    from wire.api import ReadQuery

    return ReadQuery(hops=n)


async def test_two_agents_on_one_endpoint_stay_apart(served_node: ServedNode) -> None:
    alice, bob = served_node.create_agent("alice"), served_node.create_agent("bob")
    async with remote_session(served_node, alice["api_key"]) as a, remote_session(served_node, bob["api_key"]) as b:
        assert ok(await a.call_tool("post", {"content": "from alice"}))["author_id"] == alice["agent_id"]
        assert ok(await b.call_tool("post", {"content": "from bob"}))["author_id"] == bob["agent_id"]


async def test_remote_mcp_refuses_missing_wrong_and_admin_tokens(served_node: ServedNode) -> None:
    assert served_node.mcp_url is not None
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with httpx2.AsyncClient() as http:
        for token in (None, "bbs_0123456789abcdef_wrong", served_node.admin_token):
            auth = {"Authorization": f"Bearer {token}"} if token else {}
            resp = await http.post(served_node.mcp_url, json=initialize, headers={**headers, **auth})
            assert resp.status_code == 401, token
            assert served_node.admin_token not in resp.text


async def test_session_token_from_key_proof_works_for_remote_mcp(served_node: ServedNode, tmp_path: Path) -> None:
    import subprocess

    from agent import identity_file
    from tests.agent.conftest import BBS

    alice = served_node.create_agent("alice")
    out = tmp_path / "alice.id"
    subprocess.run([*BBS, "agent", "export", "alice", "--data", str(served_node.data), "--out", str(out)], check=True)
    key = identity_file.load(out).key
    async with Client(served_node.url, signing_key=key) as signer:
        session = await signer.login()
    async with remote_session(served_node, session.token) as remote:
        assert ok(await remote.call_tool("post", {"content": "via session"}))["author_id"] == alice["agent_id"]


async def test_a_busy_mcp_port_is_a_clear_startup_error(tmp_path: Path) -> None:
    import socket

    from aiohttp import web

    from agent import mcp_http
    from node.agents import sessions as agent_auth
    from node.app import create_app
    from node.ops.datadir import initialise
    from node.service import Node

    initialise(tmp_path / "n")
    node = Node(tmp_path / "n")
    app = create_app(node)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        mcp_http.enable(
            app,
            authenticate=agent_auth.agent_authenticator(node),
            rest_url="http://127.0.0.1:1",
            host="127.0.0.1",
            port=port,
        )
        runner = web.AppRunner(app)
        with pytest.raises(RuntimeError, match="could not start"):
            await runner.setup()
        await runner.cleanup()


async def test_a_stop_of_the_cleanup_waiting_for_the_mcp_server_to_end_reaches_it() -> None:
    """The app's cleanup is cancelled (a second stop, a timeout around it) while it waits for the embedded uvicorn
    server to end: it ends cancelled, where a `suppress(CancelledError)` around the wait swallowed the stop and the
    cleanup ran on as if nothing had asked it to stop."""
    import asyncio

    from aiohttp import web

    from agent import mcp_http
    from scenarios.fednet import free_port

    async def nobody(_: str) -> str | None:
        return None

    app = web.Application()  # only the MCP endpoint: its lifecycle is the whole cleanup
    mcp_http.enable(app, authenticate=nobody, rest_url="http://127.0.0.1:1", host="127.0.0.1", port=free_port())
    runner = web.AppRunner(app)
    await runner.setup()
    cleanup = asyncio.create_task(runner.cleanup())
    await asyncio.sleep(0.03)  # inside the wait: uvicorn looks at should_exit every 0.1 s
    assert not cleanup.done()
    cleanup.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(cleanup, 10)
