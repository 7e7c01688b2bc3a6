"""One endpoint's pushes: coalescing, retries with capped exponential backoff, and a circuit breaker.

The first notifications after a quiet spell go out at once; what arrives while a message is in flight, being
retried, or within `coalesce_s` after it (`flood_coalesce_s` after a full message), goes out together in the next
message (at most `max_per_message` envelopes; the rest are counted in `more`). A message that fails every retry is
dropped: a push is a hint, the inbox keeps the notifications. After `breaker_threshold` failed attempts in a row
the breaker opens: nothing is sent for `breaker_cooldown_s` (doubling up to `breaker_max_cooldown_s` while trials
fail), then one trial message (half open) closes it again on success.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from node.push.endpoints import Endpoint, Origin
from wire.api import Envelope
from wire.push import PushState
from wire.time import format_ms


@dataclass(frozen=True)
class PushSettings:
    """How the node pushes (`bbs serve` fills `allowlist` and the node's origins from its config)."""

    allowlist: tuple[str, ...] = ()  # URL prefixes an endpoint must start with; empty: any URL not refused
    own: tuple[Origin, ...] = ()  # the node's listening origins (refused as endpoints)
    max_concurrency: int = 16  # requests in flight at once, all endpoints together
    coalesce_s: float = 0.05  # at least this long between two messages to one endpoint
    flood_coalesce_s: float = 0.25  # ... and this long after a full message (a flood: fewer, fuller messages)
    timeout_s: float = 5.0  # per request
    retries: int = 3  # attempts after the first, per message
    backoff_s: float = 0.25  # first retry delay; doubles per retry
    backoff_cap_s: float = 5.0
    breaker_threshold: int = 5  # failed attempts in a row that open the breaker
    breaker_cooldown_s: float = 30.0
    breaker_max_cooldown_s: float = 300.0
    max_per_message: int = 50  # envelopes per message; more are counted, not listed


class PushFailed(Exception):
    """One attempt failed (no answer, a timeout, a status other than 2xx: then `status`)."""

    def __init__(self, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        self.status = status


Post = Callable[[Endpoint, list[Envelope], int], Awaitable[None]]


class Sender:
    """The queue and state of one endpoint."""

    def __init__(self, endpoint: Endpoint, post: Post, settings: PushSettings, now_ms: Callable[[], int]) -> None:
        self.endpoint, self.post, self.settings, self.now_ms = endpoint, post, settings, now_ms
        self.state = PushState()
        self.pending: list[Envelope] = []
        self.more = 0
        self._task: asyncio.Task[None] | None = None
        self._open_until = 0.0
        self._cooldown = settings.breaker_cooldown_s

    def offer(self, envelopes: list[Envelope], more: int = 0) -> None:
        """Queue new notifications' envelopes (and a count of others) for the next message."""
        if self.state.breaker == "open" and time.monotonic() < self._open_until:
            self.state.messages_failed += 1
            self._error("skipped: the circuit breaker is open")
            return
        room = self.settings.max_per_message - len(self.pending)
        self.pending.extend(envelopes[:room])
        self.more += more + max(0, len(envelopes) - room)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"push to endpoint {self.endpoint.id}")

    @property
    def busy(self) -> bool:
        """Whether a message is queued, in flight or being retried."""
        return self._task is not None

    async def stop(self) -> None:
        """Cancel the queue's work (the node is stopping or the endpoint was deleted)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        try:
            while self.pending or self.more:
                batch, more = self.pending, self.more
                self.pending, self.more = [], 0
                await self._deliver(batch, more)
                full = more > 0 or len(batch) >= self.settings.max_per_message
                # what arrives meanwhile goes out together
                await asyncio.sleep(self.settings.flood_coalesce_s if full else self.settings.coalesce_s)
        finally:
            self._task = None

    async def _deliver(self, batch: list[Envelope], more: int) -> None:
        s = self.settings
        for attempt in range(s.retries + 1):
            if self.state.breaker == "open":
                if time.monotonic() < self._open_until:
                    self.state.messages_failed += 1
                    return
                self.state.breaker = "half_open"
            try:
                await self.post(self.endpoint, batch, more)
            except PushFailed as exc:
                if self._failed(str(exc)):
                    self.state.messages_failed += 1
                    return
            else:
                self._succeeded(len(batch) + more)
                return
            if attempt < s.retries:
                delay = min(s.backoff_cap_s, s.backoff_s * 2**attempt)
                await asyncio.sleep(delay * (0.5 + random.random() / 2))  # jitter: endpoints do not retry in step
        self.state.messages_failed += 1

    def _succeeded(self, count: int) -> None:
        st = self.state
        st.messages_sent += 1
        st.notifications_pushed += count
        st.consecutive_failures = 0
        st.last_ok_at = format_ms(self.now_ms())
        st.breaker = "closed"
        self._cooldown = self.settings.breaker_cooldown_s

    def _failed(self, error: str) -> bool:
        """Count a failed attempt; True when it opened the breaker."""
        st = self.state
        st.attempts_failed += 1
        st.consecutive_failures += 1
        self._error(error)
        trial_failed = st.breaker == "half_open"
        if trial_failed or st.consecutive_failures >= self.settings.breaker_threshold:
            if trial_failed:
                self._cooldown = min(self.settings.breaker_max_cooldown_s, self._cooldown * 2)
            st.breaker = "open"
            self._open_until = time.monotonic() + self._cooldown
            return True
        return False

    def _error(self, error: str) -> None:
        self.state.last_error = error[:300]
        self.state.last_error_at = format_ms(self.now_ms())
