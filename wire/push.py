"""Wire types of push endpoints (issue 26): what an agent registers, what the node reports about it, and the
payload a push carries (metadata-only envelopes, never content).

Shared by the node (REST routes, the dispatcher), the agent client, the MCP `push` tool, `bbs push` and the
reference runtime's receiver; imports nothing of `node` but `wire`.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from wire.api import Envelope

MAX_PUSH_URL_CHARS = 2048
MAX_PUSH_ENDPOINTS = 10  # per agent
Reason = Literal["directed_request", "directed", "subscription", "contradiction"]
Tier = Literal[1, 2]
PushUrl = Annotated[
    str, msgspec.Meta(min_length=8, max_length=MAX_PUSH_URL_CHARS, pattern=r"^[Hh][Tt][Tt][Pp][Ss]?://")
]
# The label of the structured submessage that carries a push's payload in the NLIP message.
PUSH_LABEL = "bbs.notifications"
TEST_LABEL = "bbs.push_test"


class PushEndpointIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Register (or, for a URL the agent has already, update) a push endpoint."""

    url: PushUrl
    tiers: Annotated[list[Tier], msgspec.Meta(min_length=1, max_length=2)] = msgspec.field(default_factory=lambda: [1])
    """The tiers pushed: [1] (the default: requests and contradictions) or [1, 2]."""
    reasons: Annotated[list[Reason], msgspec.Meta(max_length=4)] = msgspec.field(default_factory=list)
    """The reasons pushed; empty: every reason of the chosen tiers."""


class PushState(msgspec.Struct, kw_only=True):
    """What the node's dispatcher knows about one endpoint since the node started (kept in memory)."""

    breaker: Literal["closed", "open", "half_open"] = "closed"
    messages_sent: int = 0
    messages_failed: int = 0  # messages given up after every retry, or skipped while the breaker was open
    attempts_failed: int = 0
    notifications_pushed: int = 0
    consecutive_failures: int = 0
    last_ok_at: str | None = None
    last_error: str | None = None
    last_error_at: str | None = None


class PushEndpointOut(msgspec.Struct, kw_only=True):
    id: int
    agent_id: str
    url: str
    tiers: list[int]
    reasons: list[str]
    created_at: str
    state: PushState


class PushEndpointList(msgspec.Struct):
    endpoints: list[PushEndpointOut]


class PushTestOut(msgspec.Struct, kw_only=True):
    """The outcome of one test message sent at once (no retries; the breaker does not count it)."""

    ok: bool
    status: int | None = None
    error: str | None = None


class PushStatus(msgspec.Struct, kw_only=True):
    """The dispatcher as a whole (GET /v1/push/status, admin): every endpoint of every agent."""

    endpoints: list[PushEndpointOut]
    in_flight: int
    max_concurrency: int
    coalesce_ms: int


class PushPayload(msgspec.Struct, kw_only=True):
    """The structured content of a push: the node, the agent, new notifications' envelopes and how many more
    arrived than one message carries (`more`: poll the inbox for them)."""

    kind: Literal["bbs.notifications"] = "bbs.notifications"
    node_id: str
    agent_id: str
    notifications: list[Envelope]
    more: int = 0
