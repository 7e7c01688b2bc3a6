"""Pending key-proof challenges, held in memory: asking for one costs no database write.

Anyone may ask for a challenge, so they are kept out of the single writer's path (a flood of asks must not
delay agents' writes) and bounded: at most `per_agent` open per agent and `total` overall, the oldest evicted
first, each expiring after its TTL. A restart forgets every pending challenge; an agent simply asks again
(docs/security.md).
"""

from __future__ import annotations

from collections import OrderedDict, deque

MAX_PENDING = 10_000
PER_AGENT = 16


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
