"""The three tiers that decide when the language model is woken.

1. Immediate: requests directed to this agent and contradictions of its own entries engage at once.
2. Batched: other notifications are scored; the pending batch engages when its summed score reaches the
   activation threshold, and then only the `max_batch` best are shown to the model.
3. Scheduled: synthesis review and hygiene run when their cron expressions come due.
"""

from __future__ import annotations

from collections.abc import Callable, Set
from dataclasses import dataclass

from agent.runtime.cron import Cron
from wire.api import Envelope

IMMEDIATE, BATCHED = 1, 2


def tier_of(env: Envelope, own: Set[str]) -> int:
    """Tier 1 for a directed request or a contradiction of one of our entries, else tier 2.

    The node marks both as tier 1 already; the local check also catches contradictions of our entries that
    the node could not attribute (an entry of ours that reached it through a peer before our key did).
    """
    if env.tier == 1 or (env.directed_to_me and env.performative == "request"):
        return IMMEDIATE
    contradicts_own = bool(own & set(env.link_targets)) and (
        env.entry_type == "contradiction" or env.performative == "disconfirm"
    )
    return IMMEDIATE if contradicts_own else BATCHED


@dataclass(frozen=True)
class BatchDecision:
    engage: bool
    total: float
    chosen: list[Envelope]


def decide_batch(scored: list[tuple[Envelope, float]], threshold: float, max_batch: int) -> BatchDecision:
    """Engage when the summed score of the pending batch reaches the threshold; choose the best `max_batch`."""
    total = round(sum(s for _, s in scored), 6)
    if total < threshold:
        return BatchDecision(False, total, [])
    best = sorted(scored, key=lambda pair: (-pair[1], pair[0].notification_id))[:max_batch]
    return BatchDecision(True, total, [env for env, _ in best])


class Schedule:
    """Cron jobs and when each is next due (epoch seconds from an injectable clock)."""

    def __init__(self, crons: dict[str, Cron], clock: Callable[[], float]) -> None:
        self.crons = crons
        self.clock = clock
        now = clock()
        self.next_due = {name: cron.next_after(now) for name, cron in crons.items()}

    def due(self) -> list[str]:
        """Jobs due now; each is rescheduled to its next match (missed runs collapse into one)."""
        now = self.clock()
        jobs = [name for name, at in sorted(self.next_due.items()) if at <= now]
        for name in jobs:
            self.next_due[name] = self.crons[name].next_after(now)
        return jobs
