"""Key-proof authentication: an agent proves it holds its did:key's private key and gets a session token.

Any node that holds an agent's signed identity document (imported with `bbs agent import`, or arrived by
sync) accepts the agent this way, so an agent is not tied to the API key its home node issued:

1. ``POST /v1/auth/challenge {"agent_id"}`` returns a random one-time ``challenge`` valid 60 seconds (held in
   memory, node/agents/challenges.py: asking costs no writer commit, and a restart forgets pending challenges; on
   PostgreSQL held node-wide, outside the writer, so another process of the node answers it: record 86).
2. The agent signs the canonical JSON of ``{"purpose": "agent-bbs-session", "node_id", "agent_id",
   "challenge"}`` with its key. Naming this node's id stops a signature made for one node being replayed
   at another.
3. ``POST /v1/auth/session {"agent_id", "challenge", "signature", "signing_key"?}`` consumes the challenge
   (whether or not the signature verifies: a challenge is tried once) and returns a bearer token valid one hour.
   The signature must be by the agent's current key in the key history this node holds (its first key,
   `agent_id`, until a rotation, then the key named in `signing_key`) or by its recovery key (so the owner can
   revoke or recover after a thief replaced the current key); 401 `not_current_key` otherwise.

Tokens are ``bbss_<key id>_<secret>``; only SHA-256 of the secret is stored, as for API keys.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from identity import canonical, keys
from node.agents import challenges, store
from node.agents.service import Principal, read_key_history
from node.errors import NotFound, Unauthorized
from node.store.conn import Conn
from wire.api import ChallengeOut, KeyHistory, SessionIn, SessionOut
from wire.time import format_ms

if TYPE_CHECKING:
    from node.service import Node

PURPOSE = "agent-bbs-session"
CHALLENGE_TTL_MS = 60_000
SESSION_TTL_MS = 3_600_000
MAX_OPEN_CHALLENGES = challenges.PER_AGENT
TOKEN_PREFIX = "bbss"


def challenge_message(node_id: str, agent_id: str, challenge: str) -> bytes:
    """The bytes an agent signs to prove its key to node `node_id`."""
    return canonical.canonical_bytes(
        {"purpose": PURPOSE, "node_id": node_id, "agent_id": agent_id, "challenge": challenge}
    )


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


async def issue_challenge(node: Node, agent_id: str) -> ChallengeOut:
    """A one-time challenge for an agent whose identity document this node holds."""
    now = node.now_ms()
    nonce = keys.b64u(secrets.token_bytes(32))

    if not await node.db.read(lambda c: store.agent_known(c, agent_id)):
        raise NotFound(
            "this node does not know that agent: import its identity here (bbs agent import) or wait for sync",
            field="$.agent_id",
            code="agent_not_found",
        )
    await node.challenges.issue(nonce, agent_id, now + CHALLENGE_TTL_MS, now)
    return ChallengeOut(
        challenge=nonce,
        agent_id=agent_id,
        node_id=node.node_id,
        purpose=PURPOSE,
        expires_at=format_ms(now + CHALLENGE_TTL_MS),
    )


async def open_session(node: Node, body: SessionIn) -> SessionOut:
    """Consume a challenge; if the agent's signature over it verifies, issue a session token."""
    now = node.now_ms()
    key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    message = challenge_message(node.node_id, body.agent_id, body.challenge)

    # the challenge is consumed whether or not the proof verifies: it is tried once
    expires_ms = await node.challenges.consume(body.challenge, body.agent_id)
    if expires_ms is None:
        raise Unauthorized("unknown or already used challenge: ask for a new one", field="$.challenge",
                           code="challenge_invalid")  # fmt: skip
    if expires_ms <= now:
        raise Unauthorized("the challenge expired: ask for a new one", field="$.challenge", code="challenge_expired")
    signer = body.signing_key or body.agent_id
    if not keys.verify(signer, message, body.signature):
        raise Unauthorized(
            "the signature does not verify against signing_key (else agent_id) for this challenge and node",
            field="$.signature",
            code="bad_signature",
        )
    history = await node.db.read(lambda c: read_key_history(c, body.agent_id))
    if signer not in (history.current_key, history.recovery):  # a rotated-out or revoked key proves nothing (3.7)
        raise Unauthorized(
            f"{signer} is neither the agent's current signing key ({history.current_key}) nor its recovery key:"
            " sign the challenge with one of them and name it in signing_key",
            field="$.signing_key",
            code="not_current_key",
        )

    await node.db.write(
        lambda c: store.open_session_txn(c, key_id, body.agent_id, signer, _digest(secret), now + SESSION_TTL_MS, now)
    )
    return SessionOut(
        token=f"{TOKEN_PREFIX}_{key_id}_{secret}",
        agent_id=body.agent_id,
        expires_at=format_ms(now + SESSION_TTL_MS),
        expires_in=SESSION_TTL_MS // 1000,
    )


async def session_principal(node: Node, token: str) -> Principal | None:
    """The agent a live session token belongs to, or None."""
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or len(parts[1]) != 16 or not parts[2]:
        return None
    now = node.now_ms()
    # a key event stored since (here: the writer's cache moved; by any process: the epoch, migration 0025) may have
    # taken authority from the key that proved a cached session
    node.agents.tokens.observe_keys(node.sealing.authority.changes)
    await node.agents.observe_credentials(now)
    cached = node.agents.tokens.get(token, now)
    if cached is not None:
        return cached
    generation = node.agents.tokens.generation

    def look(conn: Conn) -> tuple[Any, KeyHistory | None]:
        row = store.session(conn, parts[1])
        return row, None if row is None else read_key_history(conn, str(row[0]))

    row, history = await node.db.read(look)
    if row is None or row[2] <= now or not hmac.compare_digest(row[1], _digest(parts[2])):
        return None
    assert history is not None
    if row[3] not in (history.current_key, history.recovery):  # its key was revoked or rotated out since (3.7)
        return None
    principal = Principal("agent", row[0])
    # cached, but never beyond the session's end
    node.agents.tokens.put(token, principal, now, expires_ms=row[2], generation=generation)
    return principal


def authenticator(node: Node) -> Callable[[str], Awaitable[Principal | None]]:
    """Bearer authentication accepting API keys and admin tokens (node.agents.service.authenticate) and session
    tokens."""

    async def authenticate(token: str) -> Principal | None:
        if not (token.isascii() and token.isprintable()):  # every credential the node issues is printable ASCII
            return None
        if token.startswith(TOKEN_PREFIX + "_"):
            return await session_principal(node, token)
        return await node.agents.authenticate(token)

    return authenticate


def agent_authenticator(node: Node) -> Callable[[str], Awaitable[str | None]]:
    """Bearer authentication of agents only (remote MCP): the did of the token's agent; None for an admin token."""
    authenticate = authenticator(node)

    async def agent_of(token: str) -> str | None:
        principal = await authenticate(token)
        return principal.agent_id if principal is not None and principal.role == "agent" else None

    return agent_of
