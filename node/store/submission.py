"""Rules for what a client may submit, closed at submission and nowhere else.

Two places apply them: `node.web.http.decode_json` for every JSON request body (duplicate keys, NUL), and
`node.sealing` for every record an agent submits or the node signs for it, with `node.agents.service.register` for
identity documents (NUL, integers beyond ±2^53, content and tags made only of invisible characters). They are
deliberately NOT part of `identity.records.check`, which sync ingest and `bbs rebuild` share: a node must never
refuse a record its peers already hold, so a rule added later can only be enforced where records enter the
federation (docs/security.md).
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

import msgspec

from node.errors import InvalidInput, MalformedRequest

# Integers beyond ±2^53 lose precision in every JSON parser that reads numbers as doubles: refused, unless a double
# holds them exactly (canonical form writes an integral float, such as 1e300, as an integer).
MAX_SAFE_INTEGER = 2**53
# Characters that render as nothing but are not in the categories below (fillers and blanks of letter scripts).
_INVISIBLE_EXTRA = frozenset("\u115f\u1160\u3164\uffa0\u2800")
# Controls (NUL among them), format characters (zero-width and bidi controls), separators, lone combining marks.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp", "Mn", "Me"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def path_of(parent: str, key: str | int) -> str:
    """The JSON path of `key` under `parent`: `$.a.b`, `$.a[0]`, or `$.a["odd key"]` for keys that are not names."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    if _NAME.match(key):
        return f"{parent}.{key}"
    return f"{parent}[{json.dumps(key)}]"


# ---- request bodies ---------------------------------------------------------------------------------------


def check_body(raw: bytes, value: Any) -> None:
    """Refuse a decoded JSON body with a duplicate object key (400 `duplicate_key`) or a NUL anywhere in a key
    or string (422 `nul_character`); `field` is the JSON path of the offender.

    Both checks are cheap for ordinary bodies: a NUL can only arrive spelled `\\u0000` (raw control characters
    are not JSON), so bodies without that byte string skip the walk; and a body that is, once its whitespace is
    taken out, exactly what msgspec encodes for its decoded value (compact, as the node's own clients send, or
    spaced, as Python's `json.dumps` writes) cannot hold a duplicate key: the decoded value kept one of each.
    """
    if b"\\u0000" in raw:
        where = nul_path(value)
        if where is not None:
            raise InvalidInput("U+0000 (NUL) is not allowed in a request", field=where, code="nul_character")
    if isinstance(value, dict | list) and not _is_compact_encoding(raw, value):
        where = duplicate_key_path(raw)
        if where is not None:
            raise MalformedRequest(
                "an object repeats a key; JSON parsers disagree on which one counts, so none is taken",
                field=where,
                code="duplicate_key",
            )


def _is_compact_encoding(raw: bytes, value: Any) -> bool:
    encoded = msgspec.json.encode(value)
    # `format` only takes the whitespace out: every key and string of `raw` stays as it was written
    return encoded == raw or encoded == msgspec.json.format(raw, indent=-1)


class _Repeated(dict[str, Any]):
    """An object of a body that repeats `key` (built by the object_pairs_hook of `duplicate_key_path`)."""

    key: str


def duplicate_key_path(raw: bytes) -> str | None:
    """The JSON path of the first repeated key in a JSON text, or None when no object repeats a key."""
    found = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal found
        obj = dict(items)
        if len(obj) == len(items):
            return obj
        found = True
        repeated = _Repeated(obj)
        repeated.key = _first_repeat(items)
        return repeated

    value = json.loads(raw, object_pairs_hook=pairs)
    if not found:
        return None
    stack: list[tuple[str, Any]] = [("$", value)]
    while stack:  # depth first, in document order: the outermost offender on the first branch is named
        where, item = stack.pop()
        if isinstance(item, _Repeated):
            return path_of(where, item.key)
        children = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        stack.extend(reversed([(path_of(where, k), v) for k, v in children]))
    return "$"


def _first_repeat(items: list[tuple[str, Any]]) -> str:
    seen: set[str] = set()
    for key, _ in items:
        if key in seen:
            return key
        seen.add(key)
    raise AssertionError("called only for objects that repeat a key")


def nul_path(value: Any) -> str | None:
    """The JSON path of the first key or string holding U+0000 in a JSON value, or None."""
    found = _offence(value, ints=False)
    return None if found is None else _path("$", found[1])


def _path(prefix: str, reversed_steps: list[str | int]) -> str:
    where = prefix
    for step in reversed(reversed_steps):
        where = path_of(where, step)
    return where


# ---- records ----------------------------------------------------------------------------------------------


def check_record(record: dict[str, Any], prefix: str = "$") -> None:
    """Refuse a record on its way in from a client: NUL in any key or string (`nul_character`), an integer
    beyond ±2^53 anywhere that a double cannot hold exactly (`integer_out_of_range`; floats always pass),
    `content` or a tag made only of invisible characters (`invisible_only`). All 422, `field` the JSON path
    under `prefix` (where the record sits in the request)."""
    found = _offence(record)
    if found is not None:
        what, steps = found
        where = _path(prefix, steps)
        if what == "nul":
            raise InvalidInput("U+0000 (NUL) is not allowed in a record", field=where, code="nul_character")
        raise InvalidInput(
            "integers must lie within ±2^53 (9007199254740992), where every JSON reader reads them alike; send larger"
            " numbers as strings",
            field=where,
            code="integer_out_of_range",
        )
    content = record.get("content")
    if isinstance(content, str) and invisible_only(content):
        raise InvalidInput(
            "content is made only of invisible characters", field=path_of(prefix, "content"), code="invisible_only"
        )
    tags = record.get("tags")
    if isinstance(tags, list):
        for i, tag in enumerate(tags):
            if isinstance(tag, str) and invisible_only(tag):
                raise InvalidInput(
                    "a tag is made only of invisible characters",
                    field=path_of(path_of(prefix, "tags"), i),
                    code="invisible_only",
                )


def _offence(item: Any, ints: bool = True) -> tuple[str, list[str | int]] | None:
    """The first NUL (`nul`) or, with `ints`, unsafe integer (`int`) in a JSON value, with its path in reverse.

    Paths are built only for an offender: a record's walk is on every post's path (a few microseconds)."""
    kind = type(item)
    if kind is str:
        return ("nul", []) if "\x00" in item else None
    if kind is int and ints:
        return None if -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER or _is_double(item) else ("int", [])
    if kind is dict:
        for key, child in item.items():
            if "\x00" in key:
                return "nul", [key]
            found = _offence(child, ints)
            if found is not None:
                found[1].append(key)
                return found
    elif kind is list:
        for i, child in enumerate(item):
            found = _offence(child, ints)
            if found is not None:
                found[1].append(i)
                return found
    return None


def _is_double(n: int) -> bool:
    """True if a double holds `n` exactly: what canonical form makes of a large float (1e300 is written as an
    integer), which every JSON reader reads back unchanged."""
    try:
        return float(n) == n
    except OverflowError:
        return False


def invisible_only(text: str) -> bool:
    """True if nothing in `text` would show: only controls (NUL too), zero-width and bidi format characters,
    whitespace and separators, lone combining marks and blank fillers. Stops at the first visible character."""
    category = unicodedata.category
    return all(ch in _INVISIBLE_EXTRA or category(ch) in _INVISIBLE_CATEGORIES for ch in text)
