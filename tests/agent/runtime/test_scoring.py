"""agent.runtime.scoring: a notification's score is the configured weights times its metadata features."""

from __future__ import annotations

from typing import Any

import pytest

from agent.runtime.config import ScoringSettings, Weights
from agent.runtime.scoring import FEATURES, features, score
from tests.agent.runtime.envelopes import NOW, OWN, env


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


def test_the_features_name_every_weight() -> None:
    assert set(FEATURES) == set(Weights.__struct_fields__)
    assert list(features(env(), ScoringSettings(), set(), NOW)) == list(FEATURES)


def test_watched_tags_count_by_the_square_root_of_their_share() -> None:
    settings = ScoringSettings(watched_tags=["a", "b", "c", "d"])
    assert features(env(tags=["a"]), settings, set(), NOW)["watched_tag"] == pytest.approx(0.5)
    assert features(env(tags=["a", "b", "c", "d", "e"]), settings, set(), NOW)["watched_tag"] == 1.0
    assert features(env(tags=[]), settings, set(), NOW)["watched_tag"] == 0.0
    assert features(env(tags=["a"]), ScoringSettings(), set(), NOW)["watched_tag"] == 0.0  # nothing watched


@pytest.mark.parametrize(
    ("fields", "question"),
    [({"performative": "query"}, 1.0), ({"performative": "request"}, 1.0), ({"entry_type": "question"}, 1.0),
     ({"performative": "inform"}, 0.0)],
)  # fmt: skip
def test_questions_and_requests(fields: dict[str, Any], question: float) -> None:
    assert features(env(1, **fields), ScoringSettings(), set(), NOW)["question"] == question


def test_odd_times_and_confidences() -> None:
    settings = ScoringSettings(recency_half_life_s=600)
    assert features(env(), settings, set(), NOW - 3600)["recency"] == 1.0  # from the future: not older than now
    unreadable = features(env(created_at="yesterday"), settings, set(), NOW)["recency"]
    assert unreadable == pytest.approx(0.5**10)  # treated as ten half-lives old
    assert features(env(confidence=1.5), settings, set(), NOW)["confidence"] == 1.0
    assert features(env(directed_to_me=True), settings, set(), NOW)["directed"] == 1.0
