"""Compact ids pages and fetches by seq (docs/decisions.md record 74; docs/sync.md, "Compact ids pages"): the
binary forms inside `m.IdsPage.items` and `m.BodiesRequest.seqs`, standard base64 in the JSON.

An ids page's item is the LEB128 of its seq minus the previous item's (the first: minus the asked `since`), the
first 16 bytes of its version (`PREFIX_HEX` hex digits: the receiver looks up what it holds by prefix,
`SyncStore.refused_prefixes`, and checks each fetched body's whole version against it) and the LEB128 of its body's
size: about 19 bytes, 26 as base64, where a JSON item took about 100.
A bodies request is the LEB128 of each seq minus the previous one (the first: minus 0): one to three bytes a record
where a version took 67. Every decoder here refuses what an honest peer never sends (bad base64, a truncated item,
a zero or too large delta, a seq beyond the page, a size over the record limit, more items than allowed) with a
`CompactError` naming the field; nothing is guessed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Set

import msgspec

from identity import canonical, records
from identity.schema import MAX_RECORD_BYTES
from sync import messages as m

VERSION_BYTES = 16  # of a version, in an ids page's item: a prefix (decision 74 says why it is safe)
PREFIX_HEX = 2 * VERSION_BYTES
MAX_SEQ = 2**63 - 1
_VARINT_BYTES = 10  # the most an unsigned 64-bit LEB128 takes


class CompactError(ValueError):
    """A compact page or request that cannot be read: `field` names where (`$.items`, `$.seqs`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _varint(value: int, out: bytearray) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_varint(data: bytes, at: int, field: str) -> tuple[int, int]:
    """The LEB128 number at `data[at:]` and the offset after it."""
    value = shift = 0
    for n in range(_VARINT_BYTES):
        if at + n >= len(data):
            raise CompactError(field, f"truncated number at byte {at}")
        byte = data[at + n]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if value > MAX_SEQ:
                raise CompactError(field, f"number at byte {at} is over 2^63 - 1")
            return value, at + n + 1
        shift += 7
    raise CompactError(field, f"number at byte {at} is longer than {_VARINT_BYTES} bytes")


def _decode64(packed: str, field: str) -> bytes:
    try:
        return base64.b64decode(packed, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CompactError(field, f"not standard base64: {exc}") from None


def pack_items(since: int, items: Iterable[tuple[int, str, int]]) -> str:
    """The `items` of an ids page: (seq, version in hex, body size) in increasing seq after `since`; each version
    is announced by its first `VERSION_BYTES` bytes."""
    out = bytearray()
    previous = since
    for seq, version, size in items:
        _varint(seq - previous, out)
        out += bytes.fromhex(version[:PREFIX_HEX])
        _varint(size, out)
        previous = seq
    return base64.b64encode(bytes(out)).decode("ascii")


def unpack_items(packed: str, since: int, last: int, most: int) -> list[tuple[int, str, int]]:
    """The items of an ids page asked after `since` whose cursor is `last`: each seq in (since, last] and above the
    one before, each size at most a record's limit, at most `most` items. Raises CompactError (`$.items`)."""
    field = "$.items"
    data = _decode64(packed, field)
    items: list[tuple[int, str, int]] = []
    at, seq = 0, since
    while at < len(data):
        if len(items) >= most:
            raise CompactError(field, f"more than {most} items")
        delta, at = _read_varint(data, at, field)
        if delta == 0:
            raise CompactError(field, f"item {len(items)}: a seq delta of 0 (seqs increase)")
        seq += delta
        if seq > last:
            raise CompactError(field, f"item {len(items)}: seq {seq} is beyond the page's next cursor {last}")
        if at + VERSION_BYTES > len(data):
            raise CompactError(field, f"item {len(items)}: truncated version")
        version = data[at : at + VERSION_BYTES].hex()
        size, at = _read_varint(data, at + VERSION_BYTES, field)
        if size > MAX_RECORD_BYTES:
            raise CompactError(field, f"item {len(items)}: size {size} is over the record limit {MAX_RECORD_BYTES}")
        items.append((seq, version, size))
    return items


def expand(page: m.IdsPage, node_id: str, since: int, limit: int, epoch: str | None = None) -> m.Changes:
    """The `Changes` an ids page of `node_id` asked after `since` with `epoch` stands for (items with seq, version
    and size; no body, no address), read as `unpack_items` reads it; a page that leaves out its epoch is of the
    asked one. Raises CompactError."""
    if not (page.epoch or epoch):
        raise CompactError("$.epoch", "no epoch, and none was asked with")
    items = unpack_items(page.items, since, page.next, limit)
    return m.Changes(
        v=page.v,
        node_id=node_id,
        epoch=page.epoch or str(epoch),
        head=page.head,
        next=page.next,
        more=page.more,
        items=[m.ChangeItem(seq=seq, version=version, size=size) for seq, version, size in items],
    )


def pack_seqs(seqs: list[int]) -> str:
    """The `seqs` of a bodies request: `seqs` in increasing order, each delta-coded."""
    out = bytearray()
    previous = 0
    for seq in seqs:
        _varint(seq - previous, out)
        previous = seq
    return base64.b64encode(bytes(out)).decode("ascii")


def unpack_seqs(packed: str, most: int = m.MAX_FETCH_HASHES) -> list[int]:
    """The seqs of a bodies request: increasing, each at most 2^63 - 1, at least one and at most `most`. Raises
    CompactError (`$.seqs`)."""
    field = "$.seqs"
    data = _decode64(packed, field)
    seqs: list[int] = []
    at = seq = 0
    while at < len(data):
        if len(seqs) >= most:
            raise CompactError(field, f"more than {most} seqs")
        delta, at = _read_varint(data, at, field)
        if delta == 0:
            raise CompactError(field, f"seq {len(seqs)}: a delta of 0 (seqs increase)")
        seq += delta
        if seq > MAX_SEQ:
            raise CompactError(field, f"seq {len(seqs)} is over 2^63 - 1")
        seqs.append(seq)
    if not seqs:
        raise CompactError(field, "no seqs")
    return seqs


def asked_version(body: bytes, asked: Set[str]) -> str | None:
    """The version of `body` when it, or its prefix as long as the items of `asked` (whole versions or prefixes of
    one length), is one of `asked`, else None. An entry's version is the SHA-256 of its body; every other kind's is
    its address (`sync.store.Verified.version`), computed only when the digest is not asked."""
    if not asked:
        return None
    width = len(next(iter(asked)))
    digest = hashlib.sha256(body).hexdigest()
    if digest[:width] in asked:
        return digest
    try:
        record = msgspec.json.decode(body)
        if not isinstance(record, dict) or record.get("kind") == "entry":
            return None
        address = records.compute_hash(record)
    except (msgspec.DecodeError, RecursionError, canonical.CanonicalError, KeyError, TypeError, ValueError):
        return None
    return address if address[:width] in asked else None
