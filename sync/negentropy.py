"""Range-based set reconciliation: a port of negentropy protocol V1 (NIP-77, version byte 0x61).

Items are (timestamp, 32-byte id) pairs sorted by timestamp then id; ours are (created_ms, record hash).
The initiator sends fingerprints of ranges; the responder answers matching ranges with Skip, splits
mismatching ones into 16 buckets, and lists ids once a range is small. The initiator learns `have`
(ids only it holds) and `need` (ids only the responder holds). Messages are byte-compatible with the
reference implementations; a test compares them with nostr-tools' `nip77` under Node.js.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

PROTOCOL_VERSION = 0x61
ID_SIZE = 32
FINGERPRINT_SIZE = 16
BUCKETS = 16
MAX_TIMESTAMP = 2**64  # "infinity": encoded as 0, greater than every real timestamp
MODE_SKIP, MODE_FINGERPRINT, MODE_IDLIST = 0, 1, 2


class NegentropyError(ValueError):
    """A message could not be parsed or is not protocol V1."""


def encode_varint(n: int) -> bytes:
    """Base-128 big-endian varint with the continuation bit on every byte but the last."""
    if n < 0:  # would never end: a right shift of a negative number never reaches 0
        raise ValueError(f"a varint is never negative (got {n})")
    if n == 0:
        return b"\x00"
    out = []
    while n:
        out.append(n & 0x7F)
        n >>= 7
    out.reverse()
    return bytes([b | 0x80 for b in out[:-1]] + [out[-1]])


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def done(self) -> bool:
        return self.pos >= len(self.data)

    def byte(self) -> int:
        return self.take(1)[0]

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise NegentropyError("parse ends prematurely")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def varint(self) -> int:
        result = 0
        while True:
            b = self.byte()
            result = (result << 7) | (b & 0x7F)
            if not b & 0x80:
                return result
            if result > MAX_TIMESTAMP:
                raise NegentropyError("varint too large")


@dataclass(frozen=True, order=True)
class Bound:
    """A range boundary: a timestamp and an id prefix (possibly empty)."""

    timestamp: int
    id: bytes = b""


class VectorStorage:
    """Sorted in-memory items with range fingerprints (the reference `NegentropyStorageVector`)."""

    def __init__(self, items: Iterable[tuple[int, bytes]] = ()) -> None:
        self._items: list[tuple[int, bytes]] = sorted(items)
        for i in range(1, len(self._items)):
            if self._items[i - 1] == self._items[i]:
                raise NegentropyError("duplicate item")
        for _, item_id in self._items:
            if len(item_id) != ID_SIZE:
                raise NegentropyError("bad id size")
        self._prefix: list[int] | None = None

    def size(self) -> int:
        return len(self._items)

    def item(self, i: int) -> tuple[int, bytes]:
        return self._items[i]

    def ids(self, begin: int, end: int) -> list[bytes]:
        return [item_id for _, item_id in self._items[begin:end]]

    def lower_bound(self, begin: int, end: int, bound: Bound) -> int:
        """First index in [begin, end) whose item is not below `bound`."""
        return bisect.bisect_left(self._items, (bound.timestamp, bound.id), begin, end)

    def fingerprint(self, begin: int, end: int) -> bytes:
        """SHA-256 of (sum of ids as little-endian 256-bit integers, mod 2^256) + varint(count), first 16 bytes."""
        if self._prefix is None:  # prefix sums make every range fingerprint O(1)
            total, prefix = 0, [0]
            for _, item_id in self._items:
                total += int.from_bytes(item_id, "little")
                prefix.append(total)
            self._prefix = prefix
        acc = (self._prefix[end] - self._prefix[begin]) % (1 << 256)
        return hashlib.sha256(acc.to_bytes(32, "little") + encode_varint(end - begin)).digest()[:FINGERPRINT_SIZE]


@dataclass
class Negentropy:
    """One side of a reconciliation over `storage`. Call `initiate` on the initiator, `reconcile` on both."""

    storage: VectorStorage
    frame_size_limit: int = 60_000
    is_initiator: bool = False
    _last_in: int = field(default=0, repr=False)
    _last_out: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if self.frame_size_limit and self.frame_size_limit < 4096:
            raise ValueError("frame_size_limit too small")

    def initiate(self) -> bytes:
        """The initiator's first message."""
        self.is_initiator = True
        self._last_out = 0
        out = bytearray([PROTOCOL_VERSION])
        self._split_range(0, self.storage.size(), Bound(MAX_TIMESTAMP), out)
        return bytes(out)

    def reconcile(self, query: bytes, have: list[bytes] | None = None, need: list[bytes] | None = None) -> bytes | None:
        """Answer `query`. The initiator collects `have`/`need` and gets None when reconciliation is complete."""
        reader = _Reader(query)
        self._last_in = self._last_out = 0
        full = bytearray([PROTOCOL_VERSION])
        version = reader.byte()
        if version < 0x60 or version > 0x6F:
            raise NegentropyError("invalid negentropy protocol version byte")
        if version != PROTOCOL_VERSION:
            if self.is_initiator:
                raise NegentropyError(f"unsupported negentropy protocol version requested: {version - 0x60}")
            return bytes(full)  # the responder answers with the version it speaks
        size = self.storage.size()
        prev_bound, prev_index, skip = Bound(0), 0, False
        while not reader.done():
            o = bytearray()
            curr_bound = self._decode_bound(reader)
            mode = reader.varint()
            lower = prev_index
            upper = self.storage.lower_bound(prev_index, size, curr_bound)
            if mode == MODE_SKIP:
                skip = True
            elif mode == MODE_FINGERPRINT:
                theirs = reader.take(FINGERPRINT_SIZE)
                if theirs != self.storage.fingerprint(lower, upper):
                    skip = self._flush_skip(skip, prev_bound, o)
                    self._split_range(lower, upper, curr_bound, o)
                else:
                    skip = True
            elif mode == MODE_IDLIST:
                count = reader.varint()
                their_ids = {reader.take(ID_SIZE) for _ in range(count)}
                if self.is_initiator:
                    skip = True
                    self._compare_ids(lower, upper, their_ids, have, need)
                else:
                    skip = self._flush_skip(skip, prev_bound, o)
                    upper = self._send_ids(lower, upper, curr_bound, full, o)
            else:
                raise NegentropyError("unexpected mode")
            if self._exceeded(len(full) + len(o)):
                # Frame full: say the rest of our range is whatever this fingerprint covers.
                remaining = self.storage.fingerprint(upper, size)
                full.extend(self._encode_bound(Bound(MAX_TIMESTAMP)))
                full.extend(encode_varint(MODE_FINGERPRINT))
                full.extend(remaining)
                break
            full.extend(o)
            prev_index, prev_bound = upper, curr_bound
        if self.is_initiator and len(full) == 1:
            return None
        return bytes(full)

    def _compare_ids(
        self, lower: int, upper: int, their_ids: set[bytes], have: list[bytes] | None, need: list[bytes] | None
    ) -> None:
        """Initiator, an IdList received: our ids of [lower, upper) they lack go to `have`, theirs we lack to `need`."""
        for item_id in self.storage.ids(lower, upper):
            if item_id in their_ids:
                their_ids.discard(item_id)
            elif have is not None:
                have.append(item_id)
        if need is not None:
            need.extend(sorted(their_ids))

    def _send_ids(self, lower: int, upper: int, curr_bound: Bound, full: bytearray, o: bytearray) -> int:
        """Responder, an IdList received: append `o` and our ids of [lower, upper) as an IdList to `full`, as many as
        the frame holds (the list's bound then ends before the first left out). Returns where the list ended."""
        response, end_bound = bytearray(), curr_bound
        n = 0
        for index in range(lower, upper):
            if self._exceeded(len(full) + len(response)):
                ts, item_id = self.storage.item(index)
                end_bound, upper = Bound(ts, item_id), index
                break
            response.extend(self.storage.item(index)[1])
            n += 1
        o.extend(self._encode_bound(end_bound))
        o.extend(encode_varint(MODE_IDLIST))
        o.extend(encode_varint(n))
        o.extend(response)
        full.extend(o)
        o.clear()
        return upper

    def _flush_skip(self, skip: bool, prev_bound: Bound, o: bytearray) -> bool:
        """Emit a pending Skip range ending at `prev_bound`; returns the new (cleared) skip flag."""
        if skip:
            o.extend(self._encode_bound(prev_bound))
            o.extend(encode_varint(MODE_SKIP))
        return False

    def _split_range(self, lower: int, upper: int, upper_bound: Bound, o: bytearray) -> None:
        n = upper - lower
        if n < BUCKETS * 2:
            o.extend(self._encode_bound(upper_bound))
            o.extend(encode_varint(MODE_IDLIST))
            o.extend(encode_varint(n))
            for item_id in self.storage.ids(lower, upper):
                o.extend(item_id)
            return
        per_bucket, extra = divmod(n, BUCKETS)
        curr = lower
        for i in range(BUCKETS):
            size = per_bucket + (1 if i < extra else 0)
            fp = self.storage.fingerprint(curr, curr + size)
            curr += size
            if curr == upper:
                next_bound = upper_bound
            else:
                next_bound = _minimal_bound(self.storage.item(curr - 1), self.storage.item(curr))
            o.extend(self._encode_bound(next_bound))
            o.extend(encode_varint(MODE_FINGERPRINT))
            o.extend(fp)

    def _exceeded(self, n: int) -> bool:
        return bool(self.frame_size_limit) and n > self.frame_size_limit - 200

    def _decode_bound(self, reader: _Reader) -> Bound:
        raw = reader.varint()
        if raw == 0 or self._last_in == MAX_TIMESTAMP:
            timestamp = MAX_TIMESTAMP
        else:
            timestamp = self._last_in + raw - 1
            if timestamp >= MAX_TIMESTAMP:
                raise NegentropyError("timestamp out of range")
        self._last_in = timestamp
        length = reader.varint()
        if length > ID_SIZE:
            raise NegentropyError("bound key too long")
        return Bound(timestamp, reader.take(length))

    def _encode_bound(self, bound: Bound) -> bytes:
        if bound.timestamp == MAX_TIMESTAMP:
            self._last_out = MAX_TIMESTAMP
            ts = encode_varint(0)
        else:
            ts = encode_varint(bound.timestamp - self._last_out + 1)
            self._last_out = bound.timestamp
        return ts + encode_varint(len(bound.id)) + bound.id


def _minimal_bound(prev: tuple[int, bytes], curr: tuple[int, bytes]) -> Bound:
    """The shortest bound that separates `prev` from `curr`."""
    if curr[0] != prev[0]:
        return Bound(curr[0])
    shared = 0
    for a, b in zip(curr[1], prev[1], strict=True):
        if a != b:
            break
        shared += 1
    return Bound(curr[0], curr[1][: shared + 1])
