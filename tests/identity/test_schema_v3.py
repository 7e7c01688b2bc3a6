"""The format-v3 schemas (`identity.schema_v3`): every published vector is a valid record of its kind, each rule of
docs/format-v3.md refuses what breaks it (with the member's path), and none of it is accepted by today's schemas."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest

from identity import records, schema, schema_v3, vouching
from tests.identity import format_v3_vectors as make

DOCUMENT: dict[str, Any] = json.loads(make.VECTORS.read_text("ascii"))
RECORDS = {vector["name"]: vector["record"] for vector in DOCUMENT["records"]}


def _decode(record: dict[str, Any]) -> Any:
    return msgspec.convert(record, schema_v3.V3_RECORD_TYPES[record["kind"]])


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_every_vector_is_a_valid_record_of_its_kind(name: str) -> None:
    record = RECORDS[name]
    decoded = _decode(record)
    assert type(decoded).__name__.lower().replace("_", "").startswith(record["kind"].replace("_", ""))
    assert msgspec.json.decode(msgspec.json.encode(decoded)) == record  # nothing added, nothing lost
    assert schema_v3.check_canonical_v3(record) is None


def test_the_v3_kinds_are_not_registered_yet() -> None:
    """Today's nodes keep refusing every v3 form (docs/format-v3.md, section 8): nothing registered them."""
    for kind in ("key_event", "vouch_page", "space", "space_member", "space_admin", "space_host", "redaction"):
        assert kind not in schema.RECORD_TYPES
        assert kind not in records.RECORD_KINDS
    assert schema.RECORD_TYPES["entry"] is schema.EntryRecord


def _changed(name: str, members: dict[str, Any]) -> dict[str, Any]:
    """A vector's record with members replaced (`None` removes one)."""
    record = copy.deepcopy(RECORDS[name])
    for key, value in members.items():
        if value is None:
            record.pop(key, None)
        else:
            record[key] = value
    return record


BAD = [
    # entries: v2 exactly with a space
    ("space_entry", {"schema_version": "v1"}, "$.space"),
    ("entry_by_rotated_key", {"schema_version": "v2"}, "$.space"),
    ("space_entry", {"space": "ABC"}, "$.space"),
    # key events
    ("rotate_by_next", {"prior": None}, "$.prior"),
    ("rotate_by_current", {"prior": "0" * 64}, "$.prior"),
    ("rotate_by_current", {"seq": 0}, "$.seq"),
    ("rotate_by_current", {"seq": 10_001}, "$.seq"),
    ("rotate_by_current", {"event": "delete"}, "$.event"),
    ("rotate_by_current", {"key": None}, "$.key"),
    ("recover", {"key": None}, "$.key"),
    ("rotate_by_current", {"key": make.did("A0")}, "$.key"),
    ("rotate_by_current", {"key": make.did("AR")}, "$.key"),
    ("rotate_by_current", {"vouches": None}, "$.vouches"),
    ("rotate_by_current", {"vouches": [RECORDS["recover"]["vouches"][0]] * 17}, "$.vouches"),
    ("recover", {"vouches": list(reversed(RECORDS["recover"]["vouches"]))}, "$.vouches"),
    ("recover", {"vouches": [RECORDS["recover"]["vouches"][0]] * 2}, "$.vouches"),
    ("rotate_by_current", {"next": "xyz"}, "$.next"),
    (
        "rotate_by_current",
        {"vouches": [{"count": 0, "root": "0" * 64, "subject": make.did("A0")}]},
        "$.vouches[0]",
    ),
    (
        "rotate_by_current",
        {"vouches": [{"count": -1, "root": "0" * 64, "subject": make.did("A0")}]},
        "$.vouches[0].count",
    ),
    ("rotate_by_current", {"vouches": [{"count": 1, "root": "0" * 64}]}, "$.vouches[0].subject"),
    # vouch pages
    ("vouch_page", {"versions": list(reversed(RECORDS["vouch_page"]["versions"]))}, "$.versions[1]"),
    ("vouch_page", {"versions": []}, "$.versions"),
    ("vouch_page", {"page": -1}, "$.page"),
    ("vouch_page", {"proof": ["0" * 64] * 22}, "$.proof"),
    # spaces
    ("space", {"nonce": RECORDS["space"]["nonce"] + "A"}, "$.nonce"),
    ("space", {"nonce": RECORDS["space"]["nonce"][:-1] + "B"}, "$.nonce"),  # a second spelling of 32 bytes
    ("space", {"name": ""}, "$.name"),
    ("space", {"name": "x" * 129}, "$.name"),
    ("space", {"space": "0" * 64}, "$.space"),
    ("member_add", {"role": "owner"}, "$.role"),
    ("member_add", {"role": "admin"}, "$.role"),  # admin roles have their own chain
    ("admin_add", {"role": "writer"}, "$.role"),
    ("admin_add", {"role": "none"}, "$.role"),
    ("admin_add", {"seq": 2, "prior": "0" * 64, "role": "none"}, "$.vouches"),
    ("admin_add", {"vouches": [vouching.vouch(make.did("C0"), []).as_json()]}, "$.vouches"),
    (
        "admin_add",
        {"seq": 2, "prior": "0" * 64, "role": "none", "vouches": [vouching.vouch(make.did("B0"), []).as_json()]},
        "$.vouches[0].subject",
    ),
    ("member_add", {"role": "none"}, "$.role"),
    ("member_remove", {"prior": None}, "$.prior"),
    ("member_remove", {"vouches": [vouching.vouch(make.did("A0"), []).as_json()]}, "$.vouches[0].subject"),
    ("member_remove", {"vouches": RECORDS["member_remove"]["vouches"] * 2}, "$.vouches"),
    ("host", {"role": "none"}, "$.role"),
    ("host", {"role": "admin"}, "$.role"),
    # redactions
    ("redaction_by_author", {"reason": ""}, "$.reason"),
    ("redaction_by_author", {"reason": "x" * 1025}, "$.reason"),
    ("redaction_by_author", {"target": "1234"}, "$.target"),
    ("redaction_by_author", {"extra": 1}, "$.extra"),
    ("redaction_by_author", {"target": None}, "$.target"),
]


@pytest.mark.parametrize(("name", "members", "field"), BAD, ids=[f"{n}-{f}-{i}" for i, (n, _, f) in enumerate(BAD)])
def test_a_record_breaking_a_rule_is_refused_with_its_path(name: str, members: dict[str, Any], field: str) -> None:
    with pytest.raises(msgspec.ValidationError) as caught:
        _decode(_changed(name, members))
    assert records._path_of(str(caught.value)) == field  # the path reader records.check uses


def test_a_signing_key_naming_the_first_key_is_not_canonical() -> None:
    record = _changed("space_entry", {"signing_key": RECORDS["space_entry"]["author_id"]})
    assert schema_v3.check_canonical_v3(record) == "$.signing_key"
    assert schema_v3.check_canonical_v3(RECORDS["entry_by_rotated_key"]) is None


def test_the_existing_kinds_keep_their_rules() -> None:
    """A v3 form of a v1 kind still obeys the v1 kind's rules (the message tags rule here, inherited)."""
    message = {
        "kind": "message",
        "schema_version": "v1",
        "author_id": make.did("A0"),
        "signing_key": make.did("A1"),
        "created_at": "2026-03-03T08:07:00Z",
        "message_type": "note",
        "body": "hello",
        "payload": {},
        "dependency_ids": [],
        "tags": [make.did("A0")],
        "authority": "raw",
        "truth_state": "fact",
        "confidence": 1,
        "signature": "x",
    }
    assert isinstance(_decode(message), schema_v3.MessageRecordV3)
    with pytest.raises(msgspec.ValidationError):
        _decode({**message, "tags": [make.did("B0")]})
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(message, schema.MessageRecord)  # today's schema refuses signing_key
