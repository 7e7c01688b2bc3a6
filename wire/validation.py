"""Where msgspec says a value failed validation: one reading of its error message for the node and its clients."""

from __future__ import annotations

import re

import msgspec

_AT = " - at `"
_NAMED_FIELD = re.compile(r"Object (?:contains unknown|missing required) field `(.*)`", re.DOTALL)


def split_validation_error(exc: msgspec.ValidationError) -> tuple[str, str]:
    """msgspec's message without its location, and the JSON path of the value it is about (`$` for the whole).

    msgspec words an error as "Expected `int`, got `str` - at `$.links[0].weight`", leaving the location out
    at the top level. An unknown or a missing field gets the path of that field itself ("$.links[0].target"),
    not of the object holding it.
    """
    message = str(exc)
    path = "$"
    if _AT in message:
        message, path = message.rsplit(_AT, 1)
        path = path.rstrip("`")
    named = _NAMED_FIELD.fullmatch(message)
    if named:
        path = f"{path}.{named.group(1)}"
    return message, path
