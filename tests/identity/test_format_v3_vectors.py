"""The record-format-v3 vectors (tests/identity/vectors/format_v3.json) cannot drift from the code, and check out.

The file must be exactly what tests/identity/format_v3_vectors.py builds from the identity package; then every
published output is recomputed here by other means (the standard library's json and hashlib, the seed's reference
code, pymerkle's RFC 9162 tree), as another implementation would check them. The v2 entry preimage is checked
against the seed's reference code changed only as docs/format-v3.md says (schema_version "v2", `space` added),
and the v1 preimage and verifier are shown unchanged.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymerkle import InmemoryTree

from identity import canonical, keys, records, vouching
from identity.keys import SigningKey
from tests.identity import format_v3_vectors as make
from tests.identity.test_canonical import compute_record_hash

DOCUMENT: dict[str, Any] = json.loads(make.VECTORS.read_text("ascii"))
RECORDS = {vector["name"]: vector for vector in DOCUMENT["records"]}
BODY_FIELDS = {"content", "tags", "metadata", "links", "directed_to", "confidence", "payload", "body", "annotation"}


def _json(value: Any) -> str:
    """The canonical JSON definition, straight from the standard library (docs/canonical.md, section 2)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def _v2_reference(author_id: str, created_at: str, entry_type: str, performative: str, content: str, space: str) -> str:
    """The seed's `compute_record_hash` with exactly the two changes of the v2 preimage."""
    nc = unicodedata.normalize("NFC", content).rstrip()
    nc = nc.replace("\r\n", "\n").replace("\r", "\n")
    preimage = {
        "author_id": author_id,
        "content": nc,
        "created_at": created_at,
        "entry_type": entry_type,
        "performative": performative,
        "schema_version": "v2",
        "space": space,
    }
    return hashlib.sha256(_json(preimage).encode("utf-8")).hexdigest()


def _oracle_root(versions: list[str]) -> str:
    tree = InmemoryTree(algorithm="sha256")
    for version in versions:
        tree.append_entry(bytes.fromhex(version))
    return tree.get_root().hex() if versions else hashlib.sha256(b"").hexdigest()


def test_the_file_is_what_the_code_builds() -> None:
    """Run `python -m tests.identity.format_v3_vectors` after a deliberate change of the format, never edit by hand."""
    assert make.VECTORS.read_text("ascii") == make.render(make.build())


def test_the_keys() -> None:
    for name, published in DOCUMENT["keys"].items():
        key = SigningKey.from_seed(bytes.fromhex(published["seed"]))
        assert key.did == published["did"] == make.did(name)
    assert DOCUMENT["commitments"]["A2"] == hashlib.sha256(DOCUMENT["keys"]["A2"]["did"].encode("ascii")).hexdigest()


def test_every_kind_of_the_design_has_a_vector() -> None:
    kinds = {vector["record"]["kind"] for vector in DOCUMENT["records"]}
    assert kinds == {
        "entry", "link", "space", "space_member", "space_admin", "space_host", "key_event", "vouch_page", "redaction"
    }  # fmt: skip
    events = {v["record"]["event"] for v in DOCUMENT["records"] if v["record"]["kind"] == "key_event"}
    assert events == {"rotate", "revoke", "recover"}
    assert {v["record"]["schema_version"] for v in DOCUMENT["records"] if v["record"]["kind"] == "entry"} == {
        "v1",
        "v2",
    }


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_record_vector(name: str) -> None:
    vector = RECORDS[name]
    record = vector["record"]
    unsigned = {k: v for k, v in record.items() if k != "signature"}
    key = SigningKey.from_seed(bytes.fromhex(vector["signer_seed"]))

    # The signer is the record's signing_key, or its author when it names none; naming the author is not allowed.
    assert record.get("signing_key", record["author_id"]) == key.did
    assert record.get("signing_key") != record["author_id"]
    canonical.check_canonical(record)
    assert vector["signing_bytes"] == _json(unsigned)
    assert vector["canonical_bytes"] == _json(record)
    assert keys.verify(key.did, vector["signing_bytes"].encode("ascii"), vector["signature"])
    assert key.sign(vector["signing_bytes"].encode("ascii")) == vector["signature"] == record["signature"]

    if record["kind"] == "entry":
        preimage = vector["hash_preimage"]
        fields: tuple[str, str, str, str, str] = (
            record["author_id"],
            record["created_at"],
            record["entry_type"],
            record["performative"],
            record["content"],
        )
        if record["schema_version"] == "v2":
            assert _v2_reference(*fields, record["space"]) == vector["hash"]
            assert json.loads(preimage)["space"] == record["space"]
        else:
            assert "space" not in record
            assert compute_record_hash(*fields) == vector["hash"]  # the seed's own code: signing_key is left out
        assert hashlib.sha256(preimage.encode("ascii")).hexdigest() == vector["hash"]
        assert hashlib.sha256(vector["canonical_bytes"].encode("ascii")).hexdigest() == vector["version"]
    else:
        assert "hash_preimage" not in vector
        assert (
            hashlib.sha256(vector["signing_bytes"].encode("ascii")).hexdigest() == vector["hash"] == vector["version"]
        )


def test_the_space_is_the_creation_records_hash_and_every_space_record_names_it() -> None:
    space = RECORDS["space"]["hash"]
    for vector in DOCUMENT["records"]:
        record = vector["record"]
        if (
            record["kind"] in ("space_member", "space_admin", "space_host", "redaction")
            or record.get("schema_version") == "v2"
        ):
            assert record["space"] == space, vector["name"]
    assert len(RECORDS["space"]["record"]["nonce"]) == 43  # 32 random bytes, unpadded base64url


def test_the_vouches_are_rfc_9162_roots_of_the_records_they_keep() -> None:
    def vouch_of(name: str, subject: str) -> dict[str, Any]:
        return next(v for v in RECORDS[name]["record"]["vouches"] if v["subject"] == subject)

    a, b, a1, a2 = (DOCUMENT["keys"][k]["did"] for k in ("A0", "B0", "A1", "A2"))
    kept_of_b = [RECORDS["space_entry"]["version"]]
    assert vouch_of("member_remove", b) == {"count": 1, "root": _oracle_root(kept_of_b), "subject": b}
    a0_kept = sorted(RECORDS[n]["version"] for n in ("space", "member_add", "admin_add", "host", "member_remove"))
    assert vouch_of("rotate_by_current", a) == {"count": 5, "root": _oracle_root(a0_kept), "subject": a}
    a1_kept = sorted(RECORDS[n]["version"] for n in ("entry_by_rotated_key", "link_by_rotated_key"))
    for name in ("rotate_by_next", "recover"):
        assert vouch_of(name, a1) == {"count": 2, "root": _oracle_root(a1_kept), "subject": a1}
    for name in ("revoke_by_recovery", "recover"):
        assert vouch_of(name, a2) == {"count": 0, "root": hashlib.sha256(b"").hexdigest(), "subject": a2}
    for vector in DOCUMENT["records"]:
        listed = vector["record"].get("vouches", [])
        assert [v["subject"] for v in listed] == sorted({v["subject"] for v in listed}), vector["name"]
        for item in listed:
            vouching.Vouch.from_json(item)


def test_every_vouch_page_verifies_against_its_event_and_decides() -> None:
    pages = [v for v in DOCUMENT["records"] if v["record"]["kind"] == "vouch_page"]
    assert len(pages) == 3
    for vector in pages:
        page = vector["record"]
        event = next(v for v in DOCUMENT["records"] if v["hash"] == page["event"])
        v = vouching.vouch_for(event["record"], page["subject"])
        assert v is not None and page["subject"] == v.subject
        assert page.get("signing_key") == event["record"].get("signing_key")  # signed by the event's signer
        assert vouching.verify_page(v, page["page"], page["versions"], page["proof"])
        for version in page["versions"]:
            assert vouching.decide(version, event["record"], page["subject"], {page["page"]: page["versions"]}) == (
                "vouched"
            )
        assert vouching.decide(vector["version"], event["record"], page["subject"], {0: page["versions"]}) == "void"


def test_the_key_history_vector() -> None:
    """The story's expected outcome, spelled out: the recovery wins at seq 2, the stolen key's backdated entry is
    void, every other record of A stands."""
    published = DOCUMENT["key_history"]
    assert published["chain"] == ["rotate_by_current", "recover"]
    assert published["state"]["key"] == DOCUMENT["keys"]["A4"]["did"]
    assert published["losing_keys"] == [DOCUMENT["keys"]["A2"]["did"]]
    assert published["refused"] == {}
    assert published["kept"] == ["rotate_by_current", "rotate_by_next", "recover"]  # not the loser's follower
    verdicts = {item["record"]: item["verdict"] for item in published["verdicts"]}
    assert verdicts.pop("entry_by_stolen_key") == "void"
    assert set(verdicts.values()) == {"valid"}
    for item in published["verdicts"]:
        record = RECORDS[item["record"]]["record"]
        assert item["signing_key"] == record.get("signing_key", record["author_id"])


def test_the_spaces_vector() -> None:
    """The space's expected outcome, spelled out: B added, removed with only its first post vouched for, made a
    reader again by admin C; the backdated post void; every other record of the space valid (the owner's rotated
    keys included, by A's key history)."""
    (published,) = DOCUMENT["spaces"]
    a, b, c, n = (DOCUMENT["keys"][k]["did"] for k in ("A0", "B0", "C0", "N"))
    assert published["space"] == "space" and published["owner"] == a
    assert published["roles"] == {a: "owner", b: "reader", c: "admin"} and published["hosts"] == [n]
    assert published["chains"] == {
        "admin": {c: ["admin_add"]},
        "member": {b: ["member_add", "member_remove", "member_by_admin"]},
        "host": {n: ["host"]},
    }
    verdicts = {item["record"]: (item["verdict"], item.get("reason")) for item in published["verdicts"]}
    assert verdicts.pop("space_entry_backdated") == ("void", "unvouched")
    assert set(verdicts.values()) == {("valid", None)}
    assert "redaction_by_author" not in verdicts  # redactions are decided against their targets (issue 39)
    page = RECORDS["vouch_page_of_member_remove"]["record"]
    v = vouching.vouch_for(RECORDS["member_remove"]["record"], b)
    assert v is not None and vouching.verify_page(v, page["page"], page["versions"], page["proof"])
    assert page["versions"] == [RECORDS["space_entry"]["version"]]


def test_merkle_vectors() -> None:
    merkle = DOCUMENT["merkle"]
    assert merkle["page_leaves"] == vouching.PAGE_LEAVES
    for item in merkle["vectors"]:
        versions = sorted(hashlib.sha256(str(i).encode("ascii")).hexdigest() for i in range(item["n"]))
        if "versions" in item:
            assert item["versions"] == versions
        assert item["root"] == _oracle_root(versions)
        assert item["pages"] == -(-item["n"] // vouching.PAGE_LEAVES)
        v = vouching.Vouch(make.did("A0"), item["n"], item["root"])
        for index, proof in item.get("page_proofs", {}).items():
            members = versions[int(index) * vouching.PAGE_LEAVES : (int(index) + 1) * vouching.PAGE_LEAVES]
            assert vouching.verify_page(v, int(index), members, proof)


def test_the_tombstone_keeps_the_envelope_and_no_body() -> None:
    for item in DOCUMENT["tombstones"]:
        stone = item["tombstone"]
        assert item["canonical_bytes"] == _json(stone)
        assert not BODY_FIELDS & set(stone)
        target = next(v for v in DOCUMENT["records"] if v["hash"] == stone["hash"])
        redaction = next(v for v in DOCUMENT["records"] if v["hash"] == stone["redaction"])
        assert redaction["record"]["target"] == stone["hash"]
        assert stone["versions"] == [target["version"]]
        for name in ("kind", "author_id", "created_at", "space"):
            assert stone[name] == target["record"][name]
        assert (stone["redacted_by"], stone["redacted_at"]) == (
            redaction["record"]["author_id"],
            redaction["record"]["created_at"],
        )


def test_todays_verifier_refuses_every_new_form_as_malformed() -> None:
    """What a node of the previous protocol does with them (docs/format-v3.md, "Versions"): so a v3 node must not
    send them to it. The v1 forms it still accepts, a v1 entry without signing_key among them, are unchanged."""
    for name, vector in RECORDS.items():
        with pytest.raises(records.RecordError) as caught:
            records.check(vector["record"])
        assert caught.value.reason in ("malformed", "bad_signature", "schema"), name
    # the v1 entry signed by a rotated key has the address it would have had unsigned by it
    entry = RECORDS["entry_by_rotated_key"]["record"]
    plain = {k: v for k, v in entry.items() if k not in ("signing_key", "signature")}
    assert records.compute_hash(plain) == RECORDS["entry_by_rotated_key"]["hash"]


text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


@given(text, text, st.binary(min_size=32, max_size=32).map(bytes.hex))
def test_the_v2_preimage_is_the_seeds_with_space_added(content: str, entry_type: str, space: str) -> None:
    author = make.did("B0")
    created = "2026-03-01T09:02:00.250Z"
    v2 = canonical.space_record_hash(author, created, entry_type, "inform", content, space)
    assert v2 == _v2_reference(author, created, entry_type, "inform", content, space)
    preimage = canonical.space_entry_preimage(author, created, entry_type, "inform", content, space)
    assert hashlib.sha256(preimage).hexdigest() == v2
    assert v2 != canonical.record_hash(author, created, entry_type, "inform", content)
    assert canonical.record_hash(author, created, entry_type, "inform", content) == compute_record_hash(
        author, created, entry_type, "inform", content
    )
