"""Builds the record-format-v3 test vectors (tests/identity/vectors/format_v3.json) from the identity package.

The records are spelled as docs/format-v3.md designs them: space entries with the v2 preimage, `signing_key`, key
events, space creation, membership and hosting, vouch pages and redactions, plus the Merkle vectors of the
vouched-set rule. `python -m tests.identity.format_v3_vectors` writes the file again; test_format_v3_vectors.py
checks that the file is exactly what this module builds and recomputes every output independently.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from identity import canonical, key_history, keys, spaces, vouching
from identity.keys import SigningKey

VECTORS = Path(__file__).resolve().parent / "vectors" / "format_v3.json"

# Every key of the vectors: a 32-byte seed of one repeated byte.
SEEDS = {
    "A0": 0x00,  # agent A's first key: A's id, for good
    "N": 0x01,  # a node (A's home node, a space's hosting node)
    "A1": 0x02,  # A's key after its first rotation
    "A2": 0x03,  # A's pre-committed next key (committed by the first rotation)
    "AR": 0x04,  # A's recovery key
    "B0": 0x05,  # agent B's first key: B's id
    "A4": 0x06,  # the key A's recovery installs
    "A5": 0x07,  # the next key the recovery commits to (kept offline)
    "C0": 0x08,  # agent C's first key: C's id, an admin of the space
}


def key(name: str) -> SigningKey:
    """The vectors' key `name` (see SEEDS)."""
    return SigningKey.from_seed(bytes([SEEDS[name]]) * 32)


def did(name: str) -> str:
    return key(name).did


def key_commitment(next_did: str) -> str:
    """A pre-rotation commitment (`next`): lowercase hex SHA-256 of the next key's did:key string (ASCII)."""
    return hashlib.sha256(next_did.encode("ascii")).hexdigest()


def address(record: dict[str, Any]) -> str:
    """A record's address: an entry's is its preimage's hash (v1: the seed's; v2: with `space`); every other kind's
    is SHA-256 of its signing bytes (the record without `signature`)."""
    if record["kind"] == "entry":
        args = (record["author_id"], record["created_at"], record["entry_type"], record["performative"])
        if record["schema_version"] == "v2":
            return canonical.space_record_hash(*args, record["content"], record["space"])
        return canonical.record_hash(*args, record["content"])
    unsigned = {k: v for k, v in record.items() if k != "signature"}
    return canonical.sha256_hex(canonical.canonical_bytes(unsigned))


def hash_preimage(record: dict[str, Any]) -> str | None:
    """The bytes an entry's address hashes (None for other kinds, whose preimage is their signing bytes)."""
    if record["kind"] != "entry":
        return None
    args = (record["author_id"], record["created_at"], record["entry_type"], record["performative"])
    if record["schema_version"] == "v2":
        return canonical.space_entry_preimage(*args, record["content"], record["space"]).decode("ascii")
    preimage = dict(zip(("author_id", "created_at", "entry_type", "performative"), args, strict=True))
    preimage |= {"content": record["content"], "schema_version": "v1"}
    return canonical.canonical_bytes(preimage).decode("ascii")


class Book:
    """The vectors in the order they are made: each signed record by name, with everything derived from it."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}
        self.vectors: list[dict[str, Any]] = []

    def seal(self, name: str, description: str, signer: str, record: dict[str, Any]) -> dict[str, Any]:
        """Sign `record` (already canonical) with key `signer`, remember it, and add its vector."""
        canonical.check_canonical(record)
        signing = canonical.canonical_bytes(record)
        signed = {**record, "signature": key(signer).sign(signing)}
        body = canonical.canonical_bytes(signed)
        record_address = address(signed)
        version = hashlib.sha256(body).hexdigest() if record["kind"] == "entry" else record_address
        self.records[name] = {"record": signed, "hash": record_address, "version": version}
        vector: dict[str, Any] = {
            "name": name,
            "description": description,
            "signer": signer,
            "signer_seed": key(signer).seed.hex(),
            "record": signed,
            "signing_bytes": signing.decode("ascii"),
        }
        preimage = hash_preimage(signed)
        if preimage is not None:
            vector["hash_preimage"] = preimage
        vector |= {
            "canonical_bytes": body.decode("ascii"),
            "hash": record_address,
            "version": version,
            "signature": signed["signature"],
        }
        self.vectors.append(vector)
        return signed

    def hash(self, name: str) -> str:
        return str(self.records[name]["hash"])

    def version(self, name: str) -> str:
        return str(self.records[name]["version"])


def _entry(space: str | None, author: str, created_at: str, content: str, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "kind": "entry",
        "schema_version": "v1" if space is None else "v2",
        "author_id": author,
        "created_at": created_at,
        "entry_type": "finding",
        "performative": "inform",
        "content": content,
        "confidence": 0.9,
        "tags": ["kitchen"],
        "directed_to": [],
        "links": [],
        "metadata": {},
        "truth_state": "fact",
        "authority": "raw",
        "scope": "federation",
    }
    if space is not None:
        record["space"] = space
    return record | extra


def build_records() -> Book:
    """Every record vector, in a story: a space, its members, posts, key events, a recovery, redactions."""
    book = Book()
    a, b, n = did("A0"), did("B0"), did("N")
    base = {"schema_version": "v1", "author_id": a}

    book.seal(
        "space",
        "A creates a space; the space's id is this record's hash, unguessable through its nonce.",
        "A0",
        {
            **base,
            "kind": "space",
            "created_at": "2026-03-01T09:00:00Z",
            "name": "K\u00fcche",
            "description": "The family's kitchen notes.",
            "nonce": keys.b64u(hashlib.sha256(b"format-v3 vectors: the space nonce").digest()),
        },
    )
    space = book.hash("space")
    book.seal(
        "member_add",
        "The owner adds B as a writer: the first record of B's membership chain in the space (seq 1, no prior).",
        "A0",
        {
            **base,
            "kind": "space_member",
            "created_at": "2026-03-01T09:01:00Z",
            "space": space,
            "member": b,
            "role": "writer",
            "seq": 1,
        },
    )
    book.seal(
        "admin_add",
        "The owner makes C an admin: the first record of C's admin chain, which only the owner and C itself sign.",
        "A0",
        {
            **base,
            "kind": "space_admin",
            "created_at": "2026-03-01T09:01:10Z",
            "space": space,
            "member": did("C0"),
            "role": "admin",
            "seq": 1,
        },
    )
    book.seal(
        "host",
        "The owner names node N as a hosting node of the space.",
        "A0",
        {
            **base,
            "kind": "space_host",
            "created_at": "2026-03-01T09:01:30Z",
            "space": space,
            "node": n,
            "role": "host",
            "seq": 1,
        },
    )
    book.seal(
        "space_entry",
        "B posts into the space: schema_version v2, the space inside the address (see hash_preimage).",
        "B0",
        _entry(space, b, "2026-03-01T09:02:00.250Z", "The kettle's filter needs descaling."),
    )
    book.seal(
        "space_entry_backdated",
        "A second post in B's name, dated before the first (say, by a thief holding B's key).",
        "B0",
        _entry(space, b, "2026-02-01T00:00:00Z", "Ignore the earlier note about the kettle."),
    )
    book.seal(
        "member_remove",
        "The owner removes B (seq 2 after member_add), vouching only for space_entry: the backdated post is void.",
        "A0",
        {
            **base,
            "kind": "space_member",
            "created_at": "2026-03-02T10:00:00Z",
            "space": space,
            "member": b,
            "role": "none",
            "seq": 2,
            "prior": book.hash("member_add"),
            "vouches": [vouching.vouch(b, [book.version("space_entry")]).as_json()],
        },
    )
    book.seal(
        "vouch_page_of_member_remove",
        "Page 0 of member_remove's vouch for B, signed as member_remove is: it decides B's posts in the space.",
        "A0",
        {
            **base,
            "kind": "vouch_page",
            "created_at": "2026-03-02T10:00:00Z",
            "event": book.hash("member_remove"),
            "subject": b,
            "page": 0,
            "versions": [book.version("space_entry")],
            "proof": [],
            "space": space,
        },
    )
    a0_records = [book.version(name) for name in ("space", "member_add", "admin_add", "host", "member_remove")]
    book.seal(
        "rotate_by_current",
        "A's first key event: a rotation signed by the current key A0 (no commitment yet) to A1, committing to A2 "
        "as the next key and registering the recovery key AR; it vouches for A0's four records above.",
        "A0",
        {
            **base,
            "kind": "key_event",
            "created_at": "2026-03-03T08:00:00Z",
            "event": "rotate",
            "seq": 1,
            "key": did("A1"),
            "next": key_commitment(did("A2")),
            "recovery": did("AR"),
            "vouches": [vouching.vouch(a, a0_records).as_json()],
        },
    )
    book.seal(
        "vouch_page",
        "Page 0 of rotate_by_current's vouch for A0, signed by the same key as the event: the whole set here.",
        "A0",
        {
            **base,
            "kind": "vouch_page",
            "created_at": "2026-03-03T08:00:00Z",
            "event": book.hash("rotate_by_current"),
            "subject": a,
            "page": 0,
            "versions": vouching.sorted_versions(a0_records),
            "proof": [],
        },
    )
    book.seal(
        "entry_by_rotated_key",
        "A public entry signed by A1: signing_key is signed but not in the address (the seed's v1 preimage).",
        "A1",
        _entry(None, a, "2026-03-03T08:05:00Z", "Descaled the kettle.", signing_key=did("A1")),
    )
    book.seal(
        "link_by_rotated_key",
        "A link in the space between two of its entries, signed by A1: for every kind but entries the address is "
        "the signing bytes, signing_key and space included.",
        "A1",
        {
            **base,
            "kind": "link",
            "signing_key": did("A1"),
            "created_at": "2026-03-03T08:06:00Z",
            "space": space,
            "source": book.hash("space_entry_backdated"),
            "target": book.hash("space_entry"),
            "link_type": "contradicts",
            "annotation": "",
        },
    )
    a1_records = [book.version("entry_by_rotated_key"), book.version("link_by_rotated_key")]
    book.seal(
        "rotate_by_next",
        "A's planned rotation (seq 2): signed by A2, the key rotate_by_current committed to; vouches for A1's two.",
        "A2",
        {
            **base,
            "kind": "key_event",
            "signing_key": did("A2"),
            "created_at": "2026-03-04T08:00:00Z",
            "event": "rotate",
            "seq": 2,
            "prior": book.hash("rotate_by_current"),
            "key": did("A2"),
            "vouches": [vouching.vouch(did("A1"), a1_records).as_json()],
        },
    )
    book.seal(
        "entry_by_stolen_key",
        "A public entry signed by A2 after it was stolen, dated before any key event: void once A2 is revoked.",
        "A2",
        _entry(None, a, "2026-01-15T00:00:00Z", "Send the house keys to the address below.", signing_key=did("A2")),
    )
    book.seal(
        "revoke_by_recovery",
        "A2 is stolen: the recovery key revokes it (seq 3), vouching for none of its records, and installs no key.",
        "AR",
        {
            **base,
            "kind": "key_event",
            "signing_key": did("AR"),
            "created_at": "2026-03-05T08:00:00Z",
            "event": "revoke",
            "seq": 3,
            "prior": book.hash("rotate_by_next"),
            "vouches": [vouching.vouch(did("A2"), []).as_json()],
        },
    )
    book.seal(
        "recover",
        "The recovery key replaces everything after rotate_by_current (it competes at seq 2 and wins by priority), "
        "installs A4, and names both keys that lose authority: A1 (all its records vouched) and A2 (none).",
        "AR",
        {
            **base,
            "kind": "key_event",
            "signing_key": did("AR"),
            "created_at": "2026-03-05T08:01:00Z",
            "event": "recover",
            "seq": 2,
            "prior": book.hash("rotate_by_current"),
            "key": did("A4"),
            "next": key_commitment(did("A5")),
            "vouches": sorted(
                [vouching.vouch(did("A1"), a1_records).as_json(), vouching.vouch(did("A2"), []).as_json()],
                key=lambda v: v["subject"],
            ),
        },
    )
    book.seal(
        "vouch_page_of_recover",
        "Page 0 of recover's vouch for A1, signed by the recovery key that signed recover.",
        "AR",
        {
            **base,
            "kind": "vouch_page",
            "signing_key": did("AR"),
            "created_at": "2026-03-05T08:01:00Z",
            "event": book.hash("recover"),
            "subject": did("A1"),
            "page": 0,
            "versions": vouching.sorted_versions(a1_records),
            "proof": [],
        },
    )
    book.seal(
        "member_by_admin",
        "Admin C makes B a reader again (seq 3 of B's member chain, after the removal).",
        "C0",
        {
            "kind": "space_member",
            "schema_version": "v1",
            "author_id": did("C0"),
            "created_at": "2026-03-06T10:00:00Z",
            "space": space,
            "member": b,
            "role": "reader",
            "seq": 3,
            "prior": book.hash("member_remove"),
        },
    )
    book.seal(
        "redaction_by_author",
        "B redacts its own space entry (by address: every version goes), with a reason.",
        "B0",
        {
            "kind": "redaction",
            "schema_version": "v1",
            "author_id": b,
            "created_at": "2026-03-02T09:30:00Z",
            "target": book.hash("space_entry"),
            "space": space,
            "reason": "pasted the wrong note",
        },
    )
    book.seal(
        "redaction_by_owner",
        "The space's owner, signing with A4 after its recovery, redacts B's backdated post.",
        "A4",
        {
            **base,
            "kind": "redaction",
            "signing_key": did("A4"),
            "created_at": "2026-03-05T09:00:00Z",
            "target": book.hash("space_entry_backdated"),
            "space": space,
        },
    )
    return book


def tombstone(target: dict[str, Any], versions: list[str], redaction: dict[str, Any], redaction_hash: str) -> dict:
    """What a node keeps and answers for a redacted record once the redaction's authority holds (node-local, never
    synced; docs/format-v3.md, "Redaction"): the target's envelope without its body, and who redacted it when."""
    out: dict[str, Any] = {
        "redacted": True,
        "hash": address(target),
        "versions": sorted(versions),
        "kind": target["kind"],
        "author_id": target["author_id"],
        "created_at": target["created_at"],
        "redaction": redaction_hash,
        "redacted_by": redaction["author_id"],
        "redacted_at": redaction["created_at"],
    }
    if "space" in target:
        out["space"] = target["space"]
    return out


KEY_EVENTS = ("rotate_by_current", "rotate_by_next", "revoke_by_recovery", "recover")
VERDICTS = (  # records of A, each decided by its signing key against A's key history and the vouch pages
    "space",
    "member_add",
    "admin_add",
    "host",
    "member_remove",
    "entry_by_rotated_key",
    "link_by_rotated_key",
    "entry_by_stolen_key",
    "redaction_by_owner",
)


def build_key_history(book: Book) -> dict[str, Any]:
    """A's key history over its four key events (any order), and the verdict on each of A's records."""
    names = {book.hash(n): n for n in KEY_EVENTS}
    history = key_history.resolve(did("A0"), [(book.hash(n), book.records[n]["record"]) for n in KEY_EVENTS])
    pages: dict[tuple[str, str], dict[int, list[str]]] = {}
    for entry in book.records.values():
        record = entry["record"]
        if record["kind"] == "vouch_page":
            pages[(record["event"], record["subject"])] = {record["page"]: record["versions"]}
    verdicts = []
    for name in VERDICTS:
        record = book.records[name]["record"]
        signer = key_history.signer_of(record)
        verdict = key_history.key_verdict(history, signer, book.version(name), pages)
        verdicts.append({"record": name, "signing_key": signer, "verdict": verdict})
    return {
        "author_id": did("A0"),
        "events": list(KEY_EVENTS),
        "chain": [names[address] for address in history.chain],
        "state": {"key": history.state.key, "next": history.state.next, "recovery": history.state.recovery},
        "losing_keys": sorted(history.losing_keys),
        "kept": [n for n in KEY_EVENTS if book.hash(n) in history.kept],
        "refused": {names[address]: reason for address, reason in sorted(history.refused.items())},
        "verdicts": verdicts,
    }


SPACE_RECORDS = (  # every record of the space but the redactions (issue 39 decides them against their targets)
    "space",
    "member_add",
    "admin_add",
    "host",
    "space_entry",
    "space_entry_backdated",
    "member_remove",
    "vouch_page_of_member_remove",
    "link_by_rotated_key",
    "member_by_admin",
)


def build_spaces(book: Book) -> list[dict[str, Any]]:
    """The space's members, roles, hosts and chains, and the verdict on each of its records (`identity.spaces`),
    with the key verdicts of A's key history and the vouch pages of its key events."""
    history = key_history.resolve(did("A0"), [(book.hash(n), book.records[n]["record"]) for n in KEY_EVENTS])
    key_pages: dict[tuple[str, str], dict[int, list[str]]] = {}
    for name in ("vouch_page", "vouch_page_of_recover"):
        page = book.records[name]["record"]
        key_pages[(page["event"], page["subject"])] = {page["page"]: page["versions"]}
    held = [spaces.Held(book.hash(n), book.version(n), book.records[n]["record"]) for n in SPACE_RECORDS]
    result = spaces.resolve(held, spaces.key_verdicts({did("A0"): history}, key_pages))
    names = {book.hash(n): n for n in SPACE_RECORDS}
    out = []
    for space in result.spaces.values():
        chains = {"admin": space.admin_chains, "member": space.member_chains, "host": space.host_chains}
        verdicts = []
        for name in SPACE_RECORDS:
            decision = result.decisions[book.version(name)]
            verdicts.append(
                {"record": name, "verdict": decision.verdict} | ({"reason": decision.reason} if decision.reason else {})
            )
        out.append(
            {
                "space": names[space.id],
                "owner": space.owner,
                "roles": dict(sorted(space.roles.items())),
                "hosts": sorted(space.hosts),
                "chains": {
                    kind: {who: [names[a] for a in chain] for who, chain in sorted(by.items())}
                    for kind, by in chains.items()
                },
                "verdicts": verdicts,
            }
        )
    return out


def build_merkle() -> list[dict[str, Any]]:
    """Merkle vectors: roots of `versions(n)` (SHA-256 of the decimal strings "0".."n-1", sorted) and page proofs."""
    out: list[dict[str, Any]] = []
    for n in (0, 1, 2, 3, 5, 1024, 1025, 2049):
        versions = sorted(hashlib.sha256(str(i).encode("ascii")).hexdigest() for i in range(n))
        item: dict[str, Any] = {"n": n, "root": vouching.merkle_root(versions), "pages": vouching.page_count(n)}
        if n <= 5:
            item["versions"] = versions
        if vouching.page_count(n) > 1:
            item["page_proofs"] = {str(i): vouching.page(versions, i)[1] for i in range(vouching.page_count(n))}
        out.append(item)
    return out


def build() -> dict[str, Any]:
    """The whole vectors document."""
    book = build_records()
    entry = book.records["space_entry"]
    redaction = book.records["redaction_by_author"]
    return {
        "about": (
            "Record format v3 test vectors (docs/format-v3.md). Keys: a 32-byte seed of one repeated byte (keys). "
            "For each record: build signing_bytes as canonical JSON of the record without signature, compare; sign "
            "with the signer's seed, compare signature; hash the hash_preimage (entries) or the signing bytes "
            "(other kinds), compare hash; SHA-256 of canonical_bytes is an entry's version (other kinds: the hash)."
        ),
        "keys": {name: {"seed": key(name).seed.hex(), "did": did(name)} for name in SEEDS},
        "commitments": {"A2": key_commitment(did("A2"))},
        "records": book.vectors,
        "key_history": build_key_history(book),
        "spaces": build_spaces(book),
        "tombstones": [
            {
                "name": "tombstone_of_space_entry",
                "description": "The read answer for space_entry once redaction_by_author holds.",
                "tombstone": tombstone(entry["record"], [entry["version"]], redaction["record"], redaction["hash"]),
                "canonical_bytes": canonical.canonical_bytes(
                    tombstone(entry["record"], [entry["version"]], redaction["record"], redaction["hash"])
                ).decode("ascii"),
            }
        ],
        "merkle": {
            "construction": (
                "RFC 9162 section 2.1.1 with SHA-256: leaf = SHA-256(0x00 || 32 version bytes), node = SHA-256(0x01 "
                "|| left || right), split at the largest power of two below n, no duplication, empty = SHA-256(). "
                f"Leaves sorted ascending, distinct. Pages of {vouching.PAGE_LEAVES} leaves; a page's proof is the "
                "RFC 9162 audit path of its subtree among the pages, bottom up."
            ),
            "page_leaves": vouching.PAGE_LEAVES,
            "vectors": build_merkle(),
        },
    }


def render(document: dict[str, Any]) -> str:
    """The file's text: JSON, ASCII only, two-space indents, members in the order built."""
    return json.dumps(document, indent=2, ensure_ascii=True) + "\n"


def main() -> None:
    VECTORS.parent.mkdir(exist_ok=True)
    VECTORS.write_text(render(build()), encoding="ascii")
    print(f"wrote {VECTORS}")


if __name__ == "__main__":
    main()
