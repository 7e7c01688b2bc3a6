"""Text with U+0000 escaped as PostgreSQL's text holds it (node/store/pg_text.py, docs/decisions.md record 84): the
escape reverses, and keeps equality, order and prefixes; a JSON text's strings are escaped as text is. The stores
that use it on both engines are in test_text_nul.py."""

from __future__ import annotations

import itertools
import json
from typing import Any

from node.store import pg_text

ALPHABET = ("\x00", "\x01", "\x02", "a", "\ue000")  # NUL, the escape, the second half of a pair, plain, private use
# every text of up to three characters over ALPHABET: each place a pair can start, end or sit next to another
TEXTS = ["".join(t) for n in range(4) for t in itertools.product(ALPHABET, repeat=n)]


def test_the_escape_is_reversed_and_keeps_equality_order_and_prefixes() -> None:
    escaped = {t: pg_text.escape_text(t) for t in TEXTS}
    assert all("\x00" not in e for e in escaped.values())
    assert all(pg_text.unescape_text(e) == t for t, e in escaped.items())
    assert len(set(escaped.values())) == len(TEXTS)  # injective
    # COLLATE "C" compares UTF-8 bytes: the code points' order, which Python's str order is
    assert sorted(TEXTS, key=escaped.__getitem__) == sorted(TEXTS)
    for a, b in itertools.product(TEXTS, repeat=2):
        assert escaped[a].startswith(escaped[b]) == a.startswith(b), (a, b)
    assert pg_text.escape_text('{"tags":["a\\u0000"]}') == '{"tags":["a\\u0000"]}'  # JSON text holds no raw NUL


def test_a_json_texts_strings_are_escaped_as_text_is() -> None:
    # a JSON parameter's strings meet escaped text columns on the server (the fan-out's run): escaped alike, its
    # escaped backslashes kept apart from the escapes that follow them
    texts = [t.replace("a", "\\") for t in TEXTS] + ["\\u0000", "\\\x00", "\\\\u0001"]
    for written in (json.dumps(texts), json.dumps(texts, ensure_ascii=False), json.dumps({t: t for t in texts})):
        escaped = pg_text.escape_json_strings(written)
        assert json.loads(escaped) == _escaped_strings(json.loads(written))
    assert pg_text.escape_json_strings('["roof", 1]') == '["roof", 1]'


def _escaped_strings(value: Any) -> Any:
    if isinstance(value, str):
        return pg_text.escape_text(value)
    if isinstance(value, dict):
        return {pg_text.escape_text(k): _escaped_strings(v) for k, v in value.items()}
    return [_escaped_strings(v) for v in value]
