"""Per-credential rate limits: a token bucket per bearer credential, answering 429 with Retry-After.

The bucket is keyed by the credential's key id (the `<key id>` of `bbs_<key id>_<secret>`, or of a key-proof
session token `bbss_<key id>_<secret>`), read before
authentication so a flood costs no database lookup; an agent's bucket is therefore per credential. Requests
without a bearer token (health, node info, the dashboard's files, the key-proof handshake, which writes a
challenge) share one bucket per client address, with the same rate and burst; so do the 401s of an address
(tokens that do not verify), and an address whose bucket of failures is empty is refused before its token is
looked up, so random key ids cannot flood the database either. Peer-signed sync routes are
not limited here: they are bounded by their own page and size caps (docs/security.md). The table of buckets
is bounded, so random key ids cannot grow memory without limit.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Middleware

from node.errors import RateLimited, Unauthorized
from node.http import Handler

MAX_BUCKETS = 100_000


@dataclass(frozen=True)
class RateLimit:
    """`rate` requests per second sustained, bursts of up to `burst`; rate 0 turns limiting off."""

    rate: float = 0.0
    burst: int = 1


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

    def wait(self, key: str) -> float:
        """Seconds until `key`'s bucket holds a token (0.0 when it holds one now), spending nothing."""
        hit = self._buckets.get(key)
        if hit is None:
            return 0.0
        tokens = min(float(self.limit.burst), hit[0] + (self.clock() - hit[1]) * self.limit.rate)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.limit.rate


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
    """aiohttp middleware enforcing `limit` per credential, per address without one, and per address for 401s
    (a no-op when limit.rate is 0)."""
    buckets = TokenBuckets(limit, clock)

    @web.middleware
    async def rate_limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        if limit.rate <= 0:
            return await handler(request)
        key = credential_key(request)
        failures = f"failed:{request.remote}"
        if key is None and getattr(request.match_info.handler, "auth", None) != "peer":
            _refuse(buckets.take(f"addr:{request.remote}"), "from this address without a key")
        elif key is not None:
            # an address whose keys keep failing is refused before the look-up: random key ids are no way round
            _refuse(buckets.wait(failures), "from this address with keys that do not verify")
            _refuse(buckets.take(key), "with this key")
        try:
            return await handler(request)
        except Unauthorized:
            if key is not None:
                buckets.take(failures)
            raise

    def _refuse(wait: float, who: str) -> None:
        if wait > 0:
            retry = max(1, math.ceil(wait))
            raise RateLimited(
                f"more than {limit.rate:g} requests per second (bursts of {limit.burst}) {who}; retry in {retry} s",
                headers={"Retry-After": str(retry)},
            )

    return rate_limit
