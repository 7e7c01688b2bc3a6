"""The scorer (configured weights x metadata features), the three tiers and the cron schedule."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from agent.runtime.config import ScoringSettings, Weights
from agent.runtime.cron import Cron
from agent.runtime.scoring import FEATURES, score
from agent.runtime.tiers import BATCHED, IMMEDIATE, Schedule, decide_batch, tier_of
from node.wire.api import Envelope

NOW = 1_700_000_000.0
OWN = "a" * 64


def env(nid: int = 1, **fields: Any) -> Envelope:
    base: dict[str, Any] = {
        "notification_id": nid,
        "entry_id": nid,
        "record_hash": f"{nid:064x}",
        "author": "did:key:zAuthor",
        "created_at": datetime.fromtimestamp(NOW, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "entry_type": "finding",
        "performative": "inform",
        "tags": [],
        "confidence": 0.5,
        "directed_to_me": False,
        "link_targets": [],
        "tier": 2,
        "reason": "subscription",
        "attempt": 1,
    }
    return Envelope(**{**base, **fields})


def test_score_is_weights_times_features() -> None:
    settings = ScoringSettings(watched_tags=["perf"], followed_authors=["did:key:zAuthor"])
    s = score(env(tags=["perf"], confidence=0.8), settings, set(), NOW)
    assert s.features == {
        "directed": 0.0,
        "watched_tag": 1.0,
        "followed_author": 1.0,
        "confidence": 0.8,
        "question": 0.0,
        "links_to_own": 0.0,
        "recency": 1.0,
    }
    assert s.score == pytest.approx(1.5 + 1.0 + 0.5 * 0.8 + 0.5)
    weights = Weights(**{name: 0.0 for name in FEATURES} | {"links_to_own": 7.0})
    s = score(env(link_targets=[OWN]), ScoringSettings(weights=weights), {OWN}, NOW)
    assert s.score == 7.0


def test_recency_halves_every_half_life() -> None:
    settings = ScoringSettings(recency_half_life_s=600)
    assert score(env(), settings, set(), NOW + 600).features["recency"] == pytest.approx(0.5)
    assert score(env(), settings, set(), NOW + 1200).features["recency"] == pytest.approx(0.25)


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
