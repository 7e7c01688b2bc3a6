"""Remote MCP: a node serves the agent tools over the SDK's streamable HTTP transport on its own port.

`bbs serve --mcp-port 8421` starts it beside the REST API (from the app's cleanup_ctx, in the same event
loop). Agents authenticate with `Authorization: Bearer <token>`; the node decides whose token it is: `enable`
takes an `authenticate` callable (token -> the did of the agent it belongs to, or None), which node/cli.py
builds from the node's own bearer authentication (API keys, session tokens from key-proof authentication).
The SDK's bearer middleware checks the token through `NodeTokenVerifier` and binds each MCP session to the
agent that opened it.

Each tool call goes through an `agent.client.Client` holding the caller's token and pointed at this node's
own REST API, so MCP and REST share one path into the service layer. Such a client has no private key:
over remote MCP the node signs for agents whose key it keeps; an agent that holds its own key runs
`bbs mcp --identity FILE` locally instead (the tools then answer `agent_signs_own_records`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import aiohttp
import uvicorn
from aiohttp import web
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

from agent.client import Client
from agent.mcp_server import build_server
from wire.stopping import wait_ended

MCP_PATH = "/mcp"
MAX_CLIENTS = 256

# A bearer token -> the did of the agent it belongs to; None for an unknown or expired token and for any
# credential that is not an agent's (the node's admin token).
AgentAuthenticator = Callable[[str], Awaitable[str | None]]


class McpStartError(RuntimeError):
    """The remote MCP endpoint could not listen (its port taken, its host unknown)."""


class NodeTokenVerifier:
    """The SDK's TokenVerifier over the node's bearer authentication of agents."""

    def __init__(self, authenticate: AgentAuthenticator) -> None:
        self._authenticate = authenticate

    async def verify_token(self, token: str) -> AccessToken | None:
        agent_id = await self._authenticate(token)
        if agent_id is None:
            return None
        return AccessToken(token=token, client_id=agent_id, scopes=[])


class _Clients:
    """One REST client per bearer token (bounded), sharing one HTTP connection pool."""

    def __init__(self, rest_url: str) -> None:
        self.rest_url = rest_url
        self._http: aiohttp.ClientSession | None = None
        self._by_token: OrderedDict[str, Client] = OrderedDict()

    async def current(self) -> Client:
        access = get_access_token()
        if access is None:  # the SDK's middleware refuses unauthenticated requests before tools run
            raise RuntimeError("no authenticated agent on this MCP request")
        client = self._by_token.get(access.token)
        if client is None:
            if self._http is None:
                self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
            client = Client(self.rest_url, api_key=access.token, session=self._http)
            self._by_token[access.token] = client
            while len(self._by_token) > MAX_CLIENTS:
                self._by_token.popitem(last=False)
        else:
            self._by_token.move_to_end(access.token)
        return client

    async def close(self) -> None:
        self._by_token.clear()
        if self._http is not None:
            await self._http.close()


class _EmbeddedServer(uvicorn.Server):
    """uvicorn inside the node's event loop: the node, not uvicorn, owns the process signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def enable(
    app: web.Application,
    *,
    authenticate: AgentAuthenticator,
    rest_url: str,
    host: str,
    port: int,
) -> None:
    """Serve MCP over streamable HTTP at http://host:port/mcp while `app` runs."""

    async def lifecycle(_: web.Application) -> AsyncIterator[None]:
        clients = _Clients(rest_url.rstrip("/"))
        mcp_url = f"http://{host}:{port}{MCP_PATH}"
        server = build_server(
            clients.current,
            token_verifier=NodeTokenVerifier(authenticate),
            # The tokens are this node's own credentials, not audience-bound OAuth tokens: the verifier is the check.
            auth=AuthSettings(
                issuer_url=rest_url,  # type: ignore[arg-type]
                resource_server_url=mcp_url,  # type: ignore[arg-type]
                validate_token_resource=False,
            ),
            log_level="WARNING",
        )
        starlette_app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
        config = uvicorn.Config(starlette_app, host=host, port=port, lifespan="on", log_level="warning")
        embedded = _EmbeddedServer(config)

        async def serve() -> None:
            try:
                await embedded.serve()
            except SystemExit as exc:  # uvicorn's way to report a failed bind; never let it stop the node's loop
                raise RuntimeError(f"uvicorn exited with status {exc.code}") from None

        task = asyncio.create_task(serve())
        while not embedded.started and not task.done():
            await asyncio.sleep(0.01)
        if task.done():
            failure = None if task.cancelled() else task.exception()
            raise McpStartError(f"the MCP endpoint could not start on {host}:{port}: {failure!r}")
        try:
            yield
        finally:
            embedded.should_exit = True
            try:
                with contextlib.suppress(RuntimeError):  # a server that failed has nothing more to say at the stop
                    await wait_ended(task)
            finally:
                await clients.close()

    app.cleanup_ctx.append(lifecycle)
