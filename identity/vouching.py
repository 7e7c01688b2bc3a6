"""The vouched-set rule: what a record that takes authority away still vouches for (docs/format-v3.md).

A record that takes authority away from a key (a rotation, a revocation, a recovery) or from a member (a
removal from a space) names, for each subject that loses authority, the set of the subject's records it still
vouches for: a `Vouch` of the set's size and its Merkle root over the records' versions. Everything else that
subject signed is void, whatever date it claims, so backdating gains a thief or a removed member nothing.

The set itself travels in pages of `PAGE_LEAVES` versions, each with the audit path from its subtree to the root,
so a node can check a page on its own and decide a record as soon as the pages around it are held.

The Merkle tree is RFC 9162's (Certificate Transparency v2, section 2.1.1) with SHA-256:

- leaves are the distinct versions (64 lowercase hex: 32 bytes), sorted ascending (the order of their bytes,
  which is the order of their hex text);
- a leaf's hash is `SHA-256(0x00 || the version's 32 bytes)`; an inner node's is `SHA-256(0x01 || left || right)`;
- a list of n > 1 hashes splits at k, the largest power of two below n: the first k form the left subtree, the rest
  the right one. No node is duplicated (an odd node is carried up as it is: RFC 9162 has no Bitcoin-style
  doubling, so two different sets never share a root);
- the root of the empty set is `SHA-256()` of no bytes (`EMPTY_ROOT`).

Pure functions, no I/O: every node and client computes the same vouch from the same set.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from identity import keys

LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
PAGE_LEAVES = 1024  # versions per page: 2^10, so every full page is one subtree of the tree (RFC 9162 split)
MAX_COUNT = 2**31 - 1  # the most versions one vouch may name (JSON integers stay exact in every language)
EMPTY_ROOT = hashlib.sha256(b"").hexdigest()

_VERSION = re.compile(r"[0-9a-f]{64}")

Verdict = Literal["vouched", "void", "undecided"]


class VouchError(ValueError):
    """A vouch, a page or a set of versions is malformed. `field` is the JSON path of the offending value."""

    def __init__(self, message: str, field: str = "$") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Vouch:
    """What an authority-removing record still vouches for of one subject (a key or a member): a count and a root."""

    subject: str
    count: int
    root: str

    def as_json(self) -> dict[str, Any]:
        """The canonical JSON object of the vouch, as a record carries it: `{"count":…,"root":…,"subject":…}`."""
        return {"count": self.count, "root": self.root, "subject": self.subject}

    @classmethod
    def from_json(cls, value: Any, field: str = "$") -> Vouch:
        """Read a vouch from a record; raise VouchError (with the path) unless every member is in canonical form."""
        if not isinstance(value, dict):
            raise VouchError("a vouch is an object", field)
        if set(value) != {"count", "root", "subject"}:
            raise VouchError("a vouch has exactly the members count, root and subject", field)
        subject, count, root = value["subject"], value["count"], value["root"]
        if not isinstance(subject, str) or not keys.is_did(subject):
            raise VouchError("subject must be an Ed25519 did:key", f"{field}.subject")
        if type(count) is not int or not 0 <= count <= MAX_COUNT:
            raise VouchError(f"count must be an integer from 0 to {MAX_COUNT}", f"{field}.count")
        if not isinstance(root, str) or not _VERSION.fullmatch(root):
            raise VouchError("root must be 64 lowercase hex digits", f"{field}.root")
        if count == 0 and root != EMPTY_ROOT:
            raise VouchError("the root of an empty set is SHA-256 of no bytes", f"{field}.root")
        return cls(subject, count, root)


def leaf_hash(version: str) -> bytes:
    """`SHA-256(0x00 || version bytes)`: a leaf of the tree."""
    return hashlib.sha256(LEAF_PREFIX + bytes.fromhex(version)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """`SHA-256(0x01 || left || right)`: an inner node of the tree."""
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def sorted_versions(versions: Iterable[str], field: str = "$") -> list[str]:
    """The set of `versions` as the tree takes it: checked (64 lowercase hex each), deduplicated, sorted."""
    out = set()
    for i, version in enumerate(versions):
        if not isinstance(version, str) or not _VERSION.fullmatch(version):
            raise VouchError("a version is 64 lowercase hex digits", f"{field}[{i}]")
        out.add(version)
    return sorted(out)


def check_sorted(versions: Sequence[str], field: str = "$") -> None:
    """Raise VouchError unless `versions` is already a set in canonical order (as a signed page must carry it)."""
    for i, version in enumerate(versions):
        if not isinstance(version, str) or not _VERSION.fullmatch(version):
            raise VouchError("a version is 64 lowercase hex digits", f"{field}[{i}]")
        if i and versions[i - 1] >= version:
            raise VouchError("versions must be sorted ascending without duplicates", f"{field}[{i}]")


def _combine(hashes: Sequence[bytes]) -> bytes:
    """RFC 9162's Merkle Tree Hash over already-hashed leaves (or subtrees): split at the largest power of two."""
    if len(hashes) == 1:
        return hashes[0]
    k = _split(len(hashes))
    return node_hash(_combine(hashes[:k]), _combine(hashes[k:]))


def _split(n: int) -> int:
    """The largest power of two strictly below n (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def merkle_root(versions: Sequence[str]) -> str:
    """The root (hex) of a sorted set of versions; `EMPTY_ROOT` for none. Raises VouchError if not sorted unique."""
    check_sorted(versions)
    if not versions:
        return EMPTY_ROOT
    return _combine([leaf_hash(v) for v in versions]).hex()


def vouch(subject: str, versions: Iterable[str]) -> Vouch:
    """The vouch of `subject` for a set of its records' versions (any order; duplicates count once)."""
    if not keys.is_did(subject):
        raise VouchError("subject must be an Ed25519 did:key", "$.subject")
    members = sorted_versions(versions)
    if len(members) > MAX_COUNT:
        raise VouchError(f"a vouch names at most {MAX_COUNT} versions")
    return Vouch(subject, len(members), merkle_root(members))


def matches(v: Vouch, versions: Iterable[str]) -> bool:
    """True if `versions` is exactly the vouched set: then each of them is vouched and nothing else is.

    A node that holds exactly the subject's records the owner vouched for (the common case: no thief signed
    anything) decides every one of them with this, without any page.
    """
    members = sorted_versions(versions)
    return len(members) == v.count and merkle_root(members) == v.root


def page_count(count: int) -> int:
    """How many pages carry a set of `count` versions (0 for the empty set)."""
    return -(-count // PAGE_LEAVES)


def _page_hashes(versions: Sequence[str]) -> list[bytes]:
    return [
        _combine([leaf_hash(v) for v in versions[start : start + PAGE_LEAVES]])
        for start in range(0, len(versions), PAGE_LEAVES)
    ]


def _path(index: int, hashes: Sequence[bytes]) -> list[bytes]:
    """RFC 9162's PATH(m, D[n]) over subtree hashes: the audit path from item `index` up to the root, bottom up."""
    if len(hashes) <= 1:
        return []
    k = _split(len(hashes))
    if index < k:
        return [*_path(index, hashes[:k]), _combine(hashes[k:])]
    return [*_path(index - k, hashes[k:]), _combine(hashes[:k])]


def page(versions: Sequence[str], index: int) -> tuple[list[str], list[str]]:
    """Page `index` of a sorted set: its versions (`PAGE_LEAVES`, fewer on the last page) and its audit path (hex)."""
    check_sorted(versions)
    if not 0 <= index < page_count(len(versions)):
        raise VouchError(f"page {index} does not exist for {len(versions)} versions", "$.page")
    members = list(versions[index * PAGE_LEAVES : (index + 1) * PAGE_LEAVES])
    return members, [h.hex() for h in _path(index, _page_hashes(versions))]


def verify_page(v: Vouch, index: int, versions: Sequence[str], proof: Sequence[str]) -> bool:
    """True if `versions` is page `index` of the set `v` vouches for, as its audit path `proof` shows.

    The check is RFC 9162's inclusion-proof verification (section 2.1.3.2) with the page's subtree hash in the
    place of a leaf hash and the number of pages as the tree size.
    """
    pages = page_count(v.count)
    if type(index) is not int or not 0 <= index < pages:
        return False
    expected = PAGE_LEAVES if index < pages - 1 else v.count - (pages - 1) * PAGE_LEAVES
    if len(versions) != expected:
        return False
    try:
        check_sorted(versions)
    except VouchError:
        return False
    if not all(isinstance(p, str) and _VERSION.fullmatch(p) for p in proof):
        return False
    node = _combine([leaf_hash(version) for version in versions])
    fn, sn = index, pages - 1
    for sibling_hex in proof:
        sibling = bytes.fromhex(sibling_hex)
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            node = node_hash(sibling, node)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            node = node_hash(node, sibling)
        fn >>= 1
        sn >>= 1
    return sn == 0 and node.hex() == v.root


def verdict(version: str, v: Vouch, pages: Mapping[int, Sequence[str]]) -> Verdict:
    """Whether the subject's record of this version is vouched for by `v`, given the verified pages held.

    `pages` maps a page's index to its versions, each page already checked with `verify_page`. Pages are
    consecutive slices of one sorted list, so a version is decided as soon as the pages around its place are held:
    `vouched` when a page holds it, `void` when it lies inside a page's range without being in it, or between two
    consecutive held pages, or before the first page or after the last one (when those are held), and always
    `void` for an empty set. Otherwise the pages it could be on have not arrived: `undecided` (the record waits).
    """
    if not _VERSION.fullmatch(version):
        raise VouchError("a version is 64 lowercase hex digits")
    if v.count == 0:
        return "void"
    last = page_count(v.count) - 1
    for index, members in pages.items():
        if not members:
            continue
        if members[0] <= version <= members[-1]:
            return "vouched" if _contains(members, version) else "void"
        if version < members[0] and (index == 0 or _last_of(pages.get(index - 1)) < version):
            return "void"  # before the first page, or in the gap after the previous held page
        if version > members[-1] and index == last:
            return "void"
    return "undecided"


def vouch_for(record: dict[str, Any], subject: str) -> Vouch | None:
    """The vouch an authority-removing record (a key event, a membership change) carries for `subject`, or None.

    Reads the record's `vouches` member, refusing any malformed vouch with its path (`$.vouches[1].root`).
    """
    listed = record.get("vouches", [])
    if not isinstance(listed, list):
        raise VouchError("vouches is a list", "$.vouches")
    found = None
    for i, item in enumerate(listed):
        v = Vouch.from_json(item, f"$.vouches[{i}]")
        if v.subject == subject:
            found = v
    return found


def decide(version: str, removal: dict[str, Any], subject: str, pages: Mapping[int, Sequence[str]]) -> Verdict:
    """The verdict on `subject`'s record of `version` after `removal` took authority from `subject`.

    A removal that names no vouch for the subject vouches for nothing of it: `void`. Otherwise `verdict` over the
    verified pages held of that vouch.
    """
    v = vouch_for(removal, subject)
    if v is None:
        if not _VERSION.fullmatch(version):
            raise VouchError("a version is 64 lowercase hex digits")
        return "void"
    return verdict(version, v, pages)


def _last_of(members: Sequence[str] | None) -> str:
    return members[-1] if members else "g"  # "g" sorts after every hex digit: no page before means no gap


def _contains(members: Sequence[str], version: str) -> bool:
    """Binary search in a sorted page."""
    lo, hi = 0, len(members)
    while lo < hi:
        mid = (lo + hi) // 2
        if members[mid] < version:
            lo = mid + 1
        else:
            hi = mid
    return lo < len(members) and members[lo] == version
