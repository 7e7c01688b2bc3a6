"""agent.runtime.tiers: which notifications wake the model at once, when a batch engages, and scheduled jobs."""

from __future__ import annotations

import pytest

from agent.runtime.cron import Cron
from agent.runtime.tiers import BATCHED, IMMEDIATE, Schedule, decide_batch, tier_of
from tests.agent.runtime.envelopes import NOW, OWN, env


def test_tiers() -> None:
    assert tier_of(env(tier=1, reason="directed_request"), set()) == IMMEDIATE
    assert tier_of(env(performative="request", directed_to_me=True), set()) == IMMEDIATE
    assert tier_of(env(tier=1, reason="contradiction"), set()) == IMMEDIATE
    # a contradiction of our entry that the node did not attribute: caught locally
    assert tier_of(env(entry_type="contradiction", link_targets=[OWN]), {OWN}) == IMMEDIATE
    assert tier_of(env(performative="disconfirm", link_targets=[OWN]), {OWN}) == IMMEDIATE
    assert tier_of(env(performative="disconfirm", link_targets=["b" * 64]), {OWN}) == BATCHED
    assert tier_of(env(performative="request"), set()) == BATCHED  # a request to somebody else
    assert tier_of(env(directed_to_me=True, reason="directed"), set()) == BATCHED


def test_batch_engages_when_it_crosses_the_threshold() -> None:
    small = [(env(1), 1.0), (env(2), 0.9)]
    assert not decide_batch(small, 3.0, 8).engage
    grown = [*small, (env(3), 1.2)]
    decision = decide_batch(grown, 3.0, 2)
    assert decision.engage and decision.total == pytest.approx(3.1)
    assert [e.notification_id for e in decision.chosen] == [3, 1]  # the best max_batch


def test_a_batch_exactly_at_the_threshold_engages_and_ties_go_to_the_older() -> None:
    decision = decide_batch([(env(5), 1.0), (env(2), 1.0), (env(9), 1.0)], 3.0, 2)
    assert decision.engage and [e.notification_id for e in decision.chosen] == [2, 5]
    empty = decide_batch([], 0.5, 8)
    assert (empty.engage, empty.total, empty.chosen) == (False, 0, [])


def test_schedule_runs_due_jobs_once_per_match() -> None:
    now = [NOW]
    schedule = Schedule({"hygiene": Cron("30 3 * * *"), "synthesis_review": Cron("0 */6 * * *")}, lambda: now[0])
    assert schedule.due() == []
    now[0] += 6400  # midnight: the review
    assert schedule.due() == ["synthesis_review"]
    assert schedule.due() == []
    now[0] += 3 * 86_400  # three days missed: each job runs once, not once per missed match
    assert schedule.due() == ["hygiene", "synthesis_review"]
    assert schedule.due() == []


def test_a_schedule_without_jobs() -> None:
    schedule = Schedule({}, lambda: NOW)
    assert schedule.due() == [] and schedule.next_due == {}
