"""wire.time: the one formatter of epoch milliseconds and the one parser of canonical created_at."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from identity import canonical
from wire.time import format_ms, ms_of, parse_ms

# 1970 to 9999: the years a canonical created_at can spell
EPOCH_MS = st.integers(min_value=0, max_value=253_402_300_799_999)


def test_format_ms_spells_milliseconds_only_when_nonzero() -> None:
    assert format_ms(0) == "1970-01-01T00:00:00Z"
    assert format_ms(1_767_323_045_000) == "2026-01-02T03:04:05Z"
    assert format_ms(1_767_323_045_120) == "2026-01-02T03:04:05.120Z"
    assert format_ms(1_767_323_045_001) == "2026-01-02T03:04:05.001Z"


def test_parse_ms_reads_both_spellings() -> None:
    assert parse_ms("1970-01-01T00:00:00Z") == 0
    assert parse_ms("2026-01-02T03:04:05Z") == 1_767_323_045_000
    assert parse_ms("2026-01-02T03:04:05.120Z") == 1_767_323_045_120
    leap = datetime(2024, 2, 29, 23, 59, 59, 999_000, UTC)
    assert parse_ms("2024-02-29T23:59:59.999Z") == int(leap.timestamp() * 1000)


@pytest.mark.parametrize(
    "value",
    [
        "2026-01-02T03:04:05.000Z",  # zero milliseconds are never spelled
        "2026-01-02T03:04:05.12Z",
        "2026-01-02T03:04:05+00:00",
        "2026-01-02 03:04:05Z",
        "2026-02-30T00:00:00Z",  # canonical shape, not a real date
        "2026-13-01T00:00:00Z",
        "2026-01-02T24:00:00Z",
        "yesterday",
        "",
    ],
)
def test_parse_ms_refuses_what_is_not_canonical(value: str) -> None:
    with pytest.raises(canonical.CanonicalError):
        parse_ms(value)


@given(EPOCH_MS)
@example(2**47 - 1)  # format_ms lost a millisecond past the year 2242 (a float ms / 1000): found in a CI-like run
def test_format_then_parse_comes_back_exactly(ms: int) -> None:
    assert parse_ms(format_ms(ms)) == ms


@pytest.mark.parametrize(
    "created_at", ["2004-05-09T02:09:03.070Z", "2038-12-01T07:47:33.436Z", "1972-02-19T00:36:11.417Z"]
)
def test_parse_ms_is_exact(created_at: str) -> None:
    assert format_ms(parse_ms(created_at)) == created_at


@given(EPOCH_MS)
def test_the_fast_path_agrees_with_the_strict_parser(ms: int) -> None:
    text = format_ms(ms)
    assert parse_ms(text) == ms_of(canonical.parse_created_at(text))


def test_canonical_spellings_do_not_sort_as_text_but_their_milliseconds_do() -> None:
    earlier, later = "2026-01-02T03:04:05Z", "2026-01-02T03:04:05.001Z"
    assert later < earlier  # "." sorts before "Z"
    assert parse_ms(earlier) < parse_ms(later)
