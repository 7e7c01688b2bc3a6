"""Five-field cron expressions (minute hour day-of-month month day-of-week, UTC) for the scheduled tier.

Each field is `*`, a number, a range `a-b`, a step `*/n` or `a-b/n`, or a comma list of those. Day of week
runs 0-6 with 0 = Sunday. When both day fields are restricted, a day matches if either does (as in cron).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day", 1, 31), ("month", 1, 12), ("weekday", 0, 6))


class CronError(ValueError):
    """A cron expression is malformed."""


def _field(text: str, name: str, lo: int, hi: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if base == "*":
                start, end = lo, hi
            elif "-" in base:
                a, b = base.split("-", 1)
                start, end = int(a), int(b)
            else:
                start = end = int(base)
        except ValueError:
            raise CronError(f"cron {name} field {text!r} is not a number, range, step or list") from None
        if step < 1 or not (lo <= start <= end <= hi):
            raise CronError(f"cron {name} field {text!r} is outside {lo}-{hi}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


class Cron:
    """A parsed expression; `next_after(t)` is the first matching minute strictly after `t` (epoch seconds)."""

    def __init__(self, expr: str) -> None:
        parts = expr.split()
        if len(parts) != 5:
            raise CronError(f"cron expression {expr!r} needs five fields (minute hour day month weekday)")
        self.expr = expr
        self.minute, self.hour, self.day, self.month, self.weekday = (
            _field(p, name, lo, hi) for p, (name, lo, hi) in zip(parts, _FIELDS, strict=True)
        )
        self._day_star, self._weekday_star = parts[2] == "*", parts[4] == "*"

    def _day_matches(self, t: datetime) -> bool:
        dom, dow = t.day in self.day, (t.isoweekday() % 7) in self.weekday
        if self._day_star or self._weekday_star:
            return dom and dow
        return dom or dow

    def next_after(self, epoch: float) -> float:
        t = datetime.fromtimestamp(epoch, UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
        for _ in range(100_000):  # every jump moves to the next month, day, hour or minute: bounded
            if t.month not in self.month:
                t = (t.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1)
            elif not self._day_matches(t):
                t = t.replace(hour=0, minute=0) + timedelta(days=1)
            elif t.hour not in self.hour:
                t = t.replace(minute=0) + timedelta(hours=1)
            elif t.minute not in self.minute:
                t += timedelta(minutes=1)
            else:
                return t.timestamp()
        raise CronError(f"cron expression {self.expr!r} never matches")
