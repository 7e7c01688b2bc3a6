"""A sender against a scripted post function (the edge here is the endpoint's answer): retries, coalescing, the
breaker opening, skipping while open and closing after a successful trial."""

from __future__ import annotations

import asyncio

from node.push.endpoints import Endpoint
from node.push.sender import PushFailed, PushSettings, Sender
from wire.api import Envelope

SETTINGS = PushSettings(
    coalesce_s=0.01,
    flood_coalesce_s=0.01,
    retries=2,
    backoff_s=0.001,
    backoff_cap_s=0.002,
    breaker_threshold=3,
    breaker_cooldown_s=0.05,
    max_per_message=3,
)
ENDPOINT = Endpoint(1, "did:key:a", "http://h:1/", frozenset({1}), frozenset(), 0)


def env(i: int) -> Envelope:
    return Envelope(i, i, "h", "a", "t", "finding", "request", [], 0.5, True, [], 1, "directed_request", 1)


class Endpointish:
    def __init__(self) -> None:
        self.fail = False
        self.messages: list[tuple[list[int], int]] = []

    async def __call__(self, endpoint: Endpoint, batch: list[Envelope], more: int) -> None:
        await asyncio.sleep(0.005)
        if self.fail:
            raise PushFailed("HTTP 500", 500)
        self.messages.append(([e.notification_id for e in batch], more))


async def drain(sender: Sender) -> None:
    for _ in range(400):
        if not sender.busy:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the sender never went quiet")


async def test_notifications_arriving_together_are_coalesced() -> None:
    post = Endpointish()
    sender = Sender(ENDPOINT, post, SETTINGS, lambda: 0)
    sender.offer([env(1)])
    await asyncio.sleep(0)  # the first goes out at once
    for i in range(2, 8):
        sender.offer([env(i)])
    await drain(sender)
    assert post.messages[0] == ([1], 0)
    assert post.messages[1:] == [([2, 3, 4], 3)]  # the rest in one message: three listed, three counted
    assert sender.state.messages_sent == 2 and sender.state.notifications_pushed == 7


async def test_the_breaker_opens_skips_and_closes_after_a_trial() -> None:
    post = Endpointish()
    post.fail = True
    sender = Sender(ENDPOINT, post, SETTINGS, lambda: 0)
    sender.offer([env(1)])
    await drain(sender)
    st = sender.state
    assert st.breaker == "open" and st.attempts_failed == 3 and st.messages_failed == 1
    sender.offer([env(2)])  # skipped while open
    assert not sender.busy and st.messages_failed == 2
    await asyncio.sleep(SETTINGS.breaker_cooldown_s * 2)
    post.fail = False
    sender.offer([env(3)])
    await drain(sender)
    assert sender.state.breaker == "closed" and post.messages == [([3], 0)] and st.consecutive_failures == 0
