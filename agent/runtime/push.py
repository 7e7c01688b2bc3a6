"""Push delivery for the reference runtime (`push: delivery: push` in agent-config.yaml).

A small aiohttp listener receives the node's NLIP pushes, checks each one's signature (the node's key, tag
`bbs-push`) and payload (wire.nlip), and wakes the runtime's loop, which polls the inbox at once: the push is
only a hint, the inbox lease stays the delivery. On start the receiver registers its URL as a push endpoint of the
agent (the same URL again updates it); on stop it removes it. Polling on the adaptive schedule goes on beside it,
so a missed or refused push only delays a notification until the next poll.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from agent.client import BBSClientError, Client
from agent.runtime.config import PushSettings
from wire import nlip
from wire.push import PushEndpointIn, PushEndpointOut
from wire.push_auth import PushAuthError, PushVerifier

log = logging.getLogger("bbs.agent.push")
PATH = "/push"


class PushReceiver:
    """Listens for pushes and sets `wake` for each valid one."""

    def __init__(self, client: Client, settings: PushSettings, wake: asyncio.Event) -> None:
        self.client, self.settings, self.wake = client, settings, wake
        self.received = 0
        self.refused = 0
        self.endpoint: PushEndpointOut | None = None
        self._runner: web.AppRunner | None = None
        self._verifier: PushVerifier | None = None

    async def start(self) -> str:
        """Listen, then register the endpoint on the node; returns the URL the node calls."""
        self._verifier = PushVerifier(await self.client.node_id())
        app = web.Application(client_max_size=1024 * 1024)
        app.router.add_post(PATH, self._receive)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.listen_host, self.settings.listen_port)
        await site.start()
        port = self._runner.addresses[0][1]
        url = self.settings.url or f"http://{self.settings.listen_host}:{port}{PATH}"
        body = PushEndpointIn(url=url, tiers=list(self.settings.tiers))
        self.endpoint = await self.client.call("POST", "/v1/push/endpoints", PushEndpointOut, json=body)
        log.info("receiving pushes at %s", url)
        return url

    async def stop(self) -> None:
        """Remove the endpoint from the node (if it can be reached) and stop listening."""
        if self.endpoint is not None:
            try:
                await self.client.call("DELETE", f"/v1/push/endpoints/{self.endpoint.id}")
            except BBSClientError as exc:
                log.info("could not remove the push endpoint: %s", exc.detail)
            self.endpoint = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _receive(self, request: web.Request) -> web.Response:
        body = await request.read()
        assert self._verifier is not None
        try:
            self._verifier.verify(request.method, str(request.url), request.headers, body)
            payload = nlip.push_payload(body)
        except (PushAuthError, nlip.NlipError) as exc:
            self.refused += 1
            status = 401 if isinstance(exc, PushAuthError) else 400
            return web.Response(
                status=status, body=nlip.encode(nlip.error_message(exc.code, str(exc))), content_type="application/json"
            )
        self.received += 1
        if payload.notifications or payload.more:
            self.wake.set()
        return web.Response(status=204)
