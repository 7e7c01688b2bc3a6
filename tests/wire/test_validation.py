"""The one reading of msgspec's validation messages: the message, and the JSON path of the value it is about."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import pytest

from wire.validation import split_validation_error


class Link(msgspec.Struct, forbid_unknown_fields=True):
    target: str
    weight: Annotated[int, msgspec.Meta(ge=0)] = 0


class Body(msgspec.Struct, forbid_unknown_fields=True):
    links: list[Link] = []
    tags: dict[str, int] = {}


def split(value: Any) -> tuple[str, str]:
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.convert(value, Body)
    return split_validation_error(info.value)


@pytest.mark.parametrize(
    ("value", "message", "path"),
    [
        ([], "Expected `object`, got `array`", "$"),  # the whole value: msgspec names no place
        ({"links": [{"target": "a", "weight": -1}]}, "Expected `int` >= 0", "$.links[0].weight"),
        ({"links": "a"}, "Expected `array`, got `str`", "$.links"),
        ({"tags": {"a": "b"}}, "Expected `int`, got `str`", "$.tags[...]"),  # a value under any key of a mapping
        # an unknown or missing field: the path of the field itself, not of the object holding it
        ({"colour": 1}, "Object contains unknown field `colour`", "$.colour"),
        ({"links": [{"target": "a", "colour": 1}]}, "Object contains unknown field `colour`", "$.links[0].colour"),
        ({"links": [{}]}, "Object missing required field `target`", "$.links[0].target"),
    ],
)
def test_the_message_and_the_path_of_the_value(value: Any, message: str, path: str) -> None:
    assert split(value) == (message, path)


def test_a_location_inside_a_field_name_is_split_at_the_last_one() -> None:
    """A field name is the client's text: it may hold msgspec's own separator."""
    weird = "x - at `$.y`"
    assert split({"links": [{"target": "a", weird: 1}]}) == (
        f"Object contains unknown field `{weird}`",
        f"$.links[0].{weird}",
    )
