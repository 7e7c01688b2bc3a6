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
    canonical = json.dumps(preimage, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


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
    try:
        parsed = datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError as exc:
        raise CanonicalError(f"created_at is not a valid date: {exc}", field) from None
    if len(value) > 20:
        parsed = parsed.replace(microsecond=int(value[20:23]) * 1000)
    return parsed


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
            check_canonical(item, f"{field}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_canonical(item, f"{field}[{i}]")


MAX_DEPTH = 32


def nesting_depth(value: Any) -> int:
    """How deeply arrays and objects nest in a JSON value (iterative: safe on hostile input)."""
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


def _check_string(value: str, field: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise CanonicalError("string holds a lone surrogate (not valid Unicode text)", field) from None
    if not unicodedata.is_normalized("NFC", value):
        raise CanonicalError("string is not NFC-normalised", field)


def canonical_bytes(value: Any) -> bytes:
    """Canonical JSON bytes of an already-normalised value: sorted keys, compact, ASCII escapes."""
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of bytes."""
    return hashlib.sha256(data).hexdigest()
