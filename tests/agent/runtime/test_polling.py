"""The poll-interval state machine, driven by a controllable clock and a seeded random source."""

from __future__ import annotations

import random

from agent.runtime.config import PollingSettings
from agent.runtime.polling import PollSchedule


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def intervals(p: PollSchedule, n: int = 200) -> list[float]:
    return [p.next_interval() for _ in range(n)]


def mode(p: PollSchedule) -> str:
    """The schedule's mode, read afresh (mypy would keep `p.mode` narrowed across the calls that change it)."""
    return p.mode


def test_active_then_idle_then_active_again() -> None:
    clock = Clock()
    p = PollSchedule(PollingSettings(), clock, random.Random(7))
    assert mode(p) == "active"
    active = intervals(p)
    assert all(5 <= i <= 10 for i in active) and len(set(active)) > 100  # jittered within the active range
    clock.now += 119
    p.polled(0)
    assert mode(p) == "active"  # quiet, but not for idle_after_s yet
    clock.now += 1
    p.polled(0)
    assert mode(p) == "idle"
    idle = intervals(p)
    assert all(30 <= i <= 60 for i in idle) and min(idle) < 35 and max(idle) > 55
    p.polled(3)  # notifications arrived
    assert mode(p) == "active"
    clock.now += 500
    p.active()  # the agent acted: still busy
    assert mode(p) == "active"


def test_backoff_doubles_to_the_cap_with_jitter_and_success_resets() -> None:
    clock = Clock()
    settings = PollingSettings(backoff_base_s=5, backoff_max_s=60, jitter=0.1)
    p = PollSchedule(settings, clock, random.Random(1))
    bases = []
    for _ in range(6):
        p.failed()
        assert mode(p) == "backoff"
        bases.append(p.next_interval())
    for got, base in zip(bases, [5, 10, 20, 40, 60, 60], strict=True):
        assert base * 0.9 <= got <= base * 1.1
    p.polled(0)
    assert mode(p) == "active" and 5 <= p.next_interval() <= 10


def test_same_seed_same_intervals() -> None:
    a = PollSchedule(PollingSettings(), Clock(), random.Random(42))
    b = PollSchedule(PollingSettings(), Clock(), random.Random(42))
    assert intervals(a, 20) == intervals(b, 20)
