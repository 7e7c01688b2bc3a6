"""The runtime's push receiver against a real `bbs serve` process: a tier-1 request wakes the loop, a forged push
is refused, and the endpoint is removed on stop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest

from agent.client import Client
from agent.runtime.config import PushSettings
from agent.runtime.push import PushReceiver
from identity import keys
from tests.agent.conftest import ServedNode, start_node, stop_node
from wire import nlip
from wire.push import PushPayload
from wire.push_auth import sign_push


async def wait_set(event: asyncio.Event, tries: int = 200) -> bool:
    for _ in range(tries):
        if event.is_set():
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.fixture
def served_node(tmp_path: Path, node_store: Callable[[], str | None]) -> Iterator[ServedNode]:
    """A real `bbs serve` subprocess whose database is this pass's engine (`node_store`)."""
    node = start_node(tmp_path / "served", store_url=node_store())
    yield node
    stop_node(node)


async def test_a_request_wakes_the_runtime_and_stays_in_the_inbox(served_node: ServedNode) -> None:
    alice, bob = served_node.create_agent("alice"), served_node.create_agent("bob")
    wake = asyncio.Event()
    async with (
        Client(served_node.url, api_key=bob["api_key"]) as bob_client,
        Client(served_node.url, api_key=alice["api_key"]) as alice_client,
    ):
        receiver = PushReceiver(bob_client, PushSettings(delivery="push"), wake)
        url = await receiver.start()
        try:
            assert url.startswith("http://127.0.0.1:") and receiver.endpoint is not None
            entry = await alice_client.post(
                "please look", entry_type="question", performative="request", directed_to=[bob["agent_id"]]
            )
            assert await wait_set(wake)
            assert receiver.received == 1
            inbox = await bob_client.inbox()
            assert [n.entry_id for n in inbox.notifications] == [entry.id]

            # a push signed by another key is refused and wakes nothing
            wake.clear()
            body = nlip.push_message(PushPayload(node_id="x", agent_id=bob["agent_id"], notifications=[], more=1))
            headers = {"Content-Type": "application/json", **sign_push(keys.SigningKey.generate(), url, body)}
            async with aiohttp.ClientSession() as http, http.post(url, data=body, headers=headers) as resp:
                assert resp.status == 401
                assert (await resp.json())["format"] == "error"
            assert not wake.is_set() and receiver.refused == 1
        finally:
            await receiver.stop()
        endpoints = await bob_client.call("GET", "/v1/push/endpoints", dict)
        assert endpoints["endpoints"] == []
