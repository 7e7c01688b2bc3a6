"""identity.schema: the Structs and limits every node applies to the records it stores and syncs."""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec
import pytest

from identity import canonical, keys, records, schema

ALICE = keys.SigningKey.generate()
BOB = keys.SigningKey.generate()
HASH_A, HASH_B = "a" * 64, "b" * 64


def decode(struct: type[msgspec.Struct], record: dict[str, Any]) -> Any:
    return msgspec.convert(record, struct)


def refused(struct: type[msgspec.Struct], record: dict[str, Any]) -> str:
    """The JSON path msgspec names when it refuses `record`."""
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.convert(record, struct)
    match = re.search(r" - at `([^`]*)`$", str(info.value))
    return match.group(1) if match else "$"


def entry(**over: Any) -> dict[str, Any]:
    body = {
        "kind": "entry",
        "schema_version": "v1",
        "author_id": ALICE.did,
        "created_at": "2026-01-02T03:04:05Z",
        "entry_type": "finding",
        "performative": "inform",
        "content": "the kettle is descaled",
        "confidence": 0.5,
        "tags": ["home"],
        "directed_to": [],
        "links": [],
        "metadata": {},
        "truth_state": "fact",
        "authority": "raw",
        "scope": "federation",
        "signature": "sig",
    }
    return {**body, **over}


def message(**over: Any) -> dict[str, Any]:
    body = {
        "kind": "message",
        "schema_version": "v1",
        "author_id": ALICE.did,
        "created_at": "2026-01-02T03:04:05Z",
        "message_type": "status",
        "body": "done",
        "payload": {},
        "dependency_ids": [],
        "tags": [ALICE.did],
        "authority": "raw",
        "truth_state": "fact",
        "confidence": 1,
        "signature": "sig",
    }
    return {**body, **over}


def task_event(event: str, **over: Any) -> dict[str, Any]:
    body = {
        "kind": "task_event",
        "schema_version": "v1",
        "author_id": ALICE.did,
        "created_at": "2026-01-02T03:04:05Z",
        "event": event,
        "task_key": "build-shed",
        "signature": "sig",
    }
    return {**body, **over}


def test_whole_refuses_a_trailing_newline_that_a_bare_dollar_lets_through() -> None:
    bare = Annotated[str, msgspec.Meta(pattern="^[a-z]+$")]
    anchored = Annotated[str, msgspec.Meta(pattern=schema.whole("[a-z]+"))]
    assert msgspec.convert("abc\n", bare) == "abc\n"  # why whole() exists
    assert msgspec.convert("abc", anchored) == "abc"
    for bad in ("abc\n", "abc1", "", "x abc"):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(bad, anchored)
    assert schema.whole("a|b") == "^(?:a|b)$(?!\\n)"  # alternatives stay inside the anchors


def test_the_vocabularies() -> None:
    assert schema.ENTRY_TYPES == ("finding", "question", "synthesis", "contradiction", "task")
    assert "retract" in schema.PERFORMATIVES and len(schema.PERFORMATIVES) == 9
    assert "retracted_by" in schema.LINK_TYPES and len(schema.LINK_TYPES) == 8


def test_every_record_kind_has_a_schema() -> None:
    assert set(schema.RECORD_TYPES) == records.RECORD_KINDS
    assert schema.RECORD_TYPES["entry"] is schema.EntryRecord
    assert schema.RECORD_TYPES["task_event"] is schema.TaskEventRecord


def test_a_valid_entry_decodes() -> None:
    decoded = decode(schema.EntryRecord, entry(links=[{"target": HASH_A, "link_type": "supports"}]))
    assert decoded.content == "the kettle is descaled"
    assert decoded.links == [schema.EntryLink(target=HASH_A, link_type="supports", annotation="")]


@pytest.mark.parametrize(
    ("over", "path"),
    [
        ({"colour": "blue"}, "$"),
        ({"schema_version": "v2"}, "$.schema_version"),
        ({"author_id": "did:key:nope"}, "$.author_id"),
        ({"author_id": ALICE.did + "\n"}, "$.author_id"),
        ({"entry_type": "essay"}, "$.entry_type"),
        ({"content": ""}, "$.content"),
        ({"content": "x" * (schema.MAX_CONTENT_CHARS + 1)}, "$.content"),
        ({"confidence": 1.5}, "$.confidence"),
        ({"tags": ["t"] * (schema.MAX_TAGS + 1)}, "$.tags"),
        ({"tags": ["x" * (schema.MAX_TAG_CHARS + 1)]}, "$.tags[0]"),
        ({"directed_to": ["bob"]}, "$.directed_to[0]"),
        ({"links": [{"target": "A" * 64, "link_type": "supports"}]}, "$.links[0].target"),
        ({"links": [{"target": HASH_A, "link_type": "retracted_by"}]}, "$.links[0].link_type"),
        ({"links": [{"target": HASH_A, "link_type": "supports", "annotation": "a" * 1025}]}, "$.links[0].annotation"),
        ({"scope": "galaxy"}, "$.scope"),
    ],
)
def test_an_entry_out_of_bounds_is_refused_at_its_field(over: dict[str, Any], path: str) -> None:
    assert refused(schema.EntryRecord, entry(**over)) == path


def test_link_and_agent_records() -> None:
    link = {
        "kind": "link",
        "schema_version": "v1",
        "author_id": ALICE.did,
        "created_at": "2026-01-02T03:04:05Z",
        "source": HASH_A,
        "target": HASH_B,
        "link_type": "contradicts",
        "annotation": "",
        "signature": "sig",
    }
    assert decode(schema.LinkRecord, link).link_type == "contradicts"
    assert refused(schema.LinkRecord, {**link, "link_type": "retracted_by"}) == "$.link_type"
    agent = {
        "kind": "agent",
        "schema_version": "v1",
        "author_id": ALICE.did,
        "created_at": "2026-01-02T03:04:05Z",
        "display_name": "Alice",
        "description": "",
        "home_node": BOB.did,
        "signature": "sig",
    }
    assert decode(schema.AgentRecord, agent).home_node == BOB.did
    assert refused(schema.AgentRecord, {**agent, "display_name": ""}) == "$.display_name"
    assert refused(schema.AgentRecord, {**agent, "description": "d" * 2049}) == "$.description"


def test_sets_are_sorted_and_deduplicated() -> None:
    assert schema.sorted_set(["b", "a", "b"]) == ["a", "b"]
    assert schema.check_sets({"tags": ["a", "b"], "directed_to": []}) is None
    assert schema.check_sets({"tags": ["b", "a"]}) == "tags"
    assert schema.check_sets({"tags": ["a"], "directed_to": [BOB.did, BOB.did]}) == "directed_to"
    assert schema.check_sets({"tags": "not a list"}) is None  # the Struct refuses it, not this check


def test_a_message_is_tagged_with_its_two_ends() -> None:
    broadcast = decode(schema.MessageRecord, message())
    assert broadcast.to_agent is msgspec.UNSET and broadcast.project is msgspec.UNSET
    direct = message(to_agent=BOB.did, tags=sorted([ALICE.did, BOB.did]), project="shed")
    assert decode(schema.MessageRecord, direct).to_agent == BOB.did
    assert refused(schema.MessageRecord, message(to_agent=BOB.did)) == "$.tags"
    assert refused(schema.MessageRecord, message(tags=[BOB.did])) == "$.tags"
    assert refused(schema.MessageRecord, message(confidence=0.5)) == "$.confidence"
    big = {"blob": "x" * schema.MAX_PAYLOAD_BYTES}
    assert refused(schema.MessageRecord, message(payload=big)) == "$.payload"


def test_task_events_carry_only_their_own_fields() -> None:
    node = BOB.did
    declared = decode(schema.TaskEventRecord, task_event("declare", node_id=node, depends_on=["a", "b"]))
    assert declared.depends_on == ["a", "b"] and declared.holder is msgspec.UNSET
    assert refused(schema.TaskEventRecord, task_event("declare")) == "$.node_id"
    assert refused(schema.TaskEventRecord, task_event("declare", node_id=node, holder=node)) == "$.holder"
    assert refused(schema.TaskEventRecord, task_event("declare", node_id=node, depends_on=["b", "a"])) == (
        "$.depends_on"
    )
    assert refused(schema.TaskEventRecord, task_event("declare", node_id=node, depends_on=["build-shed"])) == (
        "$.depends_on"
    )
    big = {"blob": "x" * schema.MAX_CHECKPOINT_BYTES}
    assert refused(schema.TaskEventRecord, task_event("declare", node_id=node, checkpoint=big)) == "$.checkpoint"
    assert refused(schema.TaskEventRecord, task_event("release", lease=HASH_A, title="t")) == "$.title"
    assert decode(schema.TaskEventRecord, task_event("complete", lease=HASH_A, checkpoint={"n": 1})).lease == HASH_A


def test_a_lease_expires_after_it_was_granted() -> None:
    lease = task_event("lease", holder=BOB.did, expires_at="2026-01-02T03:19:05Z")
    assert decode(schema.TaskEventRecord, lease).expires_at == "2026-01-02T03:19:05Z"
    assert refused(schema.TaskEventRecord, task_event("lease", holder=BOB.did)) == "$.expires_at"
    assert refused(schema.TaskEventRecord, {**lease, "expires_at": "2026-01-02T03:04:05Z"}) == "$.expires_at"
    assert refused(schema.TaskEventRecord, {**lease, "expires_at": "2026-01-02 03:19:05"}) == "$.expires_at"
    assert refused(schema.TaskEventRecord, {**lease, "created_at": "yesterday"}) == "$.created_at"


@pytest.mark.parametrize("key", ["12345", "", "has space", "k" * 129, "slash/key"])
def test_a_task_key_is_a_name_never_all_digits(key: str) -> None:
    assert refused(schema.TaskEventRecord, task_event("release", task_key=key)) == "$.task_key"


def test_a_registered_record_kind_is_checked_against_its_schema() -> None:
    """records.check decodes a record against whatever schema is registered for its kind."""

    class ShortLinkRecord(schema.LinkRecord, forbid_unknown_fields=True):
        annotation: Annotated[str, msgspec.Meta(max_length=3)]

    link = records.sign(
        {
            "kind": "link",
            "schema_version": canonical.SCHEMA_VERSION,
            "author_id": ALICE.did,
            "created_at": "2026-01-02T03:04:05Z",
            "source": HASH_A,
            "target": HASH_B,
            "link_type": "supports",
            "annotation": "longer than three",
        },
        ALICE,
    )
    assert isinstance(records.check(link)[1], schema.LinkRecord)
    schema.register_record_type("link", ShortLinkRecord)
    try:
        assert schema.RECORD_TYPES["link"] is ShortLinkRecord
        with pytest.raises(records.RecordError) as info:
            records.check(link)
        assert (info.value.reason, info.value.field) == ("schema", "$.annotation")
    finally:
        schema.register_record_type("link", schema.LinkRecord)
    assert schema.RECORD_TYPES["link"] is schema.LinkRecord
