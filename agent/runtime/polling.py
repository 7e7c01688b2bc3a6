"""The adaptive poll interval: a small state machine with an injectable clock and random source.

- active: an interval drawn from [active_min_s, active_max_s] (5-10 s by default) while there is activity;
- idle: [idle_min_s, idle_max_s] (30-60 s) once `idle_after_s` have passed without a notification;
- backoff: after consecutive errors, backoff_base_s x 2^(errors-1), capped at backoff_max_s;
active and idle intervals are drawn uniformly from their ranges and a backoff gets +/- `jitter` (a
fraction), so many agents do not poll in step.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Literal

from agent.runtime.config import PollingSettings

Mode = Literal["active", "idle", "backoff"]


class PollSchedule:
    """Decides how long to wait before the next inbox poll."""

    def __init__(
        self,
        settings: PollingSettings,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._rng = rng or random.Random()
        self.last_activity = clock()
        self.errors = 0

    @property
    def mode(self) -> Mode:
        if self.errors:
            return "backoff"
        quiet = self._clock() - self.last_activity
        return "active" if quiet < self.settings.idle_after_s else "idle"

    def polled(self, notifications: int) -> None:
        """A poll succeeded and returned `notifications` new notifications."""
        self.errors = 0
        if notifications:
            self.last_activity = self._clock()

    def active(self) -> None:
        """Something happened besides notifications (the agent acted): stay in the active profile."""
        self.last_activity = self._clock()

    def failed(self) -> None:
        """A poll failed (node unreachable, 5xx after retries)."""
        self.errors += 1

    def next_interval(self) -> float:
        """Seconds to wait before the next poll."""
        s = self.settings
        mode = self.mode
        if mode == "backoff":
            base = min(s.backoff_max_s, s.backoff_base_s * 2 ** (self.errors - 1))
        elif mode == "active":
            base = self._rng.uniform(s.active_min_s, s.active_max_s)
        else:
            base = self._rng.uniform(s.idle_min_s, s.idle_max_s)
        if mode != "backoff":
            return base  # the uniform draw is the jitter of the active and idle profiles
        return base * (1 + self._rng.uniform(-s.jitter, s.jitter))
