"""The canonical form: `identity.canonical` against the seed's reference code and the brief's rules.

The seed's Canonicalization Specification is normative and its reference code is the oracle:
it is kept below verbatim (as source text, executed into its own namespace) and
`record_hash` / `content_fingerprint` are checked against it over arbitrary Unicode.
Fixed digests are pinned so that any change to the canonical form fails loudly.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from identity import canonical
from identity.canonical import (
    CanonicalError,
    canonical_bytes,
    check_canonical,
    content_fingerprint,
    format_created_at,
    normalize_content,
    normalize_float,
    normalize_value,
    parse_created_at,
    record_hash,
)

# ---------------------------------------------------------------------------------------------
# The oracle: the seed's reference code, verbatim (000_b493fa8609ddd127.txt, "Canonicalization
# Specification"). Only the indentation lost in the seed's text extraction is restored.
# ---------------------------------------------------------------------------------------------
SEED_REFERENCE_CODE = """\
import hashlib, json, unicodedata
def compute_record_hash(author_id, created_at, entry_type, performative, content):
    nc = unicodedata.normalize('NFC', content).rstrip()
    nc = nc.replace('\\r\\n', '\\n').replace('\\r', '\\n')
    preimage = {
        "author_id": author_id, "content": nc, "created_at": created_at,
        "entry_type": entry_type, "performative": performative,
        "schema_version": "v1"
    }
    canonical = json.dumps(preimage, sort_keys=True, ensure_ascii=True, separators=(',',':'))
    return hashlib.sha256(canonical.encode('utf-8')).hexdigest()
def compute_content_fingerprint(content):
    n = unicodedata.normalize('NFC', content).strip().replace('\\r\\n','\\n').replace('\\r','\\n')
    return hashlib.sha256(n.encode('utf-8')).hexdigest()
"""

_oracle: dict[str, Any] = {}
exec(compile(SEED_REFERENCE_CODE, "<seed reference code>", "exec"), _oracle)
compute_record_hash: Callable[[str, str, str, str, str], str] = _oracle["compute_record_hash"]
compute_content_fingerprint: Callable[[str], str] = _oracle["compute_content_fingerprint"]

# Fragments that stress the rules: CR/LF variants, Unicode whitespace that str.strip() removes,
# combining characters (NFD vs NFC), singletons that NFC rewrites, astral-plane characters.
FRAGMENTS = [
    "\r",
    "\n",
    "\r\n",
    "\n\r",
    " ",
    "\t",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x85",
    "\xa0",
    "\u2028",
    "\u3000",
    "e\u0301",  # NFD é
    "\u00e9",  # NFC é
    "\u0301",  # lone combining acute
    "A\u030a",  # NFD Å
    "\u212b",  # ANGSTROM SIGN, NFC -> U+00C5
    "\u1100\u1161",  # Hangul jamo, NFC composes
    "q\u0307\u0323",  # combining marks needing reordering
    "\U0001f600",  # astral emoji
    "\U0001d11e",  # astral musical symbol
    "\U00020000",  # astral CJK
    '"',
    "\\",
    "/",
    "\x00",
    "\x7f",
]

unicode_text = st.lists(st.one_of(st.text(), st.sampled_from(FRAGMENTS)), max_size=12).map("".join)


# ---------------------------------------------------------------------------------------------
# record_hash / content_fingerprint against the oracle
# ---------------------------------------------------------------------------------------------


@given(
    author_id=unicode_text,
    created_at=unicode_text,
    entry_type=unicode_text,
    performative=unicode_text,
    content=unicode_text,
)
@example("did:key:z6Mk", "2026-01-01T00:00:00Z", "finding", "inform", "a\r\nb\rc \t\r\n")
@example("x", "y", "z", "w", "Cafe\u0301 \U0001f600  ")
@example("e\u0301", "2026-01-01T00:00:00.120Z", "\u212b", "\U0001f600", "\u0301")
def test_record_hash_matches_seed_oracle(
    author_id: str, created_at: str, entry_type: str, performative: str, content: str
) -> None:
    ours = record_hash(author_id, created_at, entry_type, performative, content)
    assert ours == compute_record_hash(author_id, created_at, entry_type, performative, content)


@given(content=unicode_text)
@example("  hello world \r\n")
@example("\r\n\r\n")
@example("\x85x\u2028")
@example("Cafe\u0301\r\nx")
def test_content_fingerprint_matches_seed_oracle(content: str) -> None:
    assert content_fingerprint(content) == compute_content_fingerprint(content)


@given(content=unicode_text)
def test_normalize_content_is_what_record_hash_hashes(content: str) -> None:
    # normalize_content is idempotent, NFC, free of trailing whitespace and of \r.
    once = normalize_content(content)
    assert normalize_content(once) == once
    assert unicodedata.is_normalized("NFC", once)
    assert once == once.rstrip()
    assert "\r" not in once
    # An entry whose content is already normalised hashes the same as the raw content.
    assert record_hash("a", "b", "c", "d", once) == record_hash("a", "b", "c", "d", content)


def test_record_hash_preimage_spelled_out() -> None:
    preimage = (
        '{"author_id":"did:key:z6Mkexample","content":"hello world","created_at":"2026-01-01T00:00:00Z",'
        '"entry_type":"finding","performative":"inform","schema_version":"v1"}'
    )
    expected = hashlib.sha256(preimage.encode("ascii")).hexdigest()
    assert record_hash("did:key:z6Mkexample", "2026-01-01T00:00:00Z", "finding", "inform", "hello world") == expected


# Pinned digests: if one of these changes, every stored record hash in the federation changes.
RECORD_HASH_VECTORS = [
    (
        ("did:key:z6Mkexample", "2026-01-01T00:00:00Z", "finding", "inform", "hello world"),
        "f7237e22ed610790728eae9257b0a3961437f0b0d666a7374a6450223cbe5e4b",
    ),
    (
        (
            "did:key:z6Mkexample",
            "2026-03-04T05:06:07.120Z",
            "question",
            "query",
            "Cafe\u0301 \U0001f600\r\nline two\r\n  ",
        ),
        "de63b9d932fa9d7f7d7b020fccccce56b11f968df13887797c2d4a12cd7f90a3",
    ),
    (("a", "b", "c", "d", ""), "617bc47d67d36a5f4c85fa8e93c01ac420c2de7c6e059c3b21302c89e81bff2d"),
]

CONTENT_FINGERPRINT_VECTORS = [
    ("hello world", "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"),
    ("  hello world \r\n", "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"),
    ("Cafe\u0301\r\nx", "af1ad9016a86953e3402484a5fe008dbda76b050a8b3c0c5bf05c19e55abc228"),
    ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    ("\U0001f600", "f0443a342c5ef54783a111b51ba56c938e474c32324d90c3a60c9c8e3a37e2d9"),
]


@pytest.mark.parametrize(("args", "digest"), RECORD_HASH_VECTORS)
def test_record_hash_pinned_vectors(args: tuple[str, str, str, str, str], digest: str) -> None:
    assert record_hash(*args) == digest
    assert compute_record_hash(*args) == digest


@pytest.mark.parametrize(("content", "digest"), CONTENT_FINGERPRINT_VECTORS)
def test_content_fingerprint_pinned_vectors(content: str, digest: str) -> None:
    assert content_fingerprint(content) == digest
    assert compute_content_fingerprint(content) == digest


def test_schema_version_is_v1() -> None:
    assert canonical.SCHEMA_VERSION == "v1"


# ---------------------------------------------------------------------------------------------
# normalize_float
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected", "spelling"),
    [
        (0.5, 0.5, "0.5"),
        (0.12345, 0.1235, "0.1235"),  # Python round(): 0.12345 is stored as 0.123450000000000004...
        (2.71828, 2.7183, "2.7183"),
        (0.1 + 0.2, 0.3, "0.3"),
        (1.0, 1, "1"),
        (-0.0, 0, "0"),
        (0.0, 0, "0"),
        (0.00004, 0, "0"),
        (0.00005, 0.0001, "0.0001"),
        (0.99999, 1, "1"),
        (-1.5, -1.5, "-1.5"),
        (1234.5, 1234.5, "1234.5"),
        (3, 3, "3"),
    ],
)
def test_normalize_float(value: float, expected: float | int, spelling: str) -> None:
    result = normalize_float(value)
    assert result == expected
    assert type(result) is type(expected)
    assert canonical_bytes(result).decode("ascii") == spelling


def test_normalize_float_negative_zero_becomes_positive_integer_zero() -> None:
    result = normalize_float(-0.0)
    assert result == 0 and type(result) is int
    assert math.copysign(1, result) == 1


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, float("nan")])
def test_normalize_float_refuses_nan_and_infinities(value: float) -> None:
    with pytest.raises(CanonicalError) as info:
        normalize_float(value, "$.confidence")
    assert info.value.field == "$.confidence"


@pytest.mark.parametrize("value", [True, False])
def test_normalize_float_refuses_booleans(value: bool) -> None:
    with pytest.raises(CanonicalError):
        normalize_float(value)


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15))
def test_normalize_float_properties(value: float) -> None:
    result = normalize_float(value)
    assert normalize_float(result) == result  # idempotent
    check_canonical(result)  # what normalising produces is accepted as canonical
    text = canonical_bytes(result).decode("ascii")
    assert "e" not in text and "E" not in text  # never exponent notation in this range
    if "." in text:
        decimals = text.split(".")[1]
        assert 1 <= len(decimals) <= 4 and not decimals.endswith("0")
    else:
        assert type(result) is int
    assert abs(result - value) <= 0.00005 + 1e-9 * abs(value)


# ---------------------------------------------------------------------------------------------
# created_at
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        (datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "2026-01-02T03:04:05Z"),
        (datetime(2026, 1, 2, 3, 4, 5, 120_000, tzinfo=UTC), "2026-01-02T03:04:05.120Z"),
        (datetime(2026, 1, 2, 3, 4, 5, 1_500, tzinfo=UTC), "2026-01-02T03:04:05.001Z"),
        (datetime(2026, 1, 2, 3, 4, 5, 999, tzinfo=UTC), "2026-01-02T03:04:05Z"),  # sub-ms truncated
        (datetime(2026, 1, 2, 3, 4, 5, 999_999, tzinfo=UTC), "2026-01-02T03:04:05.999Z"),  # truncated, not rounded
        (datetime(2026, 1, 1, 1, 0, 0, tzinfo=timezone(timedelta(hours=1))), "2026-01-01T00:00:00Z"),
        (datetime(2025, 12, 31, 19, 30, 0, tzinfo=timezone(timedelta(hours=-5))), "2026-01-01T00:30:00Z"),
    ],
)
def test_format_created_at(moment: datetime, expected: str) -> None:
    assert format_created_at(moment) == expected


def test_format_created_at_refuses_naive_datetimes() -> None:
    with pytest.raises(CanonicalError):
        format_created_at(datetime(2026, 1, 1, 0, 0, 0))


def test_now_created_at_is_canonical() -> None:
    parse_created_at(canonical.now_created_at())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-02T03:04:05Z", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05.120Z", datetime(2026, 1, 2, 3, 4, 5, 120_000, tzinfo=UTC)),
        ("2026-01-02T03:04:05.001Z", datetime(2026, 1, 2, 3, 4, 5, 1_000, tzinfo=UTC)),
        ("2024-02-29T23:59:59.999Z", datetime(2024, 2, 29, 23, 59, 59, 999_000, tzinfo=UTC)),
    ],
)
def test_parse_created_at(text: str, expected: datetime) -> None:
    parsed = parse_created_at(text)
    assert parsed == expected
    assert parsed.tzinfo is not None and parsed.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "text",
    [
        "2026-01-02T03:04:05.000Z",  # zero milliseconds must be omitted
        "2026-01-02T03:04:05+00:00",  # offsets refused, even +00:00
        "2026-01-02T03:04:05.120+00:00",
        "2026-01-02T04:04:05+01:00",
        "2026-01-02T03:04:05",  # no zone
        "2026-01-02T03:04:05z",  # lower-case z
        "2026-01-02 03:04:05Z",  # space separator
        "2026-01-02t03:04:05Z",
        "2026-01-02T03:04:05.12Z",  # milliseconds must be exactly three digits
        "2026-01-02T03:04:05.1200Z",
        "2026-01-02T03:04:05.120000Z",
        "2026-01-02T03:04Z",
        "2026-1-2T03:04:05Z",
        "20260102T030405Z",
        "+2026-01-02T03:04:05Z",
        " 2026-01-02T03:04:05Z",
        "2026-02-30T00:00:00Z",  # invalid dates
        "2025-02-29T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-00-10T00:00:00Z",
        "2026-01-32T00:00:00Z",
        "2026-01-01T24:00:00Z",
        "2026-01-01T23:60:00Z",
        "2026-12-31T23:59:60Z",  # leap seconds are not representable
        "0000-01-01T00:00:00Z",
        "1969-12-31T23:59:59.999Z",  # before 1970: negative epoch milliseconds (sync times are never negative)
        "0001-01-01T00:00:00Z",
        "",
    ],
)
def test_parse_created_at_refuses_other_spellings(text: str) -> None:
    with pytest.raises(CanonicalError) as info:
        parse_created_at(text, "$.created_at")
    assert info.value.field == "$.created_at"


@pytest.mark.parametrize("value", [None, 1767225600, 1.5, b"2026-01-02T03:04:05Z"])
def test_parse_created_at_refuses_non_strings(value: Any) -> None:
    with pytest.raises(CanonicalError):
        parse_created_at(value)


def test_parse_created_at_refuses_trailing_newline() -> None:
    with pytest.raises(CanonicalError):
        parse_created_at("2026-01-02T03:04:05Z\n")


@pytest.mark.parametrize(
    "text",
    [
        "\u0662\u0660\u0662\u0666-01-02T03:04:05Z",  # Arabic-Indic digits for the year
        "2026-01-02T03:04:05.\u0661\u0662\u0663Z",  # Arabic-Indic milliseconds
        "\uff12\uff10\uff12\uff16-01-02T03:04:05Z",  # full-width digits
    ],
)
def test_parse_created_at_refuses_non_ascii_digits(text: str) -> None:
    with pytest.raises(CanonicalError):
        parse_created_at(text)


def test_format_created_at_pads_years_below_1000() -> None:
    assert format_created_at(datetime(999, 1, 1, tzinfo=UTC)) == "0999-01-01T00:00:00Z"


canonical_instants = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999_999), timezones=st.just(UTC)
)


@given(canonical_instants)
def test_created_at_round_trip_from_datetime(moment: datetime) -> None:
    text = format_created_at(moment)
    assert parse_created_at(text) == moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    assert not text.endswith(".000Z")
    assert len(text) in (20, 24)


@given(canonical_instants)
def test_created_at_round_trip_from_text(moment: datetime) -> None:
    text = format_created_at(moment)
    assert format_created_at(parse_created_at(text)) == text


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 2),
        max_value=datetime(9998, 12, 31),
        timezones=st.sampled_from([timezone(timedelta(minutes=m)) for m in (-720, -330, -1, 0, 1, 345, 840)]),
    )
)
def test_format_created_at_converts_any_offset_to_utc(moment: datetime) -> None:
    text = format_created_at(moment)
    assert text == format_created_at(moment.astimezone(UTC))
    assert parse_created_at(text) == moment.replace(microsecond=moment.microsecond // 1000 * 1000)


# ---------------------------------------------------------------------------------------------
# normalize_value / check_canonical
# ---------------------------------------------------------------------------------------------

NFD_E = "e\u0301"
NFC_E = "\u00e9"


def test_normalize_value_normalises_strings_keys_and_floats() -> None:
    value = {
        "content": f"caf{NFD_E}",
        f"k{NFD_E}y": [1.0, 0.12345, -0.0, True, None, 7, (NFD_E, 2.5)],
        "nested": {"deeper": {"x": 0.5}},
    }
    assert normalize_value(value) == {
        "content": f"caf{NFC_E}",
        f"k{NFC_E}y": [1, 0.1235, 0, True, None, 7, [NFC_E, 2.5]],
        "nested": {"deeper": {"x": 0.5}},
    }


def test_normalize_value_keeps_booleans_and_ints_as_they_are() -> None:
    out = normalize_value([True, False, 0, 1, 2**70])
    assert out == [True, False, 0, 1, 2**70]
    assert [type(v) for v in out] == [bool, bool, int, int, int]


def test_normalize_value_refuses_keys_colliding_after_nfc() -> None:
    with pytest.raises(CanonicalError) as info:
        normalize_value({"outer": {NFC_E: 1, NFD_E: 2}})
    assert info.value.field == "$.outer"


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"a": [1, {"b": math.nan}]}, "$.a[1].b"),
        ({"confidence": math.inf}, "$.confidence"),
        ({"tags": ["x", {1, 2}]}, "$.tags[1]"),
        ({"blob": b"bytes"}, "$.blob"),
        ({"meta": {1: "non-string key"}}, "$.meta"),
        ({"when": datetime(2026, 1, 1, tzinfo=UTC)}, "$.when"),
        (object(), "$"),
    ],
)
def test_normalize_value_refusals_report_the_path(value: Any, field: str) -> None:
    with pytest.raises(CanonicalError) as info:
        normalize_value(value)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (NFD_E, "$"),
        ({"content": f"caf{NFD_E}"}, "$.content"),
        ({"metadata": {"note": ["ok", NFD_E]}}, "$.metadata.note[1]"),
        ({"metadata": {"deep": {"deeper": "\u212b"}}}, "$.metadata.deep.deeper"),  # ANGSTROM SIGN is not NFC
        ({"metadata": {NFD_E: "value"}}, f"$.metadata.{NFD_E}"),  # a non-NFC key is reported at the key
        ({"confidence": 1.0}, "$.confidence"),
        ({"confidence": 0.0}, "$.confidence"),
        ({"confidence": -0.0}, "$.confidence"),
        ({"confidence": 0.12345}, "$.confidence"),
        ({"confidence": 0.1 + 0.2}, "$.confidence"),
        ({"weights": [0.5, 2.0]}, "$.weights[1]"),
        ({"confidence": math.nan}, "$.confidence"),
        ({"confidence": math.inf}, "$.confidence"),
        ({"list": [{"x": [1e20]}]}, "$.list[0].x[0]"),
    ],
)
def test_check_canonical_refuses_and_reports_the_path(value: Any, field: str) -> None:
    with pytest.raises(CanonicalError) as info:
        check_canonical(value)
    assert info.value.field == field


@pytest.mark.parametrize(
    "value",
    [
        NFC_E,
        {"content": f"caf{NFC_E} \U0001f600", "confidence": 0.5, "n": 1, "b": True, "z": None},
        {"weights": [0.1235, -1.5, 0.0001, 1234.5678], "tags": ["a", "b"]},
        {"metadata": {NFC_E: {"x": [1, 2, 3]}}},
        [],
        {},
        2**70,
    ],
)
def test_check_canonical_accepts_canonical_values(value: Any) -> None:
    check_canonical(value)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12)
    | unicode_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(unicode_text, children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_normalised_values_are_canonical_and_stable(value: Any) -> None:
    try:
        normal = normalize_value(value)
    except CanonicalError:
        return  # only possible refusal here: two keys colliding after NFC
    check_canonical(normal)
    assert normalize_value(normal) == normal
    data = canonical_bytes(normal)
    data.decode("ascii")
    assert json.loads(data) == normal
    assert canonical_bytes(json.loads(data)) == data  # parse and re-serialise: the same bytes


# ---------------------------------------------------------------------------------------------
# canonical_bytes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": 1, "a": [1, 2], "c": {"z": None, "y": True}}, b'{"a":[1,2],"b":1,"c":{"y":true,"z":null}}'),
        ({"B": 1, "a": 2, "_": 3}, b'{"B":1,"_":3,"a":2}'),  # plain code-point order
        ({"k": NFC_E}, b'{"k":"\\u00e9"}'),
        ({"k": "\U0001f600"}, b'{"k":"\\ud83d\\ude00"}'),  # astral: UTF-16 surrogate pair, lower-case hex
        ({"k": "\x7f\x00\x1f"}, b'{"k":"\\u007f\\u0000\\u001f"}'),
        ({"k": '"\\/\n\r\t\b\f'}, b'{"k":"\\"\\\\/\\n\\r\\t\\b\\f"}'),
        # keys sort by code point, not by UTF-16 code unit: U+E000 comes before U+1F600
        ({"\U0001f600": 2, "\ue000": 1}, b'{"\\ue000":1,"\\ud83d\\ude00":2}'),
        ({"x": 0.5, "y": 0.1235, "z": 1, "w": -2}, b'{"w":-2,"x":0.5,"y":0.1235,"z":1}'),
        ([], b"[]"),
        ({}, b"{}"),
        ("", b'""'),
    ],
)
def test_canonical_bytes(value: Any, expected: bytes) -> None:
    assert canonical_bytes(value) == expected


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, {"x": [math.nan]}])
def test_canonical_bytes_refuses_nan_and_infinities(value: Any) -> None:
    with pytest.raises(ValueError):
        canonical_bytes(value)


@given(json_values)
def test_canonical_bytes_is_ascii_compact_and_sorted(value: Any) -> None:
    try:
        normal = normalize_value(value)
    except CanonicalError:
        return
    text = canonical_bytes(normal).decode("ascii")
    assert text == json.dumps(normal, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    assert all(0x20 <= ord(ch) < 0x7F for ch in text)


def _definition(value: Any) -> bytes:
    """canonical_bytes as specified: the one json.dumps call (canonical_bytes takes faster routes to it)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode()


ascii_text = st.text(st.characters(max_codepoint=0x7F), max_size=8)
any_floats = st.floats() | st.sampled_from([0.0, -0.0, 1e-4, -1e-4, 9.9999e-5, 1e16, 9999999999999998.0, 5e-324])
any_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**30])
    | any_floats
    | ascii_text
    | unicode_text,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(ascii_text | unicode_text, children, max_size=4)
    ),
    max_leaves=24,
)


@given(any_json)
@example({"k": "\x7f"})
@example({"\x7f": 1, "~": 2})
@example([1e16, 1e-5, 0.0001, -0.0])
@example({"a\ud800": "\udfff"})
def test_canonical_bytes_is_the_json_dumps_definition(value: Any) -> None:
    try:
        expected = _definition(value)
    except ValueError:  # NaN or infinity
        with pytest.raises(ValueError):
            canonical_bytes(value)
        return
    assert canonical_bytes(value) == expected


@pytest.mark.parametrize("depth", [31, 32, 33, 40])
def test_canonical_bytes_of_deep_values_is_the_definition(depth: int) -> None:
    value: Any = 0.5
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    assert canonical_bytes(value) == _definition(value)


def _outcome(fn: Callable[[Any], bytes], value: Any) -> bytes | type[Exception]:
    try:
        return fn(value)
    except (TypeError, ValueError) as exc:
        return type(exc)


@pytest.mark.parametrize(
    "value",
    [b"x", {1: 2}, {10: "a", 9: "b"}, {True: 1}, {"k": {1, 2}}, datetime(2026, 1, 1, tzinfo=UTC), [10**5000]],
)
def test_canonical_bytes_of_other_values_is_the_definition(value: Any) -> None:
    assert _outcome(canonical_bytes, value) == _outcome(_definition, value)


def _strptime_reading(text: str) -> datetime | str:
    """What parse_created_at is defined to return for a string of the canonical shape: strptime's reading,
    for times from 1970 on (earlier ones are refused whatever they spell)."""
    if text[:4] < "1970":
        return "created_at must not be before 1970-01-01T00:00:00Z"
    try:
        parsed = datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError as exc:
        return f"created_at is not a valid date: {exc}"
    return parsed.replace(microsecond=int(text[20:23]) * 1000) if len(text) > 20 else parsed


two_digits = st.integers(0, 99).map("{:02d}".format)


@given(
    st.integers(0, 9999).map("{:04d}".format),
    two_digits,
    two_digits,
    two_digits,
    two_digits,
    two_digits,
    st.none() | st.integers(1, 999).map("{:03d}".format),
)
@example("2024", "02", "29", "23", "59", "59", None)
@example("2026", "12", "31", "23", "59", "60", "001")
def test_parse_created_at_reads_every_canonical_shape_as_strptime_does(
    year: str, month: str, day: str, hour: str, minute: str, second: str, millis: str | None
) -> None:
    text = f"{year}-{month}-{day}T{hour}:{minute}:{second}" + (f".{millis}Z" if millis else "Z")
    expected = _strptime_reading(text)
    if isinstance(expected, str):
        with pytest.raises(CanonicalError) as info:
            parse_created_at(text)
        assert str(info.value) == expected
    else:
        assert parse_created_at(text) == expected


def _check_outcome(fn: Callable[..., None], value: Any) -> tuple[str, str] | None:
    try:
        fn(value, "$")
    except CanonicalError as exc:
        return str(exc), exc.field
    return None


@given(any_json)
@example({"k": "e\u0301"})
@example({"e\u0301": 1})
@example({"x": [0.1235, 1.0, 0.12345]})
@example({"k": ("e\u0301",)})
@example({"k": "\ud800"})
def test_check_canonical_decides_as_the_full_walk(value: Any) -> None:
    # check_canonical answers plainly canonical values without the path-building walk; same verdicts.
    assert _check_outcome(check_canonical, value) == _check_outcome(canonical._check_canonical, value)


def _nesting_depth_by_stack(value: Any) -> int:
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        else:
            deepest = max(deepest, depth)
            continue
        deepest = max(deepest, depth + 1)
    return deepest


@given(any_json)
@example([[], {}, [[{}]]])
def test_nesting_depth(value: Any) -> None:
    assert canonical.nesting_depth(value) == _nesting_depth_by_stack(value)


def test_nesting_depth_of_hostile_depth() -> None:
    value: Any = []
    for _ in range(100_000):
        value = [value]
    assert canonical.nesting_depth(value) == 100_001


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    return value


@given(any_json)
@example(_nested(canonical.MAX_DEPTH, "e\u0301"))
@example(_nested(canonical.MAX_DEPTH + 1, 1))
@example(_nested(canonical.MAX_DEPTH + 1, "caf\u00e9"))
@example({"x": [math.inf]})
@example(math.nan)
def test_canonical_bytes_within_depth_is_the_depth_check_then_the_bytes(value: Any) -> None:
    # one walk for both: the same answer as measuring the depth, then writing the bytes (or the same refusal of
    # NaN and the infinities, which any_floats draws)
    if canonical.nesting_depth(value) > canonical.MAX_DEPTH:
        assert canonical.canonical_bytes_within_depth(value) is None
        return
    try:
        expected = canonical.canonical_bytes(value)
    except ValueError:
        with pytest.raises(ValueError):
            canonical.canonical_bytes_within_depth(value)
        return
    assert canonical.canonical_bytes_within_depth(value) == expected


def test_canonical_bytes_within_depth_of_hostile_depth() -> None:
    assert canonical.canonical_bytes_within_depth(_nested(100_000, 1)) is None
    assert canonical.canonical_bytes_within_depth(_nested(canonical.MAX_DEPTH, 1)) is not None
