"""The vouched-set rule's library (`identity.vouching`): its Merkle tree against RFC 9162 and an independent
implementation of it (pymerkle), pinned roots, pages and their audit paths, and the verdict on a record.

The verdict must be a function of the vouch and the pages alone: whatever pages a node holds, it never answers
`vouched` for a version outside the set nor `void` for one inside it, and with every page it decides every version.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymerkle import InmemoryTree

from identity import vouching
from identity.keys import SigningKey
from identity.vouching import PAGE_LEAVES, Vouch, VouchError

SUBJECT = SigningKey.from_seed(bytes(32)).did
OTHER = SigningKey.from_seed(bytes([1]) * 32).did

# Roots of `_versions(n)` (SHA-256 of "0", "1", ... as hex, sorted), checked against pymerkle too.
PINNED_ROOTS = {
    1: "13a77175e35eb1d9da91ee14df0d7772cea71289800206e2b45c882ecb06efbf",
    2: "bbb441530bdded54e6e2bfcdc829819ff39b30768eb9f023071dffc16b410f10",
    3: "8be871f13785b4c81a1700459c76ac2b3ae2caebb7876c376e223c6adff98c47",
    1025: "3af851099ca72a2c5af48ecc0eb2496c8ab827f6fe8514245a3e097d34751eeb",
}

versions_st = st.binary(min_size=32, max_size=32).map(bytes.hex)
version_sets = st.lists(versions_st, unique=True, max_size=40).map(sorted)


def _versions(n: int, salt: str = "") -> list[str]:
    """n distinct versions, sorted: SHA-256 of a counter."""
    return sorted(hashlib.sha256(f"{salt}{i}".encode()).hexdigest() for i in range(n))


def _oracle_root(versions: list[str]) -> str:
    """RFC 9162's Merkle Tree Hash by pymerkle, an implementation that shares no code with ours."""
    tree = InmemoryTree(algorithm="sha256")
    for version in versions:
        tree.append_entry(bytes.fromhex(version))
    return tree.get_root().hex() if versions else hashlib.sha256(b"").hexdigest()


def _h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


# ---- the tree ----------------------------------------------------------------------------------------------------


def test_small_trees_are_rfc_9162_spelled_out() -> None:
    """Empty, one, two and three leaves, written from the RFC's definition: prefixes 0x00 and 0x01, no doubling."""
    a, b, c = _versions(3)
    la, lb, lc = (_h(b"\x00" + bytes.fromhex(v)) for v in (a, b, c))
    assert vouching.merkle_root([]) == vouching.EMPTY_ROOT == hashlib.sha256(b"").hexdigest()
    assert vouching.merkle_root([a]) == la.hex()
    assert vouching.merkle_root([a, b]) == _h(b"\x01" + la + lb).hex()
    # three leaves split 2 + 1: the odd leaf is carried up as it is, never paired with itself
    assert vouching.merkle_root([a, b, c]) == _h(b"\x01" + _h(b"\x01" + la + lb) + lc).hex()


def test_pinned_roots() -> None:
    """Fixed digests, so any change to the construction fails loudly (another implementation can check these)."""
    assert {n: vouching.merkle_root(_versions(n)) for n in PINNED_ROOTS} == PINNED_ROOTS
    assert {n: _oracle_root(_versions(n)) for n in PINNED_ROOTS} == PINNED_ROOTS


@given(version_sets)
def test_the_root_is_rfc_9162s(versions: list[str]) -> None:
    assert vouching.merkle_root(versions) == _oracle_root(versions)


@pytest.mark.parametrize("n", [PAGE_LEAVES - 1, PAGE_LEAVES, PAGE_LEAVES + 1, 3 * PAGE_LEAVES + 5])
def test_the_root_is_rfc_9162s_across_page_sizes(n: int) -> None:
    versions = _versions(n)
    assert vouching.merkle_root(versions) == _oracle_root(versions)


def test_the_root_needs_a_sorted_set() -> None:
    a, b = _versions(2)
    for bad in ([b, a], [a, a], [a.upper()], [a[:-1]], ["x" * 64]):
        with pytest.raises(VouchError):
            vouching.merkle_root(bad)


@given(st.lists(versions_st, max_size=30))
def test_a_vouch_is_of_the_set_in_any_order(versions: list[str]) -> None:
    members = sorted(set(versions))
    v = vouching.vouch(SUBJECT, versions)
    assert v == vouching.vouch(SUBJECT, reversed(versions)) == vouching.vouch(SUBJECT, members)
    assert v.count == len(members) and v.root == vouching.merkle_root(members)
    assert vouching.matches(v, members)
    assert not vouching.matches(v, [*members, "f" * 64]) or "f" * 64 in members


@given(version_sets, version_sets)
def test_different_sets_have_different_vouches(a: list[str], b: list[str]) -> None:
    assert (vouching.vouch(SUBJECT, a) == vouching.vouch(SUBJECT, b)) == (a == b)


# ---- the vouch as a record carries it ----------------------------------------------------------------------------


def test_a_vouch_round_trips_through_json() -> None:
    v = vouching.vouch(SUBJECT, _versions(5))
    assert v.as_json() == {"count": 5, "root": v.root, "subject": SUBJECT}
    assert Vouch.from_json(v.as_json()) == v
    empty = vouching.vouch(OTHER, [])
    assert empty == Vouch(OTHER, 0, vouching.EMPTY_ROOT) == Vouch.from_json(empty.as_json())


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ([], "$.vouches[0]"),
        ({"count": 1, "root": "0" * 64}, "$.vouches[0]"),
        ({"count": 1, "root": "0" * 64, "subject": SUBJECT, "extra": 1}, "$.vouches[0]"),
        ({"count": 1, "root": "0" * 64, "subject": "did:web:example.org"}, "$.vouches[0].subject"),
        ({"count": -1, "root": "0" * 64, "subject": SUBJECT}, "$.vouches[0].count"),
        ({"count": 1.0, "root": "0" * 64, "subject": SUBJECT}, "$.vouches[0].count"),
        ({"count": True, "root": "0" * 64, "subject": SUBJECT}, "$.vouches[0].count"),
        ({"count": 2**31, "root": "0" * 64, "subject": SUBJECT}, "$.vouches[0].count"),
        ({"count": 1, "root": "A" * 64, "subject": SUBJECT}, "$.vouches[0].root"),
        ({"count": 0, "root": "0" * 64, "subject": SUBJECT}, "$.vouches[0].root"),
    ],
)
def test_a_malformed_vouch_is_refused_with_its_field(value: Any, field: str) -> None:
    with pytest.raises(VouchError) as caught:
        Vouch.from_json(value, "$.vouches[0]")
    assert caught.value.field == field


def test_a_subject_must_be_a_did() -> None:
    with pytest.raises(VouchError):
        vouching.vouch("not a did", [])


# ---- pages -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 7, PAGE_LEAVES, PAGE_LEAVES + 1, 2 * PAGE_LEAVES, 5 * PAGE_LEAVES + 3])
def test_every_page_verifies_and_its_path_is_the_top_of_a_leaf_path(n: int) -> None:
    """A page's audit path is the upper part of RFC 9162's inclusion path of its first leaf (pymerkle's)."""
    versions = _versions(n)
    v = vouching.vouch(SUBJECT, versions)
    tree = InmemoryTree(algorithm="sha256")
    for version in versions:
        tree.append_entry(bytes.fromhex(version))
    assert vouching.page_count(n) == -(-n // PAGE_LEAVES)
    for index in range(vouching.page_count(n)):
        members, proof = vouching.page(versions, index)
        assert members == versions[index * PAGE_LEAVES : (index + 1) * PAGE_LEAVES]
        assert vouching.verify_page(v, index, members, proof)
        leaf_path = [step.hex() for step in tree.prove_inclusion(index * PAGE_LEAVES + 1).path]
        if proof:
            assert leaf_path[-len(proof) :] == proof
        else:
            assert vouching.page_count(n) == 1


def test_a_wrong_page_does_not_verify() -> None:
    versions = _versions(3 * PAGE_LEAVES + 5)
    v = vouching.vouch(SUBJECT, versions)
    members, proof = vouching.page(versions, 1)
    last, last_proof = vouching.page(versions, 3)
    outsider = "0" * 64
    assert not vouching.verify_page(v, 2, members, proof)  # another index
    assert not vouching.verify_page(v, 1, members[:-1], proof)  # a version left out
    assert not vouching.verify_page(v, 1, sorted([*members[1:], outsider]), proof)  # one swapped
    assert not vouching.verify_page(v, 1, members, proof[:-1])  # a step of the path missing
    assert not vouching.verify_page(v, 1, members, [*proof, proof[0]])  # one too many
    assert not vouching.verify_page(v, 1, members, list(reversed(proof)))
    assert not vouching.verify_page(v, 1, list(reversed(members)), proof)  # not in canonical order
    assert not vouching.verify_page(v, 4, last, last_proof)  # past the end
    assert not vouching.verify_page(v, -1, members, proof)
    assert vouching.verify_page(v, 3, last, last_proof) and len(last) == 5
    other = vouching.vouch(SUBJECT, versions[1:])
    assert not vouching.verify_page(other, 1, members, proof)


def test_page_refuses_an_index_out_of_range() -> None:
    with pytest.raises(VouchError):
        vouching.page(_versions(3), 1)
    with pytest.raises(VouchError):
        vouching.page([], 0)


# ---- the verdict -------------------------------------------------------------------------------------------------


def test_with_every_page_each_version_is_decided() -> None:
    versions = _versions(2 * PAGE_LEAVES + 10)
    v = vouching.vouch(SUBJECT, versions)
    pages = {i: vouching.page(versions, i)[0] for i in range(vouching.page_count(v.count))}
    for version in versions[:: PAGE_LEAVES // 8]:
        assert vouching.verdict(version, v, pages) == "vouched"
    for version in _versions(200, salt="other"):
        assert vouching.verdict(version, v, pages) == "void"


def test_an_empty_vouch_voids_everything() -> None:
    v = vouching.vouch(SUBJECT, [])
    assert vouching.verdict("a" * 64, v, {}) == "void"


def test_without_pages_nothing_is_decided_but_an_empty_set() -> None:
    v = vouching.vouch(SUBJECT, _versions(3))
    assert vouching.verdict(_versions(3)[0], v, {}) == "undecided"


@given(
    st.integers(1, 4 * PAGE_LEAVES + 50),
    st.integers(0, 2**32),
    st.sets(st.integers(0, 4)),
    st.lists(versions_st, max_size=10),
)
def test_the_verdict_is_never_wrong_and_complete_with_every_page(
    n: int, salt: int, held: set[int], strangers: list[str]
) -> None:
    """Whatever pages are held, `vouched` only for members and `void` only for others; with every page, all decided."""
    versions = _versions(n, salt=str(salt))
    v = vouching.vouch(SUBJECT, versions)
    pages_all = {i: vouching.page(versions, i)[0] for i in range(vouching.page_count(v.count))}
    pages = {i: pages_all[i] for i in held if i in pages_all}
    complete = len(pages) == len(pages_all)
    neighbours = [_next(versions[i * PAGE_LEAVES - 1]) for i in range(1, len(pages_all))]  # just past a page's end
    for version in versions[::37] + versions[PAGE_LEAVES - 1 :: PAGE_LEAVES]:
        answer = vouching.verdict(version, v, pages)
        assert answer in (("vouched",) if complete else ("vouched", "undecided"))
        assert (answer == "vouched") == any(version in page for page in pages.values())
    members = set(versions)
    for version in [*strangers, *neighbours, "0" * 64, "f" * 64]:
        if version in members:
            continue
        answer = vouching.verdict(version, v, pages)
        assert answer in (("void",) if complete else ("void", "undecided"))


def _next(version: str) -> str:
    """The version just after this one in the order (its value plus one)."""
    return f"{(int(version, 16) + 1) % 2**256:064x}"


def test_held_pages_around_a_place_decide_a_stranger_there() -> None:
    """A version outside the set is void as soon as the pages on both sides of its place are held."""
    versions = _versions(4 * PAGE_LEAVES)
    v = vouching.vouch(SUBJECT, versions)
    pages_all = {i: vouching.page(versions, i)[0] for i in range(4)}
    stranger = _next(pages_all[1][-1])
    assert stranger not in versions and pages_all[1][-1] < stranger < pages_all[2][0]
    assert vouching.verdict(stranger, v, {1: pages_all[1], 2: pages_all[2]}) == "void"
    assert vouching.verdict(stranger, v, {1: pages_all[1]}) == "undecided"  # page 2 could start with it
    assert vouching.verdict(stranger, v, {2: pages_all[2]}) == "undecided"  # page 1 could end with it
    inside = _next(pages_all[1][5])
    assert inside not in versions
    assert vouching.verdict(inside, v, {1: pages_all[1]}) == "void"  # inside a held page's range
    assert vouching.verdict(versions[0], v, {1: pages_all[1]}) == "undecided"
    assert vouching.verdict("0" * 64, v, {0: pages_all[0]}) == "void"
    assert vouching.verdict("f" * 64, v, {3: pages_all[3]}) == "void"
    assert vouching.verdict("f" * 64, v, {2: pages_all[2]}) == "undecided"


def test_a_malformed_version_is_refused() -> None:
    with pytest.raises(VouchError):
        vouching.verdict("xyz", vouching.vouch(SUBJECT, []), {})


# ---- reading the vouch off the removing record -------------------------------------------------------------------


def test_decide_reads_the_vouch_of_the_subject_from_the_removing_record() -> None:
    kept = _versions(3)
    removal = {
        "kind": "key_event",
        "vouches": sorted([vouching.vouch(SUBJECT, kept).as_json(), vouching.vouch(OTHER, []).as_json()],
                          key=lambda v: v["subject"]),
    }  # fmt: skip
    pages = {0: vouching.page(kept, 0)[0]}
    assert vouching.vouch_for(removal, SUBJECT) == vouching.vouch(SUBJECT, kept)
    assert vouching.decide(kept[1], removal, SUBJECT, pages) == "vouched"
    assert vouching.decide("0" * 64, removal, SUBJECT, pages) == "void"
    assert vouching.decide(kept[1], removal, SUBJECT, {}) == "undecided"
    assert vouching.decide(kept[1], removal, OTHER, {}) == "void"  # an empty set
    third = SigningKey.from_seed(bytes([9]) * 32).did
    assert vouching.vouch_for(removal, third) is None
    assert vouching.decide(kept[1], removal, third, {}) == "void"  # named nowhere: nothing of it is vouched


def test_decide_refuses_a_malformed_vouch_with_its_path() -> None:
    removal = {"vouches": [vouching.vouch(SUBJECT, []).as_json(), {"count": 1, "root": "x", "subject": OTHER}]}
    with pytest.raises(VouchError) as caught:
        vouching.decide("0" * 64, removal, SUBJECT, {})
    assert caught.value.field == "$.vouches[1].root"
    with pytest.raises(VouchError):
        vouching.vouch_for({"vouches": {}}, SUBJECT)
    with pytest.raises(VouchError):
        vouching.decide("zz", {"vouches": []}, SUBJECT, {})
