"""node.agents.challenges: pending key-proof challenges in memory, bounded per agent and overall, expiring, one-time."""

from __future__ import annotations

from node.agents.challenges import MAX_PENDING, PER_AGENT, Challenges


def test_a_challenge_is_taken_once_by_its_own_agent() -> None:
    held = Challenges()
    held.add("n1", "alice", expires_ms=1_060, now_ms=1_000)
    assert held.take("n1", "bob") is None and len(held) == 1  # another agent's ask does not consume it
    assert held.take("n1", "alice") == 1_060
    assert held.take("n1", "alice") is None and len(held) == 0


def test_a_full_quota_evicts_the_agents_oldest_only() -> None:
    held = Challenges(per_agent=3)
    held.add("b0", "bob", 2_000, 1_000)
    for i in range(5):
        held.add(f"a{i}", "alice", 2_000 + i, 1_000 + i)
    assert len(held) == 4
    assert [held.take(f"a{i}", "alice") is not None for i in range(5)] == [False, False, True, True, True]
    assert held.take("b0", "bob") == 2_000


def test_the_total_is_bounded_oldest_first() -> None:
    held = Challenges(per_agent=100, total=10)
    for i in range(25):
        held.add(f"n{i}", f"agent{i % 5}", 10_000, 1_000)
    assert len(held) == 10
    assert held.take("n14", "agent4") is None and held.take("n15", "agent0") == 10_000


def test_expired_challenges_are_forgotten_as_new_ones_come() -> None:
    held = Challenges()
    held.add("old", "alice", expires_ms=1_060, now_ms=1_000)
    held.add("new", "bob", expires_ms=1_070, now_ms=1_060)  # at its expiry the old one goes
    assert len(held) == 1 and held.take("old", "alice") is None


def test_the_default_bounds() -> None:
    assert (Challenges().per_agent, Challenges().total) == (PER_AGENT, MAX_PENDING) == (16, 10_000)
