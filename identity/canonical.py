"""The normative canonical form: record hashes, content fingerprints, canonical JSON.

`record_hash` and `content_fingerprint` follow the seed's Canonicalization
Specification byte for byte. Every other record kind uses the same JSON rules
(`canonical_bytes`). Values are *normalised* when a node accepts unsigned input
(`normalize_*`) and *checked* when a signed record arrives (`check_canonical`):
a signed record is never re-spelled, because re-spelling breaks its signature.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from datetime import UTC, datetime
from typing import Any

import msgspec

SCHEMA_VERSION = "v1"

_CREATED_AT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{3})?Z")


class CanonicalError(ValueError):
    """A value cannot be put in, or is not in, canonical form."""

    def __init__(self, message: str, field: str = "$") -> None:
        super().__init__(message)
        self.field = field


def normalize_content(content: str) -> str:
    """Content as it enters the record hash: NFC, trailing whitespace removed, newlines `\\n`."""
    nc = unicodedata.normalize("NFC", content).rstrip()
    return nc.replace("\r\n", "\n").replace("\r", "\n")


def record_hash(author_id: str, created_at: str, entry_type: str, performative: str, content: str) -> str:
    """The seed's entry identity: SHA-256 over the canonical preimage, hex."""
    preimage = {
        "author_id": author_id,
        "content": normalize_content(content),
        "created_at": created_at,
        "entry_type": entry_type,
        "performative": performative,
        "schema_version": SCHEMA_VERSION,
    }
    return hashlib.sha256(_sorted_compact_json(preimage, allow_nan=True)).hexdigest()


SPACE_SCHEMA_VERSION = "v2"  # an entry inside a space: the v1 preimage plus `space` (docs/format-v3.md)


def space_entry_preimage(
    author_id: str, created_at: str, entry_type: str, performative: str, content: str, space: str
) -> bytes:
    """The canonical bytes a space entry's address hashes: the seed's v1 preimage with `schema_version` "v2" and
    the entry's `space` added, so the space is inside the address (docs/format-v3.md). Public entries keep
    `record_hash`, the seed's v1 preimage, unchanged."""
    preimage = {
        "author_id": author_id,
        "content": normalize_content(content),
        "created_at": created_at,
        "entry_type": entry_type,
        "performative": performative,
        "schema_version": SPACE_SCHEMA_VERSION,
        "space": space,
    }
    return _sorted_compact_json(preimage, allow_nan=False)


def space_record_hash(
    author_id: str, created_at: str, entry_type: str, performative: str, content: str, space: str
) -> str:
    """A space entry's address: SHA-256 of `space_entry_preimage`, hex."""
    return hashlib.sha256(
        space_entry_preimage(author_id, created_at, entry_type, performative, content, space)
    ).hexdigest()


def content_fingerprint(content: str) -> str:
    """The seed's dedup fingerprint: SHA-256 of the stripped NFC content, hex."""
    n = unicodedata.normalize("NFC", content).strip().replace("\r\n", "\n").replace("\r", "\n")
    return hashlib.sha256(n.encode("utf-8")).hexdigest()


def normalize_float(value: float, field: str = "$") -> float | int:
    """Round to at most 4 decimals; integral values become ints (`1.0` -> `1`, `-0.0` -> `0`).

    NaN and infinities are refused.
    """
    if isinstance(value, bool):
        raise CanonicalError("booleans are not numbers", field)
    if not math.isfinite(value):
        raise CanonicalError("NaN and infinities are not allowed", field)
    rounded = round(float(value), 4)
    if rounded == int(rounded):
        return int(rounded)
    return rounded


def format_created_at(moment: datetime) -> str:
    """ISO 8601 UTC with `Z`; exactly three millisecond digits only when they are nonzero."""
    if moment.tzinfo is None:
        raise CanonicalError("datetime must be timezone-aware")
    utc = moment.astimezone(UTC)
    base = f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"
    millis = utc.microsecond // 1000
    return f"{base}.{millis:03d}Z" if millis else f"{base}Z"


def now_created_at() -> str:
    """The current time in canonical `created_at` spelling."""
    return format_created_at(datetime.now(UTC))


def parse_created_at(value: str, field: str = "created_at") -> datetime:
    """Parse a canonical `created_at`; any other spelling is refused, never re-spelled."""
    if not isinstance(value, str) or not _CREATED_AT.fullmatch(value):
        raise CanonicalError("created_at must be YYYY-MM-DDTHH:MM:SS[.mmm]Z", field)
    if value.endswith(".000Z"):
        raise CanonicalError("created_at must omit milliseconds when they are zero", field)
    if value[0:4] < "1970":  # times are epoch milliseconds everywhere (sync, negentropy): never negative
        raise CanonicalError("created_at must not be before 1970-01-01T00:00:00Z", field)
    millis = int(value[20:23]) * 1000 if len(value) > 20 else 0
    try:  # the fields are ASCII digits at fixed places (the pattern above): read them directly
        return datetime(
            int(value[0:4]),
            int(value[5:7]),
            int(value[8:10]),
            int(value[11:13]),
            int(value[14:16]),
            int(value[17:19]),
            millis,
            tzinfo=UTC,
        )
    except ValueError:
        pass  # not a real date or time: strptime accepts exactly the same ones and words the reason
    try:
        parsed = datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError as exc:
        raise CanonicalError(f"created_at is not a valid date: {exc}", field) from None
    return parsed.replace(microsecond=millis)


def normalize_value(value: Any, field: str = "$") -> Any:
    """Normalise a JSON value for canonical form: NFC strings, rounded floats, NFC keys."""
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return normalize_float(value, field)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalError("object keys must be strings", field)
            nkey = unicodedata.normalize("NFC", key)
            if nkey in out:
                raise CanonicalError(f"key {key!r} collides with another after NFC", field)
            out[nkey] = normalize_value(item, f"{field}.{nkey}")
        return out
    if isinstance(value, (list, tuple)):
        return [normalize_value(item, f"{field}[{i}]") for i, item in enumerate(value)]
    raise CanonicalError(f"unsupported type {type(value).__name__}", field)


def check_canonical(value: Any, field: str = "$") -> None:
    """Raise CanonicalError unless `value` is already in canonical form (as a signed record must be)."""
    if field == "$" and _surely_canonical(value, 0):
        return  # the common case, decided without building a path for every member
    _check_canonical(value, field)


def _check_canonical(value: Any, field: str) -> None:
    if isinstance(value, str):
        _check_string(value, field)
    elif isinstance(value, float):
        if normalize_float(value, field) != value or value == int(value):
            raise CanonicalError("number is not canonical (at most 4 decimals, integers without a point)", field)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalError("object keys must be strings", field)
            _check_string(key, f"{field}.{key}")
            _check_canonical(item, f"{field}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_canonical(item, f"{field}[{i}]")


def _surely_canonical(value: Any, depth: int) -> bool:
    """True if `_check_canonical` accepts `value` for certain: plain types only, ASCII strings (always NFC)
    or checked ones, canonical floats. False means "ask `_check_canonical`", which also words the refusal."""
    kind = type(value)
    if kind is str:
        return value.isascii() or _string_ok(value)
    if kind is float:
        return math.isfinite(value) and round(value, 4) == value and value != int(value)
    if kind is int or kind is bool or value is None:
        return True
    if depth >= MAX_DEPTH:
        return False
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not (key.isascii() or _string_ok(key)):
                return False
            if not _surely_canonical(item, depth + 1):
                return False
        return True
    if kind is list:
        for item in value:  # noqa: SIM110 (a loop: all() over a generator costs more, and this runs per record)
            if not _surely_canonical(item, depth + 1):
                return False
        return True
    return False


def _string_ok(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return unicodedata.is_normalized("NFC", value)


MAX_DEPTH = 32


def check_finite(value: Any, field: str = "$") -> None:
    """Refuse NaN and infinities anywhere in a JSON value (CanonicalError naming the first one's path).

    JSON has no spelling for them: encoders either fail or, like msgspec, silently write `null`.
    """
    level: list[tuple[str, Any]] = [(field, value)]
    while level:  # level by level, no recursion
        nxt: list[tuple[str, Any]] = []
        for path, item in level:
            if isinstance(item, float) and not math.isfinite(item):
                raise CanonicalError("NaN and infinities are not allowed", path)
            if isinstance(item, dict):
                nxt += [(f"{path}.{k}", v) for k, v in item.items()]
            elif isinstance(item, list | tuple):
                nxt += [(f"{path}[{i}]", v) for i, v in enumerate(item)]
        level = nxt


def nesting_depth(value: Any) -> int:
    """How deeply arrays and objects nest in a JSON value (level by level, no recursion: safe on hostile input)."""
    depth, level = 0, [value]
    while True:
        containers = [item for item in level if isinstance(item, dict | list)]
        if not containers:
            return depth
        depth += 1
        level = [child for item in containers for child in (item.values() if isinstance(item, dict) else item)]


def _check_string(value: str, field: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise CanonicalError("string holds a lone surrogate (not valid Unicode text)", field) from None
    if not unicodedata.is_normalized("NFC", value):
        raise CanonicalError("string is not NFC-normalised", field)


def canonical_bytes(value: Any) -> bytes:
    """Canonical JSON bytes of an already-normalised value: sorted keys, compact, ASCII escapes.

    The bytes are `json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"),
    allow_nan=False)`, the definition. For the values records hold (str-keyed objects, arrays, strings,
    64-bit ints, floats that `repr` writes without an exponent) msgspec writes the same bytes, ten times
    faster than json (about twice as fast as json counting the type walk that decides it may), so those go
    through it; anything else, and any output with a non-ASCII byte or DEL (msgspec writes them unescaped),
    is written by the definition itself. tests/identity checks the two agree on arbitrary values.
    """
    return _sorted_compact_json(value, allow_nan=False)


def canonical_bytes_within_depth(value: Any) -> bytes | None:
    """`canonical_bytes(value)`, or None when `value` nests deeper than MAX_DEPTH (`nesting_depth`): a record is
    walked once, since the walk that lets msgspec write its bytes stops at that depth; only a value it does not
    let through is measured apart (level by level, safe on hostile input) before the definition writes it."""
    out = _msgspec_bytes(value)  # not None only for values nesting at most MAX_DEPTH deep
    if out is not None:
        return out
    if nesting_depth(value) > MAX_DEPTH:
        return None
    return _definition(value, allow_nan=False)


def _sorted_compact_json(value: Any, *, allow_nan: bool) -> bytes:
    """`json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=...)` as UTF-8."""
    out = _msgspec_bytes(value)
    return _definition(value, allow_nan=allow_nan) if out is None else out


def _msgspec_bytes(value: Any) -> bytes | None:
    """msgspec's sorted JSON of `value` when it is byte for byte the definition's (`_msgspec_safe`, then ASCII
    output without DEL), else None."""
    if not _msgspec_safe(value, 0):
        return None
    try:
        out = _SORTED_JSON(value)
    except (msgspec.EncodeError, UnicodeEncodeError, OverflowError, TypeError):  # e.g. a lone surrogate
        return None
    return out if out.isascii() and b"\x7f" not in out else None


def _definition(value: Any, *, allow_nan: bool) -> bytes:
    text = json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=allow_nan)
    return text.encode("utf-8")


_SORTED_JSON = msgspec.json.Encoder(order="sorted").encode
_INT_BOUND = 2**63


def _msgspec_safe(value: Any, depth: int) -> bool:
    """True if msgspec's sorted JSON of `value` is byte for byte the `json.dumps` definition's (up to
    non-ASCII output, checked on the bytes): plain types only, str keys, ints within 64 bits, finite floats
    whose `repr` has no exponent (0 and 1e-4 <= |x| < 1e16), and shallow enough to walk."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return -_INT_BOUND <= value < _INT_BOUND
    if kind is float:
        magnitude = abs(value)
        return magnitude == 0.0 or 1e-4 <= magnitude < 1e16  # also False for NaN
    if depth >= MAX_DEPTH:
        return False
    if kind is dict:
        for key, item in value.items():  # noqa: SIM110 (as in _surely_canonical)
            if type(key) is not str or not _msgspec_safe(item, depth + 1):
                return False
        return True
    if kind is list or kind is tuple:
        for item in value:  # noqa: SIM110 (as in _surely_canonical)
            if not _msgspec_safe(item, depth + 1):
                return False
        return True
    return False


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of bytes."""
    return hashlib.sha256(data).hexdigest()
