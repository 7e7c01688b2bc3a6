"""The negentropy port: random set splits reconcile exactly; cost grows with the difference, not the set."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.negentropy import Negentropy, NegentropyError, VectorStorage, encode_varint


def item(i: int, ts_range: int) -> tuple[int, bytes]:
    h = hashlib.sha256(str(i).encode()).digest()
    return (int.from_bytes(h[:4], "big") % ts_range + 1_700_000_000_000, h)


def run(
    client: list[tuple[int, bytes]], server: list[tuple[int, bytes]], frame: int = 60_000
) -> tuple[set[bytes], set[bytes], int, int]:
    """Reconcile two sets; return (have, need, rounds, bytes both ways)."""
    a = Negentropy(VectorStorage(client), frame_size_limit=frame)
    b = Negentropy(VectorStorage(server), frame_size_limit=frame)
    have: list[bytes] = []
    need: list[bytes] = []
    msg: bytes | None = a.initiate()
    rounds = size = 0
    while msg is not None:
        assert len(msg) <= frame
        reply = b.reconcile(msg)
        assert reply is not None and len(reply) <= frame
        size += len(msg) + len(reply)
        rounds += 1
        msg = a.reconcile(reply, have, need)
    return set(have), set(need), rounds, size


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 400),
    ts_range=st.sampled_from([1, 5, 1000, 10**9]),
    split=st.lists(st.sampled_from(["both", "client", "server"]), min_size=400, max_size=400),
)
def test_random_splits_reconcile_exactly(n: int, ts_range: int, split: list[str]) -> None:
    items = [item(i, ts_range) for i in range(n)]
    client = [it for it, where in zip(items, split, strict=False) if where in ("both", "client")]
    server = [it for it, where in zip(items, split, strict=False) if where in ("both", "server")]
    have, need, _rounds, _size = run(client, server)
    assert have == {i for _, i in client} - {i for _, i in server}
    assert need == {i for _, i in server} - {i for _, i in client}


def test_small_frames_still_converge() -> None:
    items = [item(i, 10**6) for i in range(3000)]
    client = items[::2] + items[1:50:2]
    server = items[1::2] + items[:40:2]
    have, need, rounds, _ = run(client, server, frame=4096)
    assert have == {i for _, i in client} - {i for _, i in server}
    assert need == {i for _, i in server} - {i for _, i in client}
    assert rounds > 1


def test_cost_grows_with_difference_not_with_store() -> None:
    base = [item(i, 10**9) for i in range(20_000)]
    _, need, rounds, size = run(base[:-1], base)
    assert len(need) == 1 and size < 8 * 1024 and rounds <= 4
    _, need, _, size_100 = run(base[:-100], base)
    assert len(need) == 100 and size_100 > size
    _, _, _, same = run(base, base)
    assert same < 1024  # identical sets: one fingerprint per bucket


def test_varint_and_malformed_messages() -> None:
    assert encode_varint(0) == b"\x00" and encode_varint(127) == b"\x7f" and encode_varint(128) == b"\x81\x00"
    with pytest.raises(ValueError):  # a negative number never ends the shift loop: refused, not spun on
        encode_varint(-1)
    responder = Negentropy(VectorStorage([item(1, 10)]))
    for bad in [b"", b"\x61\x01", b"\x61\x00\x21" + b"\x00" * 33, b"\x61\x00\x00\x07", b"\x10"]:
        with pytest.raises(NegentropyError):
            responder.reconcile(bad)
    assert responder.reconcile(b"\x62") == b"\x61"  # a newer version: answer with ours
    with pytest.raises(NegentropyError):
        VectorStorage([item(1, 10), item(1, 10)])
