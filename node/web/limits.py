"""Rate limits: token buckets per bearer credential and per client address, answering 429 with Retry-After.

The bucket is keyed by the credential's key id (the `<key id>` of `bbs_<key id>_<secret>`, or of a key-proof
session token `bbss_<key id>_<secret>`), read before authentication so a flood costs no database lookup; an
agent's bucket is therefore per credential (`rate`, `burst`).

Unauthenticated requests have their own, separately configured limit (`anon_rate`, `anon_burst`), one bucket
per client address: requests without a bearer token (health, node info, the dashboard's files, the key-proof
handshake); the 401s of an address (tokens that do not verify), so that an address whose bucket of failures is
empty is refused before its token is looked up and random key ids cannot flood the database; and the
peer-signed sync routes before their signature is checked: an address whose signatures keep failing (401/403)
is refused before the next one is verified, while a configured peer's signed requests are bounded by the
sync routes' own page and size caps (docs/security.md). The table of buckets is bounded, so random key ids or
addresses cannot grow memory without limit.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Middleware

from node.errors import BBSError, RateLimited
from node.web.http import Handler

MAX_BUCKETS = 100_000


@dataclass(frozen=True)
class RateLimit:
    """`rate` requests per second sustained per credential, bursts of up to `burst`; `anon_rate` and
    `anon_burst` the same per address for unauthenticated requests (None: as `rate` and `burst`). A rate of 0
    turns that limit off."""

    rate: float = 0.0
    burst: int = 1
    anon_rate: float | None = None
    anon_burst: int | None = None

    def anonymous(self) -> RateLimit:
        """The limit of unauthenticated requests, per client address."""
        rate = self.rate if self.anon_rate is None else self.anon_rate
        return RateLimit(rate, self.burst if self.anon_burst is None else self.anon_burst)


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
    """aiohttp middleware enforcing `limit` per credential, and `limit.anonymous()` per address for requests
    without one, for 401s and for failed peer signatures (no-op where a rate is 0)."""
    buckets = TokenBuckets(limit, clock)
    anon_limit = limit.anonymous()
    anon = TokenBuckets(anon_limit, clock)

    @web.middleware
    async def rate_limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        key = credential_key(request)
        peer_route = getattr(request.match_info.handler, "auth", None) == "peer"
        failures = f"failed:{request.remote}"
        if anon_limit.rate > 0:
            if peer_route:
                # the signature is checked only while the address's failed signatures leave a token
                _refuse(anon.wait(failures), anon_limit, "from this address with signatures that do not verify")
            elif key is None:
                _refuse(anon.take(f"addr:{request.remote}"), anon_limit, "from this address without a key")
            else:
                # an address whose keys keep failing is refused before the look-up: random key ids are no way round
                _refuse(anon.wait(failures), anon_limit, "from this address with keys that do not verify")
        if key is not None and limit.rate > 0:
            _refuse(buckets.take(key), limit, "with this key")
        try:
            return await handler(request)
        except BBSError as exc:
            # a key that does not verify (401); a peer signature that does not, or by a key not a peer's (403)
            if anon_limit.rate > 0 and (
                (exc.status == 401 and key is not None) or (peer_route and exc.status in (401, 403))
            ):
                anon.take(failures)
            raise

    return rate_limit


def _refuse(wait: float, limit: RateLimit, who: str) -> None:
    if wait > 0:
        retry = max(1, math.ceil(wait))
        raise RateLimited(
            f"more than {limit.rate:g} requests per second (bursts of {limit.burst}) {who}; retry in {retry} s",
            headers={"Retry-After": str(retry)},
        )
