"""sync.messages: the protocol's wire messages. Tagged Structs that carry the version `v`, refuse unknown fields,
keep records as the exact bytes received, and bound what a peer may ask (page size, wait, hashes, message size)."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
import pytest

from identity import keys
from sync import messages as m
from tests.sync.conftest import body_of, hash_of, signed_entry

AUTHOR = keys.SigningKey.generate()
NODE_ID = keys.SigningKey.generate().did
HASH = "ab" * 32


def version_of(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def encode(value: Any) -> bytes:
    return msgspec.json.encode(value)


def test_changes_round_trip_with_records_as_raw_bytes() -> None:
    record = signed_entry(AUTHOR, "hello")
    body = body_of(record)
    page = m.Changes(
        node_id=NODE_ID,
        epoch="ab12",
        head=3,
        next=3,
        more=False,
        items=[m.ChangeItem(seq=3, hash=hash_of(record), version=version_of(body), record=msgspec.Raw(body))],
    )
    wire = encode(page)
    fields = msgspec.json.decode(wire)
    assert (fields["type"], fields["v"]) == ("changes", m.PROTOCOL_VERSION)
    decoded = m.CHANGES_DECODER.decode(wire)
    assert isinstance(decoded, m.Changes)
    assert decoded.items[0].body() == body  # byte for byte what was signed
    assert (decoded.items[0].hash, decoded.items[0].version) == (hash_of(record), version_of(body))
    assert (decoded.node_id, decoded.epoch, decoded.head, decoded.next, decoded.more) == (NODE_ID, "ab12", 3, 3, False)


def test_the_changes_decoder_tells_a_page_from_a_reset() -> None:
    reset = m.Reset(node_id=NODE_ID, epoch="ff", head=9, reason="epoch_changed")
    decoded = m.CHANGES_DECODER.decode(encode(reset))
    assert isinstance(decoded, m.Reset) and decoded == reset
    with pytest.raises(msgspec.ValidationError):
        m.CHANGES_DECODER.decode(encode({**msgspec.to_builtins(reset), "reason": "bored"}))


def test_a_compact_page_and_the_bodies_messages_leave_out_their_defaults() -> None:
    """Decision 74: an empty compact page is its type, epoch, head and next; `v` (when 3), `more` (when false) and
    `items` (when empty) are left out and read back as their defaults; v2 and `more` are written when they hold."""
    empty = m.IdsPage(epoch="ab12", head=7, next=7)
    assert encode(empty) == b'{"type":"ids","epoch":"ab12","head":7,"next":7}'
    assert m.CHANGES_DECODER.decode(encode(empty)) == empty
    full = m.IdsPage(v=2, epoch="ab12", head=9, next=8, more=True, items="AQ==")
    assert msgspec.json.decode(encode(full))["v"] == 2 and m.CHANGES_DECODER.decode(encode(full)) == full
    assert encode(m.BodiesRequest(seqs="AQ==")) == b'{"type":"bodies_request","seqs":"AQ=="}'
    body = body_of(signed_entry(AUTHOR, "alone"))
    bodies = m.BODIES_DECODER.decode(encode(m.Bodies(records=[msgspec.Raw(body)])))
    assert [bytes(r) for r in bodies.records] == [body] and bodies.v == m.PROTOCOL_VERSION
    with pytest.raises(msgspec.ValidationError, match="node_id"):  # a compact page names no node: nor may it
        m.CHANGES_DECODER.decode(b'{"type":"ids","node_id":"x","epoch":"ab","head":1,"next":1}')


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type":"changes","v":1}',  # required fields missing
        b'{"type":"nonsense","v":1}',  # unknown tag
        b'{"node_id":"x","epoch":"e","head":1,"next":1,"more":false,"items":[]}',  # no tag
        b'{"type":"changes","v":0,"node_id":"x","epoch":"e","head":1,"next":1,"more":false,"items":[]}',  # version
        b'{"type":"changes","v":2,"node_id":"x","epoch":"e","head":1,"next":1,"more":false,'
        b'"items":[{"seq":1,"hash":"h","record":{}}]}',  # a v1 item: no version
        b'{"type":"changes","v":1,"node_id":"x","epoch":"e","head":1,"next":1,"more":false,"items":[],"extra":1}',
        b'{"type":"changes","v":1,"node_id":"x","epoch":"e","head":1,"next":1,"more":false,'
        b'"items":[{"seq":1,"hash":"h","version":"v","record":{},"extra":true}]}',  # unknown field in an item
        b'{"type":"records","v":1,"node_id":"x","items":[],"missing":[]}',  # another reply's type
        b"[]",
        b"not json",
    ],
)
def test_malformed_changes_replies_do_not_decode(raw: bytes) -> None:
    with pytest.raises(msgspec.DecodeError):
        m.CHANGES_DECODER.decode(raw)


@pytest.mark.parametrize("field", ["head", "next"])
@pytest.mark.parametrize("value", [-1, 2**63, 2**64, -(2**63)])
def test_positions_outside_a_log_do_not_decode(field: str, value: int) -> None:
    page = {"type": "changes", "node_id": "x", "epoch": "e", "head": 1, "next": 1, "more": False, "items": []}
    with pytest.raises(msgspec.ValidationError, match=f"at `\\$.{field}`"):
        m.CHANGES_DECODER.decode(encode({**page, field: value}))
    reply = {"type": "reconcile_reply", "node_id": "x", "epoch": "e", "head": value, "message": None}
    with pytest.raises(msgspec.ValidationError, match=r"at `\$.head`"):
        m.RECONCILE_DECODER.decode(encode(reply))


def test_a_missing_version_means_the_current_one() -> None:
    decoded = m.RECORDS_DECODER.decode(b'{"type":"records","node_id":"x","items":[],"missing":["a"]}')
    assert decoded.v == m.PROTOCOL_VERSION == 3 and decoded.missing == ["a"]


def test_another_version_decodes_so_that_it_can_be_named() -> None:
    """A v1 message decodes (its `v` is then refused by name: node/federation/routes.py, sync/client.py); a changes
    query without `v` is a v1 peer's."""
    assert m.RECORDS_DECODER.decode(b'{"type":"records","v":1,"node_id":"x","items":[],"missing":[]}').v == 1
    assert msgspec.convert({}, m.ChangesQuery).v == 1
    assert msgspec.convert({"v": "2"}, m.ChangesQuery, strict=False).v == 2


def test_changes_query_defaults_and_bounds() -> None:
    q = msgspec.convert({}, m.ChangesQuery)
    assert (q.since, q.epoch, q.limit, q.wait_ms, q.v) == (0, None, m.DEFAULT_CHANGES_LIMIT, 0, 1)  # v1: no `v`
    ok = msgspec.convert(
        {"since": "5", "epoch": "0a", "limit": str(m.MAX_CHANGES_LIMIT), "wait_ms": str(m.MAX_WAIT_MS)},
        m.ChangesQuery,
        strict=False,
    )  # a query string's values are text
    assert (ok.since, ok.epoch, ok.limit, ok.wait_ms) == (5, "0a", m.MAX_CHANGES_LIMIT, m.MAX_WAIT_MS)
    assert msgspec.convert({"since": 2**63 - 1}, m.ChangesQuery).since == 2**63 - 1
    for bad in (
        {"since": -1},
        {"since": 2**63},
        {"limit": 0},
        {"limit": m.MAX_CHANGES_LIMIT + 1},
        {"wait_ms": -1},
        {"wait_ms": m.MAX_WAIT_MS + 1},
        {"epoch": "XYZ"},
        {"epoch": ""},
        {"epoch": "a" * 65},
        {"epoch": "ab\n"},  # the pattern matches the whole string
        {"v": 0},
        {"cursor": 1},
    ):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(bad, m.ChangesQuery)


def test_fetch_request_bounds_its_hashes() -> None:
    request = m.FetchRequest(hashes=[HASH])
    assert msgspec.json.decode(encode(request)) == {"type": "fetch", "v": 3, "hashes": [HASH]}
    assert msgspec.json.decode(encode(request), type=m.FetchRequest) == request
    most = {"type": "fetch", "hashes": [f"{i:064x}" for i in range(m.MAX_FETCH_HASHES)]}
    assert len(msgspec.convert(most, m.FetchRequest).hashes) == m.MAX_FETCH_HASHES
    for hashes in ([], [f"{i:064x}" for i in range(m.MAX_FETCH_HASHES + 1)], ["AB" * 32], ["ab" * 31], [HASH + "\n"]):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({"type": "fetch", "hashes": hashes}, m.FetchRequest)


def test_records_reply_decodes_raw_items() -> None:
    record = signed_entry(AUTHOR, "by hash")
    reply = m.Records(
        node_id=NODE_ID,
        items=[m.RecordItem(hash_of(record), version_of(body_of(record)), msgspec.Raw(body_of(record)))],
        missing=[HASH],
    )
    decoded = m.RECORDS_DECODER.decode(encode(reply))
    assert bytes(decoded.items[0].record) == body_of(record) and decoded.missing == [HASH]
    assert decoded.items[0].version == version_of(body_of(record))
    with pytest.raises(msgspec.ValidationError):
        m.RECORDS_DECODER.decode(
            b'{"type":"records","v":2,"node_id":"x","items":[{"hash":"h","record":{}}],"missing":[]}'
        )


def test_reconcile_request_takes_bounded_lowercase_hex() -> None:
    assert msgspec.convert({"type": "reconcile", "message": "61ff"}, m.ReconcileRequest).message == "61ff"
    longest = "ab" * (m.MAX_RECONCILE_HEX // 2)
    assert msgspec.convert({"type": "reconcile", "message": longest}, m.ReconcileRequest).message == longest
    for bad in ("", "a", "abc", "AB", "zz", "ab\n", longest + "ab"):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({"type": "reconcile", "message": bad}, m.ReconcileRequest)


def test_reconcile_reply_may_have_nothing_more_to_say() -> None:
    done = m.RECONCILE_DECODER.decode(
        b'{"type":"reconcile_reply","v":1,"node_id":"x","epoch":"e","head":0,"message":null}'
    )
    assert done.message is None
    with pytest.raises(msgspec.ValidationError):  # the field is required, even when it is null
        m.RECONCILE_DECODER.decode(b'{"type":"reconcile_reply","v":1,"node_id":"x","epoch":"e","head":0}')


def test_peer_in_takes_an_origin_url_and_a_did() -> None:
    for url in ("http://127.0.0.1:8080", "https://bbs.example.org/", "http://node-b:80"):
        assert msgspec.convert({"url": url, "node_id": NODE_ID}, m.PeerIn).url == url
    for url in ("ftp://example.org", "http://example.org/path", "http://example.org?x=1", "http://a b", "http://"):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({"url": url, "node_id": NODE_ID}, m.PeerIn)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"url": "http://" + "a" * 600, "node_id": NODE_ID}, m.PeerIn)
    for node_id in ("did:key:nope", NODE_ID + "\n", ""):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({"url": "http://x:1", "node_id": node_id}, m.PeerIn)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"url": "http://x:1", "node_id": NODE_ID, "extra": 1}, m.PeerIn)


def test_peer_status_counters_start_at_zero() -> None:
    counters = m.PeerCounters()
    assert msgspec.to_builtins(counters) == {
        "saved": 0,
        "duplicate": 0,
        "invalid": 0,
        "pending_link": 0,
        "overflow": 0,
        "internal": 0,
        "waiting": 0,
        "dropped_waiting": 0,
        "void": 0,
        "too_new": 0,
        "invalid_reasons": {},
    }
    other = m.PeerCounters()
    counters.invalid_reasons["bad_signature"] = 1
    assert other.invalid_reasons == {}  # each its own dict


def test_digest_encodes_with_its_tag() -> None:
    digest = m.Digest(node_id=NODE_ID, count=0, sha256="e3" * 32)
    assert msgspec.json.decode(encode(digest))["type"] == "digest"
    assert msgspec.json.decode(encode(digest), type=m.Digest) == digest
