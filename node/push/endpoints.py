"""Push endpoints: registration with its checks, listing and deletion (the `push_endpoints` table, node-local).

An endpoint URL is http(s) with a host and no credentials. Loopback and private addresses are allowed (a
household's agents run there), but not the node's own listening origins (a node must not push to itself) nor its
configured peers' origins (a push is not a peer request). An operator may restrict endpoints to URL prefixes
(`push_allowlist` in the node config).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from yarl import URL

from node.errors import Conflict, Forbidden, InvalidInput, NotFound
from node.push import store
from node.store.conn import Conn
from node.store.db import Database
from wire.push import MAX_PUSH_ENDPOINTS, PushEndpointIn

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


@dataclass(frozen=True)
class Endpoint:
    """One registered endpoint."""

    id: int
    agent_id: str
    url: str
    tiers: frozenset[int]
    reasons: frozenset[str]  # empty: every reason
    created_ms: int

    def wants(self, tier: int, reason: str) -> bool:
        """Whether a notification of this tier and reason is pushed here."""
        return tier in self.tiers and (not self.reasons or reason in self.reasons)


@dataclass(frozen=True)
class Origin:
    """A scheme-less (host, port) origin the node refuses as an endpoint."""

    host: str
    port: int


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str, *, own: Iterable[Origin], peers: Iterable[str], allowlist: Iterable[str]) -> str:
    """The URL if it may be a push endpoint; InvalidInput (422) or Forbidden (403, allowlist) otherwise."""
    try:
        parsed = URL(url)
        port = parsed.port
    except (ValueError, UnicodeError, TypeError) as exc:
        raise InvalidInput(f"not a usable URL: {exc}", field="$.url", code="invalid_push_url") from None
    host = (parsed.host or "").lower()
    if parsed.scheme not in ("http", "https") or not host or "%" in (parsed.raw_host or ""):
        raise InvalidInput("the URL must be http(s)://HOST[:PORT]/PATH", field="$.url", code="invalid_push_url")
    if parsed.user is not None or parsed.password is not None or parsed.raw_fragment:
        raise InvalidInput("the URL cannot carry credentials or a fragment", field="$.url", code="invalid_push_url")
    if not port:
        raise InvalidInput("the URL's port must be 1 to 65535", field="$.url", code="invalid_push_url")
    for origin in own:
        same_host = host == origin.host or origin.host in WILDCARD_HOSTS or (_loopback(host) and _loopback(origin.host))
        if port == origin.port and same_host:
            raise InvalidInput(
                "the URL is one of this node's own listening origins", field="$.url", code="push_url_refused"
            )
    for peer in peers:
        try:
            p = URL(peer)
            if (p.host or "").lower() == host and p.port == port:
                raise InvalidInput("the URL is a configured peer's origin", field="$.url", code="push_url_refused")
        except (ValueError, UnicodeError):
            continue
    prefixes = [p for p in allowlist if p]
    if prefixes and not any(url.startswith(prefix) for prefix in prefixes):
        raise Forbidden("this node only pushes to URLs its operator allows", field="$.url", code="push_url_not_allowed")
    return url


class PushEndpoints:
    """The agents' push endpoints."""

    def __init__(self, db: Database, now_ms: Callable[[], int]) -> None:
        self.db = db
        self.now_ms = now_ms

    async def register(self, agent_id: str, body: PushEndpointIn) -> tuple[Endpoint, bool]:
        """Store the endpoint (the URL again updates its tiers and reasons). Returns (endpoint, created)."""
        now = self.now_ms()
        return await self.db.write(lambda c: register_txn(c, agent_id, body, now))

    async def of_agent(self, agent_id: str) -> list[Endpoint]:
        """The agent's endpoints, oldest first."""
        return await self.db.read(lambda c: endpoints(c, agent_id), quick=True)

    async def get(self, agent_id: str, endpoint_id: int) -> Endpoint:
        """One of the agent's endpoints, or 404 `push_endpoint_not_found`."""
        found = [e for e in await self.of_agent(agent_id) if e.id == endpoint_id]
        if not found:
            raise NotFound(
                f"no push endpoint {endpoint_id} of yours", code="push_endpoint_not_found", field="endpoint_id"
            )
        return found[0]

    async def all(self) -> list[Endpoint]:
        """Every agent's endpoints."""
        return await self.db.read(lambda c: endpoints(c, None), quick=True)

    async def delete(self, agent_id: str, endpoint_id: int) -> None:
        """Remove one of the agent's endpoints, or 404 `push_endpoint_not_found`."""
        await self.db.write(lambda c: delete_txn(c, agent_id, endpoint_id))

    async def peer_urls(self) -> list[str]:
        """The configured peers' URLs (refused as endpoints)."""
        return await self.db.read(store.peer_urls, quick=True)


def register_txn(conn: Conn, agent_id: str, body: PushEndpointIn, now_ms: int) -> tuple[Endpoint, bool]:
    """Insert or update the agent's endpoint at `body.url`; at most MAX_PUSH_ENDPOINTS per agent."""
    tiers, reasons = json.dumps(sorted(set(body.tiers))), json.dumps(sorted(set(body.reasons)))
    existing = store.endpoint_id_at(conn, agent_id, body.url)
    if existing is not None:
        store.update_endpoint_txn(conn, existing, tiers, reasons)
        return _one(conn, existing), False
    if store.count_endpoints(conn, agent_id) >= MAX_PUSH_ENDPOINTS:
        raise Conflict(
            f"an agent may register at most {MAX_PUSH_ENDPOINTS} push endpoints", code="too_many_push_endpoints"
        )
    new_id = store.insert_endpoint_txn(conn, agent_id, body.url, tiers, reasons, now_ms)
    return _one(conn, new_id), True


def endpoints(conn: Conn, agent_id: str | None) -> list[Endpoint]:
    """One agent's endpoints (every agent's when None), oldest first."""
    return [_endpoint(r) for r in store.endpoint_rows(conn, agent_id)]


def delete_txn(conn: Conn, agent_id: str, endpoint_id: int) -> None:
    """Delete one of the agent's endpoints."""
    if not store.delete_endpoint_txn(conn, agent_id, endpoint_id):
        raise NotFound(f"no push endpoint {endpoint_id} of yours", code="push_endpoint_not_found", field="endpoint_id")


def _one(conn: Conn, endpoint_id: int) -> Endpoint:
    return _endpoint(store.endpoint_row(conn, endpoint_id))


def _endpoint(row: Any) -> Endpoint:
    return Endpoint(
        id=row["id"],
        agent_id=row["agent_id"],
        url=row["url"],
        tiers=frozenset(json.loads(row["tiers"])),
        reasons=frozenset(json.loads(row["reasons"])),
        created_ms=row["created_ms"],
    )
