"""Records of format v3 for the waiting tests: key events and posts signed by each key of one identity's story.

The story follows tests/identity/format_v3_vectors.py (keys of 32-byte seeds of one repeated byte): A rotates from
its first key A0 to A1 (committing to A2, setting the recovery key AR), rotates to A2 with the committed key, A2 is
stolen and revoked by AR, and AR's `recover` replaces everything after the first rotation (A4 installed). The
rotations vouch for A0's and A1's honest posts, with their vouch pages; a post of A0 signed after the rotation (a
thief's) is not vouched for; A2's honest post is void after the revocation and vouched for again by the recovery;
a link by A1 is vouched for by neither A1's rotation nor the recovery.
Besides: a page whose proof fails, an event the chain never allows (signed by A1 while a commitment holds) and one
building on it, a post by a key no event installs, and posts of an identity B with no key events at all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from identity import canonical, key_history, records, vouching
from identity.keys import SigningKey
from sync.store import Verified
from sync.verify import verify_record


def key(seed: int) -> SigningKey:
    """The story's key of seed byte `seed`."""
    return SigningKey.from_seed(bytes([seed]) * 32)


A0, A1, A2, AR, A4, A5, U, B0 = (key(s) for s in (0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17))
A = A0.did


def signed(body: dict[str, Any], signer: SigningKey) -> dict[str, Any]:
    """`body` with `signing_key` (unless the signer is the author's first key) and `signature`."""
    if signer.did != body["author_id"]:
        body = {**body, "signing_key": signer.did}
    return {**body, "signature": signer.sign(canonical.canonical_bytes(body))}


def post(author: str, signer: SigningKey, content: str, created_at: str = "2026-03-01T08:00:00Z") -> dict[str, Any]:
    """A public v1 entry of `author` signed by `signer`."""
    return signed(
        {
            "kind": "entry",
            "schema_version": "v1",
            "author_id": author,
            "created_at": created_at,
            "entry_type": "finding",
            "performative": "inform",
            "content": content,
            "confidence": 0.5,
            "tags": [],
            "directed_to": [],
            "links": [],
            "metadata": {},
            "truth_state": "fact",
            "authority": "raw",
            "scope": "federation",
        },
        signer,
    )


def link(author: str, signer: SigningKey, source: str, target: str, created_at: str) -> dict[str, Any]:
    """A `supports` link record of `author` signed by `signer`."""
    return signed(
        {
            "kind": "link",
            "schema_version": "v1",
            "author_id": author,
            "created_at": created_at,
            "source": source,
            "target": target,
            "link_type": "supports",
            "annotation": "",
        },
        signer,
    )


def key_event(
    signer: SigningKey,
    event: str,
    seq: int,
    *,
    prior: dict[str, Any] | None = None,
    installs: SigningKey | None = None,
    commits: SigningKey | None = None,
    recovery: SigningKey | None = None,
    vouches: Sequence[vouching.Vouch] = (),
    created_at: str = "2026-03-02T08:00:00Z",
    author: str = A,
) -> dict[str, Any]:
    """A key event of `author` (the story's A by default)."""
    body: dict[str, Any] = {
        "kind": "key_event",
        "schema_version": "v1",
        "author_id": author,
        "created_at": created_at,
        "event": event,
        "seq": seq,
        "vouches": sorted((v.as_json() for v in vouches), key=lambda v: v["subject"]),
    }
    if prior is not None:
        body["prior"] = address(prior)
    if installs is not None:
        body["key"] = installs.did
    if commits is not None:
        body["next"] = key_history.commitment(commits.did)
    if recovery is not None:
        body["recovery"] = recovery.did
    return signed(body, signer)


def vouch_page(
    signer: SigningKey, event: dict[str, Any], subject: SigningKey, versions: Sequence[str], *, author: str = A
) -> dict[str, Any]:
    """Page 0 of `event`'s vouch for `subject` (the whole set: fewer than 1,024 versions), signed by `signer`."""
    members, proof = vouching.page(vouching.sorted_versions(versions), 0)
    body = {
        "kind": "vouch_page",
        "schema_version": "v1",
        "author_id": author,
        "created_at": "2026-03-02T08:00:00Z",
        "event": address(event),
        "subject": subject.did,
        "page": 0,
        "versions": members,
        "proof": proof,
    }
    return signed(body, signer)


def address(record: dict[str, Any]) -> str:
    return records.compute_hash(record)


def version(record: dict[str, Any]) -> str:
    body = canonical.canonical_bytes(record)
    return hashlib.sha256(body).hexdigest() if record["kind"] == "entry" else address(record)


def verified(record: dict[str, Any]) -> Verified:
    """The record as the verify workers pass it (every state-free check run)."""
    checked = verify_record(canonical.canonical_bytes(record), address(record))
    assert isinstance(checked, Verified), checked
    return checked


@dataclass(frozen=True)
class Story:
    """Every record of the story by name."""

    records: dict[str, dict[str, Any]]

    @property
    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return [(address(r), r) for r in self.records.values() if r["kind"] == "key_event"]


def story() -> Story:
    """The story's records (see the module's docstring)."""
    out: dict[str, dict[str, Any]] = {}
    out["p0"] = post(A, A0, "by A's first key, before any rotation", "2026-03-01T08:00:00Z")
    out["p0x"] = post(A, A0, "by A0 after it was rotated out, backdated", "2026-02-01T08:00:00Z")
    out["e1"] = key_event(
        A0, "rotate", 1, installs=A1, commits=A2, recovery=AR, vouches=[vouching.vouch(A0.did, [version(out["p0"])])]
    )
    out["g1"] = vouch_page(A0, out["e1"], A0, [version(out["p0"])])
    out["gx"] = vouch_page(A0, out["e1"], A0, [version(out["p0x"])])  # its proof does not verify: refused
    out["p1"] = post(A, A1, "by A1, vouched for by the later rotations", "2026-03-02T09:00:00Z")
    out["e2"] = key_event(
        A2, "rotate", 2, prior=out["e1"], installs=A2, vouches=[vouching.vouch(A1.did, [version(out["p1"])])]
    )
    out["g2"] = vouch_page(A2, out["e2"], A1, [version(out["p1"])])
    # a link by A1 that no later event vouches for: stored when it arrives while A1 is current, void once e2 is held
    out["l1x"] = link(A, A1, address(out["p1"]), address(out["p0"]), "2026-03-02T09:30:00Z")
    out["p2"] = post(A, A2, "by the stolen A2, backdated", "2026-01-15T00:00:00Z")
    out["p2b"] = post(A, A2, "by A2 before it was stolen: void after the revocation, vouched for by the recovery")
    out["e3"] = key_event(AR, "revoke", 3, prior=out["e2"], vouches=[vouching.vouch(A2.did, [])])
    out["e4"] = key_event(
        AR,
        "recover",
        2,
        prior=out["e1"],
        installs=A4,
        commits=A5,
        vouches=[vouching.vouch(A1.did, [version(out["p1"])]), vouching.vouch(A2.did, [version(out["p2b"])])],
        created_at="2026-03-05T08:01:00Z",
    )
    out["g4"] = vouch_page(AR, out["e4"], A1, [version(out["p1"])])
    out["g4b"] = vouch_page(AR, out["e4"], A2, [version(out["p2b"])])
    out["p4"] = post(A, A4, "by A4 after the recovery", "2026-03-06T08:00:00Z")
    # signed by A1 while e1's commitment holds: never allowed; and an event building on it
    out["x1"] = key_event(A1, "rotate", 2, prior=out["e1"], installs=U, vouches=[vouching.vouch(A1.did, [])])
    out["x2"] = key_event(U, "rotate", 3, prior=out["x1"], installs=A5, vouches=[vouching.vouch(U.did, [])])
    out["pu"] = post(A, U, "by a key no held event installs")
    out["b1"] = post(B0.did, B0, "B has no key events")
    out["b2"] = post(B0.did, B0, "B again")
    return Story(out)


def whole_set_verdicts(s: Story, author: str = A) -> dict[str, str]:
    """Each record's verdict from the whole set at once, by the reference functions: identity.key_history for the
    key events of `author` and each record's key, identity.vouching for the pages."""
    history = key_history.resolve(author, s.events)
    out: dict[str, str] = {}
    for name, record in s.records.items():
        if record["kind"] == "key_event":
            at = address(record)
            if at in history.waiting:
                out[name] = "undecided"
            else:  # refused, or allowed but outside the kept set (e3, on e2's replaced branch: 3.4): never stored
                out[name] = "valid" if at in history.kept else "void"
    pages: dict[tuple[str, str], dict[int, list[str]]] = {}
    for name, record in s.records.items():
        if record["kind"] == "vouch_page":
            event = history.events.get(record["event"])
            if event is None or record["event"] in history.refused:
                out[name] = "undecided" if event is None else "void"
                continue
            v = vouching.vouch_for(event, record["subject"])
            ok = (
                key_history.signer_of(record) == key_history.signer_of(event)
                and v is not None
                and vouching.verify_page(v, record["page"], record["versions"], record["proof"])
            )
            out[name] = "valid" if ok else "void"
            if ok:
                pages.setdefault((record["event"], record["subject"]), {})[record["page"]] = record["versions"]
    for name, record in s.records.items():
        if record["kind"] in ("key_event", "vouch_page"):
            continue
        if record["author_id"] != author:
            out[name] = "valid"
        else:
            out[name] = key_history.key_verdict(history, key_history.signer_of(record), version(record), pages)
    return out


T0 = key(0x20)  # a forked identity: no commitment, no recovery key, so whoever holds T0 forks at will (3.4)
T = T0.did


def fork_story() -> Story:
    """Identity T's first key T0 signs four allowed rotations at one place, named by rank (all rank `current`: the
    smallest address wins): f1 wins, f2 is the runner-up, f3 and f4 are not kept (3.4). The chain goes on from f1 to c1
    and d1; f4 has a child c4 (dropped with it), f2 a child z signed by a key that may not sign (never allowed). A
    post by each installed key, and by the key z would install."""
    out: dict[str, dict[str, Any]] = {}
    keys = [key(0x21 + i) for i in range(4)]
    events = [key_event(T0, "rotate", 1, installs=k, vouches=[vouching.vouch(T, [])], author=T) for k in keys]
    ranked = sorted(zip(events, keys, strict=True), key=lambda pair: address(pair[0]))
    for i, (event, installed) in enumerate(ranked, start=1):
        out[f"f{i}"] = event
        out[f"q{i}"] = post(T, installed, f"by the key f{i} installs")
    (_, k1), (_, k2), _, (_, k4) = ranked
    c1, c4, d1, stranger, strangers_key = key(0x31), key(0x34), key(0x41), key(0x42), key(0x43)
    out["c1"] = key_event(k1, "rotate", 2, prior=out["f1"], installs=c1, vouches=[vouching.vouch(k1.did, [])], author=T)
    out["qc1"] = post(T, c1, "by the key c1 installs")
    out["d1"] = key_event(c1, "rotate", 3, prior=out["c1"], installs=d1, vouches=[vouching.vouch(c1.did, [])], author=T)
    out["qd1"] = post(T, d1, "by the key d1 installs")
    out["c4"] = key_event(k4, "rotate", 2, prior=out["f4"], installs=c4, vouches=[vouching.vouch(k4.did, [])], author=T)
    out["qc4"] = post(T, c4, "by the key c4 installs")
    out["z"] = key_event(
        stranger, "rotate", 2, prior=out["f2"], installs=strangers_key, vouches=[vouching.vouch(k2.did, [])], author=T
    )
    out["qz"] = post(T, strangers_key, "by the key z would install")
    return Story(out)
