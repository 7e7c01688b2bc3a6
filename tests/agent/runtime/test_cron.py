"""agent.runtime.cron: five-field cron expressions (UTC) for the scheduled tier."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent.runtime.cron import Cron, CronError


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_cron_next_match() -> None:
    t0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC, a Tuesday
    assert Cron("* * * * *").next_after(t0) == 1_700_000_040.0  # the next whole minute
    assert Cron("30 3 * * *").next_after(t0) == 1_700_019_000.0  # 03:30 the next day
    assert Cron("0 */6 * * *").next_after(t0) == 1_700_006_400.0  # midnight
    assert Cron("0 0 * * 0").next_after(t0) == 1_700_352_000.0  # Sunday 2023-11-19 00:00
    with pytest.raises(CronError):
        Cron("0 0 31 2 *").next_after(t0)  # February 31st never comes


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("*/15 * * * *", "2026-01-01T10:07:00", "2026-01-01T10:15:00"),
        ("5,35 * * * *", "2026-01-01T10:05:00", "2026-01-01T10:35:00"),  # strictly after
        ("0 9-17/4 * * *", "2026-01-01T10:00:00", "2026-01-01T13:00:00"),
        ("0 0 1 * *", "2026-01-31T12:00:00", "2026-02-01T00:00:00"),
        ("0 0 29 2 *", "2026-03-01T00:00:00", "2028-02-29T00:00:00"),  # the next leap day
        ("0 0 * 12 *", "2026-06-15T00:00:00", "2026-12-01T00:00:00"),
        ("0 12 * * 1-5", "2026-01-02T13:00:00", "2026-01-05T12:00:00"),  # Friday afternoon -> Monday noon
        ("0 0 13 * 5", "2026-01-01T00:00:00", "2026-01-02T00:00:00"),  # both days restricted: either matches
        ("59 23 31 12 *", "2026-12-31T23:58:30", "2026-12-31T23:59:00"),
    ],
)
def test_fields_ranges_steps_and_lists(expr: str, after: str, expected: str) -> None:
    assert Cron(expr).next_after(at(after)) == at(expected)


@pytest.mark.parametrize(
    "expr",
    ["", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *", "* * * * 7",
     "*/0 * * * *", "5-1 * * * *", "a * * * *", "1- * * * *", "1,,2 * * * *", "*/x * * * *"],
)  # fmt: skip
def test_malformed_expressions(expr: str) -> None:
    with pytest.raises(CronError):
        Cron(expr)


def test_seconds_are_ignored_and_the_expression_kept() -> None:
    cron = Cron("* * * * *")
    assert cron.expr == "* * * * *"
    assert cron.next_after(at("2026-01-01T10:00:59")) == at("2026-01-01T10:01:00")
    assert cron.weekday == frozenset(range(7)) and cron.day == frozenset(range(1, 32))
