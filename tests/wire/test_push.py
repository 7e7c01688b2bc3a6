"""Push wire types: defaults and the limits they enforce."""

from __future__ import annotations

import msgspec
import pytest

from wire.push import PushEndpointIn


def test_defaults_push_tier_one_for_every_reason() -> None:
    body = msgspec.convert({"url": "https://agent.example/push"}, PushEndpointIn)
    assert (body.tiers, body.reasons) == ([1], [])


@pytest.mark.parametrize(
    "value",
    [
        {"url": "mailto:x@y.z"},
        {"url": "http://" + "a" * 3000},
        {"url": "http://a:1/", "tiers": []},
        {"url": "http://a:1/", "reasons": ["x"]},
    ],
)
def test_bad_values_are_refused(value: dict[str, object]) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(value, PushEndpointIn)
