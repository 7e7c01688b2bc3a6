"""Text with U+0000 as PostgreSQL holds it (docs/decisions.md record 84): its text cannot hold a NUL, so the node's
psycopg connection (node/store/pg_conn.py) escapes every str it binds and unescapes every text it reads, and a store
module that binds JSON or reads text around that connection escapes it here. No psycopg: a module of either engine
may import it.
"""

from __future__ import annotations

import re

ESCAPE = "\x01"  # the escape character: the lowest a text value can hold, so COLLATE "C" order is kept
_ESCAPED_NUL, _ESCAPED_ESCAPE = ESCAPE + "\x01", ESCAPE + "\x02"


def escape_text(text: str) -> str:
    """`text` as a PostgreSQL text value can hold it: U+0000 as U+0001 U+0001, U+0001 as U+0001 U+0002, the rest
    as it is. Injective, a prefix code and order-preserving under COLLATE "C": equality, `<`, ORDER BY and a prefix
    LIKE answer as on the text itself; a JSON text (never a raw control character) is unchanged."""
    if "\x00" in text or ESCAPE in text:
        return text.replace(ESCAPE, _ESCAPED_ESCAPE).replace("\x00", _ESCAPED_NUL)
    return text


def unescape_text(text: str) -> str:
    """The text `escape_text` was given (left to right, each pair is one character: aligned by construction)."""
    if ESCAPE in text:
        return text.replace(_ESCAPED_NUL, "\x00").replace(_ESCAPED_ESCAPE, ESCAPE)
    return text


_JSON_ESCAPE = re.compile(r"\\(\\|u000[01])")  # an escaped backslash (skipped whole: alignment), or U+0000, U+0001
_JSON_ESCAPED = {"\\": "\\\\", "u0000": "\\u0001\\u0001", "u0001": "\\u0001\\u0002"}


def escape_json_strings(text: str) -> str:
    """The JSON text `text` with each string's characters escaped as `escape_text` escapes them (on the JSON's own
    `\\u0000` and `\\u0001` escapes): for a JSON parameter whose strings the server compares with text columns
    (PostgreSQL's json refuses `\\u0000` too)."""
    if "\\u000" not in text:
        return text
    return _JSON_ESCAPE.sub(lambda m: _JSON_ESCAPED[m.group(1)], text)
