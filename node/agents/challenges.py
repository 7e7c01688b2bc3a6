"""Pending key-proof challenges: asking for one never goes through the single writer.

Anyone may ask for a challenge, so they are kept out of the single writer's path (a flood of asks must not
delay agents' writes) and bounded: at most `per_agent` open per agent and `total` overall, the oldest evicted
first, each expiring after its TTL.

One process (SQLite) holds them in its memory (`Challenges`): a restart forgets every pending challenge, and an
agent simply asks again (docs/security.md). A node served by several processes (PostgreSQL) holds them in its
database (`SharedChallenges`, docs/decisions.md record 86), so that a challenge asked at one process is answered at
another: written on the process's own connection (node/store/side.py), never the writer's, in an UNLOGGED table
(no WAL per ask; a server crash forgets them, as a restart did).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Awaitable
from typing import TypeVar

from node.agents import store
from node.errors import Unavailable
from node.store.conn import DatabaseError
from node.store.side import SideConnection, SideUnavailable

MAX_PENDING = 10_000
PER_AGENT = 16
T = TypeVar("T")


class Challenges:
    """One-time challenges by nonce, in the order they were issued (which is also the order they expire)."""

    def __init__(self, per_agent: int = PER_AGENT, total: int = MAX_PENDING) -> None:
        self.per_agent, self.total = per_agent, total
        self._pending: OrderedDict[str, tuple[str, int]] = OrderedDict()  # nonce -> (agent_id, expires_ms)
        self._by_agent: dict[str, deque[str]] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, nonce: str, agent_id: str, expires_ms: int, now_ms: int) -> None:
        """Hold a new challenge, forgetting expired ones and, beyond the bounds, the oldest."""
        while self._pending:
            oldest, (_agent, expiry) = next(iter(self._pending.items()))
            if expiry > now_ms:
                break
            self._drop(oldest)
        mine = self._by_agent.setdefault(agent_id, deque())
        while len(mine) >= self.per_agent:  # a full quota evicts the agent's oldest rather than locking it out
            self._drop(mine[0])
        while len(self._pending) >= self.total:
            self._drop(next(iter(self._pending)))
        self._pending[nonce] = (agent_id, expires_ms)
        self._by_agent.setdefault(agent_id, deque()).append(nonce)

    async def issue(self, nonce: str, agent_id: str, expires_ms: int, now_ms: int) -> None:
        """`add`, as SharedChallenges is called."""
        self.add(nonce, agent_id, expires_ms, now_ms)

    async def consume(self, nonce: str, agent_id: str) -> int | None:
        """`take`, as SharedChallenges is called."""
        return self.take(nonce, agent_id)

    async def pending(self) -> int:
        """How many challenges are held."""
        return len(self)

    def take(self, nonce: str, agent_id: str) -> int | None:
        """Consume the challenge `nonce` of `agent_id`: its expiry (ms), or None if no such challenge is held."""
        held = self._pending.get(nonce)
        if held is None or held[0] != agent_id:
            return None
        self._drop(nonce)
        return held[1]

    def _drop(self, nonce: str) -> None:
        agent_id, _expiry = self._pending.pop(nonce)
        mine = self._by_agent[agent_id]
        mine.remove(nonce)
        if not mine:
            del self._by_agent[agent_id]


SWEEP_EVERY_S = 10.0  # at most one sweep of expired challenges per process this often


class SharedChallenges:
    """Pending challenges of a node served by several processes, in its database (see the module docstring): the
    same bounds as `Challenges`, one-time use decided once (`DELETE ... RETURNING`) whichever process is answered."""

    def __init__(self, side: SideConnection, per_agent: int = PER_AGENT, total: int = MAX_PENDING) -> None:
        self.side, self.per_agent, self.total = side, per_agent, total
        self._swept_at = 0.0

    async def issue(self, nonce: str, agent_id: str, expires_ms: int, now_ms: int) -> None:
        """Hold a new challenge, evicting beyond the bounds the oldest (overall, then of the agent); expired ones are
        swept now and then."""
        await self._guarded(store.issue_challenge(self.side, self.total, nonce, agent_id, expires_ms))
        await self._guarded(store.trim_challenges(self.side, agent_id, self.per_agent))
        if time.monotonic() - self._swept_at >= SWEEP_EVERY_S:
            self._swept_at = time.monotonic()
            await self._guarded(store.sweep_challenges(self.side, now_ms))

    async def consume(self, nonce: str, agent_id: str) -> int | None:
        """Consume the challenge `nonce` of `agent_id`, at whichever process it was asked: its expiry (ms), or None if
        no such challenge is held (never asked, already answered, evicted, swept)."""
        return await self._guarded(store.take_challenge(self.side, nonce, agent_id))

    async def pending(self) -> int:
        """How many challenges the node holds."""
        return await self._guarded(store.count_challenges(self.side))

    async def _guarded(self, statement: Awaitable[T]) -> T:
        """`statement`'s answer, or 503 challenges_unavailable when the database cannot be reached."""
        try:
            return await statement
        except (SideUnavailable, DatabaseError) as exc:
            raise Unavailable(
                f"pending challenges cannot be reached now: {exc}", code="challenges_unavailable"
            ) from None
