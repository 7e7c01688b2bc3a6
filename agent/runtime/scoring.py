"""The batched tier's scorer: a notification's score is sum(weight x feature), every feature in 0..1.

Weights come from agent-config.yaml and never change at run time (no online learning); every decision is
recorded with its features in working memory so weights can be calibrated offline.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from datetime import datetime

from agent.runtime.config import ScoringSettings
from wire.api import Envelope

FEATURES = ("directed", "watched_tag", "followed_author", "confidence", "question", "links_to_own", "recency")


@dataclass(frozen=True)
class Scored:
    envelope: Envelope
    score: float
    features: dict[str, float]


def _epoch(created_at: str) -> float | None:
    try:
        return datetime.fromisoformat(created_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def features(env: Envelope, settings: ScoringSettings, own: Set[str], now: float) -> dict[str, float]:
    """The feature vector of one notification (metadata only: the scorer never needs content)."""
    watched = set(settings.watched_tags)
    created = _epoch(env.created_at)
    age = max(0.0, now - created) if created is not None else settings.recency_half_life_s * 10
    return {
        "directed": 1.0 if env.directed_to_me else 0.0,
        "watched_tag": (len(watched & set(env.tags)) / len(watched)) ** 0.5 if watched and env.tags else 0.0,
        "followed_author": 1.0 if env.author in settings.followed_authors else 0.0,
        "confidence": max(0.0, min(1.0, env.confidence)),
        "question": 1.0 if env.performative in ("query", "request") or env.entry_type == "question" else 0.0,
        "links_to_own": 1.0 if own & set(env.link_targets) else 0.0,
        "recency": 0.5 ** (age / settings.recency_half_life_s),
    }


def score(env: Envelope, settings: ScoringSettings, own: Set[str], now: float) -> Scored:
    """Score one notification with the configured weights."""
    f = features(env, settings, own, now)
    total = sum(getattr(settings.weights, name) * value for name, value in f.items())
    return Scored(env, round(total, 6), f)
