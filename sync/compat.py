"""What a node may serve a peer of an older sync protocol version (docs/format-v3.md, section 8.2).

`v2_compatible` is the one function that decides it, and every serving path asks it through `servable`: the
changes feed (skipped records: its `next` moves past them), fetch (answered `missing`), the responder's and the
initiator's reconciliation sets and `GET /v1/sync/digest?v=2` (node/federation/store.py, sync/memory.py).
tests/sync/test_compat.py lists the paths.

A record is v2-compatible when a node of the last v2 release can verify and store it unchanged: of a v1 kind,
`schema_version` "v1", with no `signing_key` and no `space`, and accepted by that release's schemas, kept frozen in
`identity.schema_v2`. "Valid" (not waiting, not void, not redacted) is the caller's: a store serves only the
valid federated versions of its log to any peer.
"""

from __future__ import annotations

from typing import Any

import msgspec

from identity import schema_v2
from sync.messages import PROTOCOL_VERSION, SYNC_VERSIONS

V1_KINDS = frozenset(schema_v2.RECORD_TYPES)
MEMO_LIMIT = 1_000_000  # versions remembered (about 200 bytes each); the memo starts again when full

# version -> v2-compatible. A version names its bytes (an entry's is their SHA-256, every other kind's is its
# address, which covers all it says), so the answer for a version never changes.
_memo: dict[str, bool] = {}


def v2_compatible_record(record: dict[str, Any]) -> bool:
    """True when a node of sync protocol v2 verifies and stores `record` (decoded JSON) unchanged."""
    return (
        record.get("kind") in V1_KINDS
        and record.get("schema_version") == "v1"
        and "signing_key" not in record
        and "space" not in record
        and schema_v2.accepts(record)
    )


def v2_compatible(version: str, body: bytes) -> bool:
    """`v2_compatible_record` of a stored version's canonical bytes, remembered by version."""
    known = _memo.get(version)
    if known is None:
        try:
            record = msgspec.json.decode(body)
        except msgspec.DecodeError:
            record = None
        known = isinstance(record, dict) and v2_compatible_record(record)
        if len(_memo) >= MEMO_LIMIT:
            _memo.clear()
        _memo[version] = known
    return known


def decided(version: str) -> bool | None:
    """What `v2_compatible` answered for `version`, if it was asked (a caller then need not read the bytes)."""
    return _memo.get(version)


def servable(v: int, version: str, body: bytes) -> bool:
    """May a stored (valid, federated) version be served to a peer speaking protocol `v`? Every version at this
    node's own protocol version; only the v2-compatible ones at v2."""
    if v == PROTOCOL_VERSION:
        return True
    if v not in SYNC_VERSIONS:
        raise ValueError(f"sync protocol v{v} is not spoken here")
    return v2_compatible(version, body)
