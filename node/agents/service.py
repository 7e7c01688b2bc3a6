"""Agents registered on this node, and the bearer credentials (agent API keys, admin tokens).

Credentials are `bbs_<key id>_<secret>` with a 256-bit random secret. Only
SHA-256(secret) is stored: for secrets of that entropy a slow hash (bcrypt)
adds nothing but per-request cost; see docs/decisions.md.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from identity import canonical, key_history, keys, records
from identity.schema import AgentRecord
from node.agents import refs as agent_refs
from node.agents import store
from node.errors import Conflict, InvalidInput, NotFound
from node.store import projections, submission
from node.store.authority import Authority, authorize_txn, key_events_of
from node.store.conn import Conn
from node.store.db import Database
from node.trust import service as trust
from wire.api import AgentListItem, AgentListQuery, AgentOut, AgentPage, CreatedAgent, KeyEventItem, KeyHistory

log = logging.getLogger("bbs.node")

AGENT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")  # a local name; api_types.CreateAgent carries the same pattern
CREDENTIALS_CHECK_MS = 1_000  # how often a node looks whether another process changed a credential


def check_name(name: str) -> None:
    """Refuse a local agent name that does not match AGENT_NAME."""
    if not AGENT_NAME.fullmatch(name):
        raise InvalidInput(f"agent names match {AGENT_NAME.pattern}", field="$.name")


@dataclass(frozen=True)
class Principal:
    """Who is calling: an agent (with its did) or the node's admin."""

    role: str  # 'agent' | 'admin'
    agent_id: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def new_credential(conn: Conn, role: str, agent_id: str | None, now_ms: int) -> str:
    """Create a credential and return the token (shown once; only its hash is kept)."""
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    store.insert_credential_txn(conn, key_id, role, agent_id, _digest(secret), now_ms)
    return f"bbs_{key_id}_{secret}"


def rotate_api_key_txn(conn: Conn, ref: str, now_ms: int) -> tuple[str, str, str]:
    """Replace every API key of a local agent (by name or did) with one new key: (name, agent_id, api_key).

    The old keys stop working when this commits (a running node notices within CREDENTIALS_CHECK_MS).
    """
    did = agent_refs.resolve(conn, ref, "agent_id")
    row = store.local_agent(conn, did)
    if row is None:
        raise NotFound(f"no agent {ref!r} on this node", code="agent_not_found", field="agent_id")
    store.delete_agent_credentials_txn(conn, row["agent_id"])
    return row["name"], row["agent_id"], new_credential(conn, "agent", row["agent_id"], now_ms)


def authenticate(conn: Conn, token: str) -> Principal | None:
    """The principal a bearer token belongs to, or None."""
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != "bbs" or len(parts[1]) != 16 or not parts[2]:
        return None
    row = store.credential(conn, parts[1])
    if row is None or not hmac.compare_digest(row["secret_sha256"], _digest(parts[2])):
        return None
    return Principal(row["role"], row["agent_id"])


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class TokenCache:
    """Bearer tokens already verified against the database: SHA-256 of the token -> (principal, expiry ms).

    Saves a database round trip per authenticated request. Only successful look-ups are kept, so a credential
    created a moment ago is found at once. Each entry expires at `ttl_ms` after it was verified or at the
    session's own expiry, whichever comes first. Code that deletes a credential or a session calls `clear`
    (`Agents.rotate_api_key` does), and `observe` clears the cache when the database's `credential_epoch` has
    moved (another process revoked a key); see docs/decisions.md.
    """

    def __init__(self, ttl_ms: int = 60_000, max_entries: int = 4096) -> None:
        self.ttl_ms = ttl_ms
        self.max_entries = max_entries
        self.epoch: int | None = None  # the database's credential_epoch at the last look
        self.generation = 0  # moves at every clear: a look-up that began before one is not kept
        self.key_changes = 0  # the writer's `Authority.changes` at the last look (this process's key events)
        self._entries: dict[bytes, tuple[Principal, int]] = {}

    def observe_keys(self, changes: int) -> None:
        """Note the writer's count of key-event changes (`Authority.changes`); forget every token if it moved: a
        session may have been proved by a key a key event just took authority from."""
        if changes != self.key_changes:
            self.clear()
            self.key_changes = changes

    def observe(self, epoch: int) -> None:
        """Note the database's credential epoch; forget every token if it moved since the last look."""
        if self.epoch is not None and epoch != self.epoch:
            self.clear()
        self.epoch = epoch

    @staticmethod
    def _key(token: str) -> bytes:
        return hashlib.sha256(token.encode("utf-8")).digest()

    def get(self, token: str, now_ms: int) -> Principal | None:
        """The cached principal for `token`, or None if unknown or expired."""
        key = self._key(token)
        hit = self._entries.get(key)
        if hit is None:
            return None
        if hit[1] <= now_ms:
            del self._entries[key]
            return None
        return hit[0]

    def put(
        self, token: str, principal: Principal, now_ms: int, expires_ms: int | None = None, generation: int = 0
    ) -> None:
        """Remember a verified token until `now_ms + ttl_ms` (or `expires_ms` when that is sooner).

        `generation` is the cache's `generation` when the look-up began: if the cache was cleared since, the
        look-up may have read a credential that is revoked now, and it is not kept."""
        if generation != self.generation:
            return
        until = now_ms + self.ttl_ms if expires_ms is None else min(expires_ms, now_ms + self.ttl_ms)
        if len(self._entries) >= self.max_entries:
            self._entries = {k: v for k, v in self._entries.items() if v[1] > now_ms}
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
        self._entries[self._key(token)] = (principal, until)

    def clear(self) -> None:
        """Forget every cached token (after a credential or session is revoked), and the look-ups under way."""
        self._entries.clear()
        self.generation += 1


def identity_record(
    key: keys.SigningKey, display_name: str, description: str, home_node: str, agent_type: str | None = None
) -> dict[str, object]:
    """A signed agent identity document; `agent_type` is written only when given (docs/decisions.md)."""
    body = {
        "kind": "agent",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": key.did,
        "created_at": canonical.now_created_at(),
        "display_name": canonical.normalize_value(display_name),
        "description": canonical.normalize_value(description),
        "home_node": home_node,
    }
    if agent_type is not None:
        body["agent_type"] = agent_type
    return records.sign(body, key)


def register(
    conn: Conn,
    *,
    name: str,
    key: keys.SigningKey,
    keep_key: bool,
    record: dict[str, object],
    now_ms: int,
    agent_id: str | None = None,
    authority: Authority | None = None,
) -> str:
    """Register an agent on this node (its identity record, its local name, an API key); return the API key.

    `key` is the key that signs for it now; `agent_id` its did when that is not the did of `key` (a rotated
    identity). With the writer's `authority` (every path but a test's), the document's signing key must be one that
    may sign for the agent (`node.store.authority.authorize_txn`, docs/format-v3.md 3.5): a document by a rotated-out
    key the rotation does not vouch for is 422 `not_current_key`, by a key no held event installs
    `unknown_signing_key`."""
    did = agent_id or key.did
    check_name(name)
    if store.name_taken(conn, name):
        raise Conflict(f"an agent named {name!r} already exists on this node", code="agent_exists", field="$.name")
    if store.did_registered(conn, did):
        raise Conflict("this identity is already registered on this node", code="agent_exists")
    try:
        record_hash, decoded = records.check(dict(record), v3="signing_key" in record)
    except records.RecordError as exc:  # e.g. a display name or description over its limit
        raise InvalidInput(str(exc), field=exc.field, code=f"record_{exc.reason}") from None
    submission.check_record(dict(record))  # created here or imported (`bbs agent import`): a submission
    assert isinstance(decoded, AgentRecord)
    if authority is not None:
        authorize_txn(conn, authority, [(dict(record), record_hash, "$.record")])
    projections.append(conn, dict(record), record_hash, decoded, origin="local", now_ms=now_ms)
    store.insert_local_agent_txn(conn, name, did, key.seed if keep_key else None, now_ms)
    return new_credential(conn, "agent", did, now_ms)


def signing_key(conn: Conn, agent_id: str) -> keys.SigningKey | None:
    """The agent's private key if this node keeps it."""
    seed = store.key_seed(conn, agent_id)
    return None if seed is None else keys.SigningKey.from_seed(seed)


def key_history_of(author: str, events: list[tuple[str, dict[str, Any]]]) -> KeyHistory:
    """The key history shown for `author` over the key events held (`identity.key_history.resolve`)."""
    history = key_history.resolve(author, events)
    roles: dict[str, str | None] = {}
    state = key_history.initial_state(author)
    for address in history.chain:  # each chain event is judged in the state its prior left
        roles[address] = key_history.role_of(state, history.events[address])
        state = key_history.apply(state, history.events[address])
    items = [
        KeyEventItem(
            address=address,
            seq=int(event["seq"]),
            event=str(event["event"]),
            signer=key_history.signer_of(event),
            created_at=str(event["created_at"]),
            in_chain=address in roles,
            key=event.get("key"),
            role=roles.get(address),
        )
        for address, event in sorted(events, key=lambda item: (int(item[1]["seq"]), item[0]))
    ]
    state = history.state
    return KeyHistory(current_key=state.key, events=items, next=state.next, recovery=state.recovery)


def read_key_history(conn: Conn, author: str) -> KeyHistory:
    """`key_history_of` the key events of `author` in the log (a read)."""
    return key_history_of(author, key_events_of(conn, author))


def agent_out(conn: Conn, agent_id: str) -> AgentOut:
    """An agent's public identity with its entry count and trust; 404 `agent_not_found` if unknown here."""
    row = store.agent(conn, agent_id)
    if row is None:
        raise NotFound(f"no agent {agent_id}", code="agent_not_found")
    return AgentOut(
        agent_id=row["id"],
        display_name=row["display_name"],
        description=row["description"],
        agent_type=row["agent_type"],
        home_node=row["home_node"],
        created_at=row["created_at"],
        entry_count=row["n"],
        trust=trust.agent_trust(conn, agent_id),
        key_history=read_key_history(conn, agent_id),
    )


def list_agents(conn: Conn, query: AgentListQuery) -> AgentPage:
    """A page of the agents this node knows (registered here or arrived by sync) in did order, after `query.after`;
    with `query.local`, only those registered here."""
    rows = store.agent_page(conn, query.after, query.local, query.limit + 1)
    agents = [
        AgentListItem(
            agent_id=r["id"],
            name=r["name"],
            display_name=r["display_name"],
            description=r["description"],
            agent_type=r["agent_type"],
            home_node=r["home_node"],
            created_at=r["created_at"],
            entry_count=r["n"],
            key_kept=bool(r["key_kept"]),
        )
        for r in rows[: query.limit]
    ]
    return AgentPage(agents, agents[-1].agent_id if len(rows) > query.limit else None)


class Agents:
    """The agents of one node: creating them, their API keys, and who a bearer credential belongs to."""

    def __init__(self, db: Database, node_id: str, now_ms: Callable[[], int]) -> None:
        self.db = db
        self.node_id = node_id
        self.now_ms = now_ms
        self.tokens = TokenCache()
        self._credentials_checked_ms = -CREDENTIALS_CHECK_MS  # the first request looks

    async def authenticate(self, token: str) -> Principal | None:
        """The principal of an API key or admin token (verified ones are cached: `TokenCache`)."""
        now = self.now_ms()
        await self.observe_credentials(now)
        principal = self.tokens.get(token, now)
        if principal is None:
            generation = self.tokens.generation
            principal = await self.db.read(lambda c: authenticate(c, token))
            if principal is not None:
                self.tokens.put(token, principal, now, generation=generation)
        return principal

    async def observe_credentials(self, now: int) -> None:
        """Once a second, look whether a credential changed or a key event was stored (by any process: the
        database's `credential_epoch`), and forget the cached tokens if so."""
        if now >= self._credentials_checked_ms + CREDENTIALS_CHECK_MS:
            self._credentials_checked_ms = now  # before the await: one look per interval, not one per request
            self.tokens.observe(await self.db.read(store.credential_epoch, quick=True))

    async def create(
        self, name: str, display_name: str | None, description: str = "", agent_type: str | None = None
    ) -> CreatedAgent:
        """Create an agent whose key this node keeps; the API key is returned once (REST and CLI share this)."""
        check_name(name)
        key = keys.SigningKey.generate()
        record = identity_record(key, display_name or name, description, self.node_id, agent_type)
        api_key = await self.db.write(
            lambda c: register(c, name=name, key=key, keep_key=True, record=record, now_ms=self.now_ms())
        )
        return CreatedAgent(name=name, agent_id=key.did, api_key=api_key)

    async def rotate_api_key(self, ref: str) -> CreatedAgent:
        """Give a local agent (by name or did) a new API key; every key it had stops working at once here."""
        name, agent_id, api_key = await self.db.write(lambda c: rotate_api_key_txn(c, ref, self.now_ms()))
        self.tokens.clear()
        log.info("api key rotated for agent %s (%s); its previous keys are revoked", name, agent_id)
        return CreatedAgent(name=name, agent_id=agent_id, api_key=api_key)

    async def page(self, query: AgentListQuery) -> AgentPage:
        """A page of the agents this node knows, in did order (REST `GET /v1/agents` and `bbs agent list`)."""
        return await self.db.read(lambda c: list_agents(c, query))

    async def get(self, ref: str) -> AgentOut:
        """An agent's public identity (any agent this node knows, local or arrived by sync), by did or local name."""

        def run(conn: Conn) -> AgentOut:  # any did-shaped ref is looked up: unknown is a 404
            return agent_out(conn, ref if agent_refs.is_did(ref) else agent_refs.resolve(conn, ref, "agent_id"))

        return await self.db.read(run, quick=True)
