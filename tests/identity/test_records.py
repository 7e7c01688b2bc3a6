"""Signed records (`identity.records`): signing, hashing and every reason verification refuses one.

`verify` returns the record hash or raises `RecordError` with a stable `reason`
(`malformed`, `not_canonical`, `bad_signature`) and the JSON path of the offending field;
`sign` refuses a key that is not the record's author (`wrong_signer`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from identity import canonical, records, schema
from identity.keys import SigningKey, b64u
from identity.records import RecordError, check, compute_hash, sign, signing_bytes, unsigned, verify

ALICE = SigningKey.from_seed(bytes(32))
BOB = SigningKey.from_seed(b"\x01" * 32)
NFD_E = "e\u0301"


def entry(key: SigningKey = ALICE, /, **fields: Any) -> dict[str, Any]:
    """An unsigned entry record in canonical form, shaped like identity.schema.EntryRecord."""
    record: dict[str, Any] = {
        "kind": "entry",
        "schema_version": "v1",
        "author_id": key.did,
        "created_at": "2026-01-02T03:04:05Z",
        "entry_type": "finding",
        "performative": "inform",
        "content": "The kettle takes 3 minutes.",
        "confidence": 0.5,
        "tags": ["home", "kitchen"],
        "directed_to": [],
        "links": [],
        "metadata": {},
        "truth_state": "fact",
        "authority": "raw",
        "scope": "federation",
    }
    record.update(fields)
    return record


def link(key: SigningKey = ALICE, /, **fields: Any) -> dict[str, Any]:
    """An unsigned link record."""
    record: dict[str, Any] = {
        "kind": "link",
        "schema_version": "v1",
        "author_id": key.did,
        "created_at": "2026-01-02T03:04:05.120Z",
        "source": "a" * 64,
        "target": "b" * 64,
        "link_type": "supports",
        "annotation": "",
    }
    record.update(fields)
    return record


def other_kind(kind: str, key: SigningKey = ALICE) -> dict[str, Any]:
    """An unsigned record of a non-entry kind with some arbitrary canonical fields."""
    return {
        "kind": kind,
        "schema_version": "v1",
        "author_id": key.did,
        "created_at": "2026-06-30T12:00:00.001Z",
        "display_name": "Kitchen agent \U0001f373",
        "payload": {"n": 3, "weights": [0.25, 1], "note": "caf\u00e9"},
    }


def reason_of(record: Any) -> tuple[str, str]:
    """Verify a record expected to be refused; return (reason, field)."""
    with pytest.raises(RecordError) as info:
        verify(record)
    return info.value.reason, info.value.field


# ---------------------------------------------------------------------------------------------
# happy paths
# ---------------------------------------------------------------------------------------------


def test_sign_then_verify_returns_the_entry_hash() -> None:
    signed = sign(entry(), ALICE)
    digest = verify(signed)
    assert digest == compute_hash(signed)
    assert digest == canonical.record_hash(
        signed["author_id"], signed["created_at"], signed["entry_type"], signed["performative"], signed["content"]
    )


@pytest.mark.parametrize("kind", sorted(records.RECORD_KINDS - {"entry"}))
def test_other_kinds_hash_the_signing_bytes(kind: str) -> None:
    record = link() if kind == "link" else other_kind(kind)
    signed = sign(record, ALICE)
    digest = verify(signed)
    assert digest == compute_hash(signed)
    assert digest == hashlib.sha256(canonical.canonical_bytes(record)).hexdigest()
    expected_bytes = json.dumps(record, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode()
    assert signing_bytes(signed) == expected_bytes
    assert digest == hashlib.sha256(expected_bytes).hexdigest()


def test_the_signature_covers_canonical_bytes_of_every_other_field() -> None:
    record = entry()
    signed = sign(record, ALICE)
    assert set(signed) == set(record) | {"signature"}
    assert unsigned(signed) == record
    assert signed["signature"] == ALICE.sign(canonical.canonical_bytes(record))
    assert signing_bytes(signed) == canonical.canonical_bytes(record)


def test_sign_is_deterministic_and_does_not_mutate_its_input() -> None:
    record = entry()
    before = json.dumps(record)
    assert sign(record, ALICE) == sign(record, ALICE)
    assert json.dumps(record) == before
    assert "signature" not in record


def test_sign_replaces_an_existing_signature() -> None:
    signed = sign(entry(), ALICE)
    stale = {**signed, "signature": b64u(bytes(64))}
    assert sign(stale, ALICE) == signed


def test_the_signature_is_not_part_of_the_hash() -> None:
    for record in (entry(), link()):
        signed = sign(record, ALICE)
        assert compute_hash(signed) == compute_hash(record)


def test_entry_hash_covers_only_the_seed_preimage_fields() -> None:
    # Per the seed, an entry's record hash covers author, created_at, entry_type, performative and content.
    # Two entries differing in tags or confidence therefore share a hash though both signatures verify.
    a = sign(entry(tags=["a"]), ALICE)
    b = sign(entry(tags=["b"], confidence=0.9), ALICE)
    assert verify(a) == verify(b)
    assert a["signature"] != b["signature"]


def test_link_hash_changes_with_every_field() -> None:
    base = compute_hash(link())
    for field, value in [("source", "c" * 64), ("annotation", "x"), ("link_type", "contradicts")]:
        assert compute_hash(link(**{field: value})) != base


entry_contents = (
    st.text(min_size=1)
    .map(canonical.normalize_content)
    .filter(bool)
    .filter(lambda s: canonical.normalize_content(s) == s)
)
tag_sets = st.lists(st.text(min_size=1, max_size=12).map(canonical.normalize_content).filter(bool), max_size=5).map(
    lambda tags: sorted(set(tags))
)


@given(
    content=entry_contents,
    tags=tag_sets,
    confidence=st.floats(min_value=0, max_value=1).map(canonical.normalize_float),
    millis=st.integers(0, 999),
)
def test_sign_verify_round_trip_property(content: str, tags: list[str], confidence: float, millis: int) -> None:
    created_at = "2026-01-02T03:04:05Z" if millis == 0 else f"2026-01-02T03:04:05.{millis:03d}Z"
    record = entry(content=content, tags=tags, confidence=confidence, created_at=created_at)
    signed = sign(record, ALICE)
    assert verify(signed) == canonical.record_hash(ALICE.did, created_at, "finding", "inform", content)
    # And the record survives a JSON round trip (as over the wire) unchanged.
    assert verify(json.loads(json.dumps(signed))) == verify(signed)


@given(seed=st.binary(min_size=32, max_size=32))
def test_any_author_key_round_trips(seed: bytes) -> None:
    key = SigningKey.from_seed(seed)
    assert verify(sign(link(key), key)) == compute_hash(link(key))


# ---------------------------------------------------------------------------------------------
# refusals
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, [], "entry", 42])
def test_non_objects_are_malformed(value: Any) -> None:
    assert reason_of(value) == ("malformed", "$")


@pytest.mark.parametrize("kind", ["post", "Entry", "", None, 1])
def test_unknown_kind(kind: Any) -> None:
    record = sign(entry(kind=kind), ALICE)
    assert reason_of(record) == ("malformed", "$.kind")


def test_missing_kind() -> None:
    record = sign(entry(), ALICE)
    del record["kind"]
    assert reason_of(record) == ("malformed", "$.kind")


@pytest.mark.parametrize("kind", [["entry"], {"k": "entry"}])
def test_unhashable_kind_is_malformed(kind: Any) -> None:
    assert reason_of({**sign(entry(), ALICE), "kind": kind}) == ("malformed", "$.kind")


@pytest.mark.parametrize("version", ["v2", "V1", "1", 1, None])
def test_wrong_schema_version(version: Any) -> None:
    assert reason_of(sign(entry(schema_version=version), ALICE)) == ("malformed", "$.schema_version")


def test_missing_schema_version() -> None:
    record = sign(entry(), ALICE)
    del record["schema_version"]
    assert reason_of(record) == ("malformed", "$.schema_version")


@pytest.mark.parametrize(
    "author",
    [
        "alice",
        "",
        None,
        42,
        ALICE.did.replace("did:key:", "did:web:"),
        ALICE.did[:-1],
        ALICE.did + "1",
        ALICE.did[:-1] + "0",
    ],
)
def test_bad_author_did(author: Any) -> None:
    record = {**sign(entry(), ALICE), "author_id": author}
    assert reason_of(record) == ("malformed", "$.author_id")


@pytest.mark.parametrize(
    "created_at",
    [
        "2026-01-02T03:04:05.000Z",
        "2026-01-02T03:04:05+00:00",
        "2026-01-02T03:04:05.120+00:00",
        "2026-01-02T03:04:05",
        "2026-01-02T03:04:05.12Z",
        "2026-01-02 03:04:05Z",
        "2026-02-30T00:00:00Z",
        "",
    ],
)
def test_created_at_misspelled(created_at: Any) -> None:
    # Signed by the author over the mis-spelled value: the signature is fine, the spelling is not.
    record = sign(entry(created_at=created_at), ALICE)
    assert reason_of(record) == ("not_canonical", "$.created_at")


def test_missing_created_at() -> None:
    record = entry()
    del record["created_at"]
    assert reason_of(sign(record, ALICE)) == ("malformed", "$.created_at")


@pytest.mark.parametrize("created_at", [None, 1767323045, ["2026-01-02T03:04:05Z"]])
def test_created_at_not_a_string(created_at: Any) -> None:
    assert reason_of(sign(entry(created_at=created_at), ALICE)) == ("malformed", "$.created_at")


def test_created_at_with_trailing_newline() -> None:
    assert reason_of(sign(entry(created_at="2026-01-02T03:04:05Z\n"), ALICE)) == ("not_canonical", "$.created_at")


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"content": f"caf{NFD_E}"}, "$.content"),
        ({"entry_type": f"finding{NFD_E}"}, "$.entry_type"),
        ({"tags": ["home", f"k{NFD_E}"]}, "$.tags[1]"),
        ({"metadata": {"source": {"title": f"R{NFD_E}sum{NFD_E}"}}}, "$.metadata.source.title"),
        ({"metadata": {"list": [{"x": "\u212b"}]}}, "$.metadata.list[0].x"),
        ({"metadata": {f"k{NFD_E}y": 1}}, f"$.metadata.k{NFD_E}y"),  # non-NFC key: reported at the key
    ],
)
def test_non_nfc_strings_anywhere(fields: dict[str, Any], path: str) -> None:
    assert reason_of(sign(entry(**fields), ALICE)) == ("not_canonical", path)


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"confidence": 1.0}, "$.confidence"),
        ({"confidence": 0.0}, "$.confidence"),
        ({"confidence": -0.0}, "$.confidence"),
        ({"confidence": 0.12345}, "$.confidence"),
        ({"metadata": {"weights": [0.5, 2.0]}}, "$.metadata.weights[1]"),
    ],
)
def test_non_canonical_floats_in_a_signed_record(fields: dict[str, Any], path: str) -> None:
    assert reason_of(sign(entry(**fields), ALICE)) == ("not_canonical", path)


def test_canonical_numbers_are_accepted() -> None:
    for confidence in (1, 0, 0.5, 0.1235):
        verify(sign(entry(confidence=confidence), ALICE))


@pytest.mark.parametrize(
    "content",
    [
        "trailing space ",
        "trailing newline\n",
        "trailing tab\t",
        "trailing nbsp\u00a0",
        "windows\r\nnewlines",
        "old mac\rnewlines",
    ],
)
def test_entry_content_not_normalised(content: str) -> None:
    assert reason_of(sign(entry(content=content), ALICE)) == ("not_canonical", "$.content")


def test_non_entry_kinds_may_carry_trailing_whitespace() -> None:
    # The content rule is the entry hash's; other kinds only need NFC.
    verify(sign(link(annotation="note "), ALICE))


@pytest.mark.parametrize("name", ["entry_type", "performative", "content"])
def test_entry_hash_fields_must_be_strings(name: str) -> None:
    assert reason_of(sign(entry(**{name: 5}), ALICE)) == ("malformed", f"$.{name}")


@pytest.mark.parametrize("name", ["entry_type", "performative", "content"])
def test_entry_hash_fields_must_be_present(name: str) -> None:
    record = entry()
    del record[name]
    assert reason_of(sign(record, ALICE)) == ("malformed", f"$.{name}")


def test_missing_signature() -> None:
    assert reason_of(entry()) == ("bad_signature", "$.signature")


@pytest.mark.parametrize("signature", [None, 5, b"bytes", ["sig"], "", "not base64!", b64u(bytes(64))])
def test_malformed_signature(signature: Any) -> None:
    assert reason_of({**entry(), "signature": signature}) == ("bad_signature", "$.signature")


@pytest.mark.parametrize(
    "change",
    [
        {"content": "The kettle takes 4 minutes."},
        {"confidence": 0.6},
        {"tags": ["home"]},
        {"tags": ["home", "kitchen", "zz"]},
        {"created_at": "2026-01-02T03:04:06Z"},
        {"entry_type": "synthesis"},
        {"metadata": {"x": 1}},
        {"scope": "local"},
        {"extra": "field"},
    ],
)
def test_tampered_field_after_signing(change: dict[str, Any]) -> None:
    signed = sign(entry(), ALICE)
    assert reason_of({**signed, **change}) == ("bad_signature", "$.signature")


def test_removed_field_after_signing() -> None:
    signed = sign(entry(), ALICE)
    del signed["tags"]
    assert reason_of(signed) == ("bad_signature", "$.signature")


def test_tampered_link_after_signing() -> None:
    signed = sign(link(), ALICE)
    assert reason_of({**signed, "target": "c" * 64}) == ("bad_signature", "$.signature")


@given(st.text(min_size=1).map(canonical.normalize_content).filter(bool))
def test_any_content_change_breaks_the_signature(new_content: str) -> None:
    signed = sign(entry(), ALICE)
    if new_content == signed["content"]:
        return
    assert reason_of({**signed, "content": new_content}) == ("bad_signature", "$.signature")


def test_signature_by_a_different_key() -> None:
    body = entry(ALICE)
    forged = {**body, "signature": BOB.sign(canonical.canonical_bytes(body))}
    assert reason_of(forged) == ("bad_signature", "$.signature")


def test_signature_moved_to_another_author() -> None:
    # Bob's valid record re-attributed to Alice: the signature does not verify against Alice's did.
    signed = sign(entry(BOB), BOB)
    assert reason_of({**signed, "author_id": ALICE.did}) == ("bad_signature", "$.signature")


def test_sign_refuses_a_key_that_is_not_the_author() -> None:
    with pytest.raises(RecordError) as info:
        sign(entry(ALICE), BOB)
    assert info.value.reason == "wrong_signer"
    assert info.value.field == "$.author_id"


def test_sign_takes_the_key_a_record_names_in_signing_key_and_no_other() -> None:
    # a rotated key signs for its identity: the record names it (docs/format-v3.md 2), and verifies against it
    record = sign({**entry(ALICE), "signing_key": BOB.did}, BOB)
    assert records.verify(record, v3=True) == records.compute_hash(record)
    with pytest.raises(RecordError) as info:
        sign({**entry(ALICE), "signing_key": BOB.did}, ALICE)
    assert (info.value.reason, info.value.field) == ("wrong_signer", "$.signing_key")


def test_sign_refuses_a_record_without_author() -> None:
    record = entry()
    del record["author_id"]
    with pytest.raises(RecordError) as info:
        sign(record, ALICE)
    assert info.value.reason == "wrong_signer"


def test_record_error_is_a_value_error() -> None:
    assert issubclass(RecordError, ValueError)


@pytest.mark.parametrize("content", ["x\ud800", "\udfff"])
def test_lone_surrogates_are_not_canonical(content: str) -> None:
    assert reason_of(sign(entry(content=content), ALICE)) == ("not_canonical", "$.content")


def test_deeply_nested_record_is_malformed_not_a_crash() -> None:
    deep: Any = "x"
    for _ in range(5_000):
        deep = [deep]
    record = entry(metadata={"deep": deep})
    with pytest.raises(RecordError) as err:
        check(record)
    assert err.value.reason == "malformed"


def test_unknown_and_missing_fields_report_their_own_path() -> None:
    extra = sign({**entry(), "colour": "red"}, ALICE)
    with pytest.raises(RecordError) as err:
        check(extra)
    assert (err.value.reason, err.value.field) == ("schema", "$.colour")
    missing = entry()
    del missing["tags"]
    with pytest.raises(RecordError) as err:
        check(sign(missing, ALICE))
    assert (err.value.reason, err.value.field) == ("schema", "$.tags")


def test_a_record_just_signed_here_may_skip_only_the_signature_check() -> None:
    """`check_signature=False` (for records the node signed a moment ago) skips Ed25519, never the other rules."""
    good = sign(entry(), ALICE)
    tampered = {**good, "confidence": 0.6}
    assert records.check(good, check_signature=False) == records.check(good)
    assert records.check(tampered, check_signature=False)[0] == records.compute_hash(tampered)
    with pytest.raises(records.RecordError):
        records.check(tampered)
    not_canonical = {**sign(entry(), ALICE), "content": "trailing space "}
    with pytest.raises(records.RecordError) as caught:
        records.check(not_canonical, check_signature=False)
    assert caught.value.reason == "not_canonical"


# ---------------------------------------------------------------------------------------------
# signed bytes cut out of the canonical bytes, and check() given what its caller computed
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "record",
    [
        sign(entry(), ALICE),
        sign(link(), ALICE),
        sign(other_kind("agent"), ALICE),
        # a nested object repeats the member byte for byte: the bytes are encoded again
        {**entry(), "metadata": {"signature": "c2ln"}, "signature": "c2ln"},
        {**entry(), "metadata": {"x": [{"signature": "c2ln"}]}, "signature": "c2ln"},
        {"signature": "c2ln", "tags": ["a"]},  # the first member
        {"signature": "c2ln"},  # the only member
        {"a": 1, "signature": 'caf\u00e9 "q" \\'},  # a signature that is escaped when encoded
        {"a": 1, "signature": 5},  # not a string
        {"a": {"signature": "x"}, "b": '"signature":"x"'},  # no top-level signature at all
    ],
)
def test_signing_bytes_of_is_signing_bytes(record: dict[str, Any]) -> None:
    assert records.signing_bytes_of(record, canonical.canonical_bytes(record)) == signing_bytes(record)


@given(
    st.dictionaries(
        st.text(max_size=12),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=12),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
            max_leaves=8,
        ),
        max_size=6,
    ),
    st.text(max_size=20),
)
def test_signing_bytes_of_is_signing_bytes_property(fields: dict[str, Any], signature: str) -> None:
    record = {**fields, "signature": signature}
    try:
        body = canonical.canonical_bytes(record)
    except ValueError:  # a lone surrogate: not a value a record can hold
        return
    assert records.signing_bytes_of(record, body) == canonical.canonical_bytes(unsigned(record))


def test_check_given_the_canonical_bytes_and_hash_answers_as_without_them() -> None:
    for record in (sign(entry(), ALICE), sign(link(), ALICE)):
        body = canonical.canonical_bytes(record)
        assert check(record, body=body, record_hash=compute_hash(record))[0] == check(record)[0]
    forged = {**sign(entry(), ALICE), "content": "Something else."}
    with pytest.raises(RecordError) as info:
        check(forged, body=canonical.canonical_bytes(forged), record_hash=compute_hash(forged))
    assert info.value.reason == "bad_signature"
    with pytest.raises(RecordError) as info:
        check(sign(entry(), ALICE), body=b"x" * (schema.MAX_RECORD_BYTES + 1))
    assert info.value.reason == "too_large"
