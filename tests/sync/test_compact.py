"""sync.compact (decision 74): the binary items of a compact ids page (a version announced by its first 16 bytes) and
the seqs of a bodies request round-trip, and every malformed form an honest peer never sends is refused, naming its
field; a body's version is recomputed as the store computes it (an entry's from its bytes, any other kind's from its
address) and matched whole or by prefix."""

from __future__ import annotations

import base64
import hashlib

import pytest

from identity import keys, records
from identity.schema import MAX_RECORD_BYTES
from sync import compact
from sync import messages as m
from tests.sync.conftest import body_of, hash_of, signed_entry

V1, V2, V3 = "ab" * 32, "cd" * 32, "ef" * 32
P1, P2, P3 = (v[: compact.PREFIX_HEX] for v in (V1, V2, V3))
PREFIX = b"\xab" * compact.VERSION_BYTES


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_items_round_trip_delta_coded_after_since() -> None:
    items = [(101, V1, 470), (102, V2, 0), (100_000, V3, MAX_RECORD_BYTES)]
    packed = compact.pack_items(100, items)
    assert compact.unpack_items(packed, 100, 100_000, 3) == [(101, P1, 470), (102, P2, 0), (100_000, P3, 262_144)]
    # 1 byte of delta, 16 of version, 2 of size for the first item: 19 bytes where a JSON item took about 100
    assert len(base64.b64decode(compact.pack_items(100, items[:1]))) == 19 and len(P1) == 32
    assert compact.unpack_items("", 7, 7, 0) == []


def test_expand_gives_the_page_of_ids_and_sizes_the_json_form_gives() -> None:
    page = m.IdsPage(epoch="e1", head=9, next=5, more=True, items=compact.pack_items(2, [(3, V1, 10), (5, V2, 20)]))
    changes = compact.expand(page, "did:key:z6Mkpeer", 2, 10)
    assert (changes.node_id, changes.epoch, changes.head, changes.next, changes.more) == ("did:key:z6Mkpeer", "e1",
                                                                                          9, 5, True)  # fmt: skip
    assert [(i.seq, i.version, i.size, i.hash) for i in changes.items] == [(3, P1, 10, ""), (5, P2, 20, "")]
    unnamed = m.IdsPage(head=9, next=2)  # the epoch left out: the one the asker named
    assert compact.expand(unnamed, "did:key:z6Mkpeer", 2, 10, "e1").epoch == "e1"
    with pytest.raises(compact.CompactError, match="no epoch") as raised:
        compact.expand(unnamed, "did:key:z6Mkpeer", 2, 10)
    assert raised.value.field == "$.epoch"


def item(delta: int, version: bytes, size: int) -> bytes:
    out = bytearray()
    for value in (delta,):
        while value > 0x7F:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
    out += version
    while size > 0x7F:
        out.append((size & 0x7F) | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out)


@pytest.mark.parametrize(
    ("packed", "most", "why"),
    [
        ("not base64!", 10, "not standard base64"),
        ("QQ", 10, "not standard base64"),  # missing padding
        (b64(b"\x01" + b"\xab" * 15), 10, "truncated version"),
        (b64(b"\x80"), 10, "truncated number"),
        (b64(item(1, PREFIX, 5)[:-1] + b"\x85"), 10, "truncated number"),
        (b64(b"\xff" * 11), 10, "longer than 10 bytes"),
        (b64(item(0, PREFIX, 5)), 10, "delta of 0"),
        (b64(item(11, PREFIX, 5)), 10, "beyond the page's next cursor"),
        (b64(item(1, PREFIX, MAX_RECORD_BYTES + 1)), 10, "over the record limit"),
        (b64(item(1, PREFIX, 5) + item(1, b"\xcd" * 16, 5)), 1, "more than 1 items"),
        (b64(b"\xff" * 9 + b"\x7f"), 10, r"over 2\^63 - 1"),
    ],
)
def test_a_malformed_page_is_refused_naming_items(packed: str, most: int, why: str) -> None:
    with pytest.raises(compact.CompactError, match=why) as raised:
        compact.unpack_items(packed, 0, 10, most)
    assert raised.value.field == "$.items"


def test_seqs_round_trip_from_zero() -> None:
    seqs = [1, 2, 130, 2**40, 2**63 - 1]
    assert compact.unpack_seqs(compact.pack_seqs(seqs)) == seqs
    assert len(base64.b64decode(compact.pack_seqs([5, 6, 7]))) == 3  # a byte a record, where a version took 67


@pytest.mark.parametrize(
    ("packed", "why"),
    [
        ("%%%", "not standard base64"),
        ("", "no seqs"),
        (b64(b"\x05\x00"), "delta of 0"),
        (b64(b"\x05\x80"), "truncated number"),
        (b64(b"\x01" * (m.MAX_FETCH_HASHES + 1)), f"more than {m.MAX_FETCH_HASHES} seqs"),
        (b64(b"\xff" * 9 + b"\x7f"), r"number at byte 0 is over 2\^63 - 1"),
        (b64(b"\xff" * 8 + b"\x7f" + b"\x01"), r"seq 1 is over 2\^63 - 1"),  # each delta fits, their sum does not
    ],
)
def test_a_malformed_bodies_request_is_refused_naming_seqs(packed: str, why: str) -> None:
    with pytest.raises(compact.CompactError, match=why) as raised:
        compact.unpack_seqs(packed)
    assert raised.value.field == "$.seqs"


def test_a_bodys_version_is_recomputed_only_when_asked() -> None:
    key = keys.SigningKey.generate()
    entry = body_of(signed_entry(key, "a note"))
    version = hashlib.sha256(entry).hexdigest()
    assert compact.asked_version(entry, {version}) == version
    assert compact.asked_version(entry, {version[: compact.PREFIX_HEX]}) == version  # by prefix: the whole version
    assert compact.asked_version(entry, set()) is None
    assert compact.asked_version(entry, {hash_of(signed_entry(key, "a note"))}) is None  # an entry: never its address
    document = {"kind": "agent", "agent_id": key.did, "display_name": "a", "signature": "s"}
    raw = body_of(document)
    assert hash_of(document) == records.compute_hash(document) != hashlib.sha256(raw).hexdigest()
    assert compact.asked_version(raw, {hash_of(document)}) == hash_of(document)  # another kind: its address
    assert compact.asked_version(raw, {hash_of(document)[:32]}) == hash_of(document)
    assert compact.asked_version(raw, {V1}) is None
    assert compact.asked_version(b"{not json", {V1}) is None
    assert compact.asked_version(b"[1]", {V1}) is None
