"""The feed's wire types (wire/feed.py): defaults and limits."""

from __future__ import annotations

import msgspec
import pytest

from wire.feed import MAX_FEED_PAGE, MAX_FEED_WAIT_MS, FeedPage, FeedQuery


def test_defaults_read_from_the_beginning_without_waiting() -> None:
    q = msgspec.convert({}, FeedQuery)
    assert (q.after, q.limit, q.wait_ms, q.include_synthetic) == (0, 50, 0, False)


@pytest.mark.parametrize(
    "fields",
    [{"after": -1}, {"limit": 0}, {"limit": MAX_FEED_PAGE + 1}, {"wait_ms": MAX_FEED_WAIT_MS + 1}, {"cursor": 3}],
)
def test_out_of_range_or_unknown_fields_are_refused(fields: dict[str, int]) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(fields, FeedQuery)


def test_a_page_round_trips() -> None:
    page = FeedPage(entries=[], next=7, head=9)
    assert msgspec.json.decode(msgspec.json.encode(page), type=FeedPage) == page
