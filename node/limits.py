"""Per-credential rate limits: a token bucket per bearer credential, answering 429 with Retry-After.

The bucket is keyed by the credential's key id (the `<key id>` of `bbs_<key id>_<secret>`, or of a key-proof
session token `bbss_<key id>_<secret>`), read before
authentication so a flood costs no database lookup; an agent's bucket is therefore per credential. Requests
without a bearer token (health, node info, the key-proof handshake, peer-signed sync) are not limited
here: sync is bounded by its own page and size caps (docs/security.md). The table of buckets is bounded,
so random key ids cannot grow memory without limit.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Middleware

from node.errors import RateLimited
from node.http import Handler

MAX_BUCKETS = 100_000


@dataclass(frozen=True)
class RateLimit:
    """`rate` requests per second sustained, bursts of up to `burst`; rate 0 turns limiting off."""

    rate: float = 0.0
    burst: int = 1


LIMIT: web.AppKey[RateLimit] = web.AppKey("rate_limit", RateLimit)


class TokenBuckets:
    """Token buckets by key: each holds up to `burst` tokens and refills at `rate` per second."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.clock = limit, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def take(self, key: str) -> float:
        """Spend one token of `key`'s bucket: 0.0 if there was one, else the seconds until there is."""
        now = self.clock()
        tokens, at = self._buckets.pop(key, (float(self.limit.burst), now))
        tokens = min(float(self.limit.burst), tokens + (now - at) * self.limit.rate)
        wait = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait = (1.0 - tokens) / self.limit.rate
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > MAX_BUCKETS:  # the least recently seen bucket goes first
            self._buckets.popitem(last=False)
        return wait


def credential_key(request: web.Request) -> str | None:
    """The key id of the request's bearer credential, or None if it carries none."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    parts = token.strip().split("_", 2)
    if len(parts) == 3 and parts[0] in ("bbs", "bbss"):  # API keys and admin tokens; key-proof session tokens
        return f"{parts[0]}_{parts[1][:32]}"
    return "malformed"  # every unparseable token shares one bucket


def middleware(limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> Middleware:
    """aiohttp middleware enforcing `limit` per credential (a no-op when limit.rate is 0)."""
    buckets = TokenBuckets(limit, clock)

    @web.middleware
    async def rate_limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        if limit.rate <= 0:
            return await handler(request)
        key = credential_key(request)
        if key is not None:
            wait = buckets.take(key)
            if wait > 0:
                retry = max(1, math.ceil(wait))
                raise RateLimited(
                    f"more than {limit.rate:g} requests per second (bursts of {limit.burst}) with this key; "
                    f"retry in {retry} s",
                    headers={"Retry-After": str(retry)},
                )
        return await handler(request)

    return rate_limit
