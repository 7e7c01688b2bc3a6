"""wire.unsigned: the message and task-event records the node and the client build alike."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from identity import canonical, keys, records
from identity.schema import MAX_CHECKPOINT_BYTES, MAX_PAYLOAD_BYTES, MessageRecord, TaskEventRecord
from wire import unsigned
from wire.workflows import DeclareTask, PostMessage

ALICE = keys.SigningKey.generate()
BOB = keys.SigningKey.generate()
NODE = keys.SigningKey.generate()
CREATED = "2026-01-02T03:04:05Z"


def message(**fields: Any) -> PostMessage:
    return msgspec.convert({"message_type": "status", **fields}, PostMessage)


def test_next_event_ms_never_goes_back() -> None:
    assert unsigned.next_event_ms(None, 1_000) == 1_000
    assert unsigned.next_event_ms(999, 1_000) == 1_000
    assert unsigned.next_event_ms(1_000, 1_000) == 1_001  # two events in one millisecond
    assert unsigned.next_event_ms(5_000, 1_000) == 5_001  # a clock that went back


@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [  # RFC 7396 appendix A
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch_follows_rfc_7396(target: Any, patch: Any, result: Any) -> None:
    assert unsigned.merge_patch(target, patch) == result


def test_merge_patch_leaves_its_inputs_alone() -> None:
    target = {"a": {"b": 1}}
    unsigned.merge_patch(target, {"a": {"b": 2}, "c": 3})
    assert target == {"a": {"b": 1}}


def test_a_checkpoint_may_grow_to_its_limit_and_an_oversized_one_may_shrink() -> None:
    big = "x" * (MAX_CHECKPOINT_BYTES - 100)
    assert unsigned.checkpoint_too_large({}, {"blob": big}) is None
    reason = unsigned.checkpoint_too_large({"blob": big}, {"more": "y" * 200})
    assert reason is not None and str(MAX_CHECKPOINT_BYTES) in reason and "null" in reason
    over = {"a": "x" * MAX_CHECKPOINT_BYTES, "b": "y"}  # already over (two patches merged across a partition)
    assert unsigned.checkpoint_too_large(over, {"b": None}) is None  # shrinking is allowed
    assert unsigned.checkpoint_too_large(over, {"c": "z"}) is not None  # growing is not


def test_a_direct_message_record() -> None:
    record = unsigned.unsigned_message(
        ALICE.did,
        message(body="Cafe\u0301", to_agent=BOB.did, payload={"n": 0.5}, dependency_ids=["d1"], project="shed"),
        CREATED,
    )
    assert record == {
        "kind": "message",
        "schema_version": "v1",
        "author_id": ALICE.did,
        "created_at": CREATED,
        "message_type": "status",
        "body": "Café",
        "payload": {"n": 0.5},
        "dependency_ids": ["d1"],
        "tags": sorted([ALICE.did, BOB.did]),
        "authority": "raw",
        "truth_state": "fact",
        "confidence": 1,
        "to_agent": BOB.did,
        "project": "shed",
    }
    _, decoded = records.check(records.sign(record, ALICE))
    assert isinstance(decoded, MessageRecord) and decoded.to_agent == BOB.did


def test_a_broadcast_has_no_recipient_and_one_tag() -> None:
    record = unsigned.unsigned_message(ALICE.did, message(), CREATED)
    assert record["tags"] == [ALICE.did] and "to_agent" not in record and "project" not in record
    assert isinstance(records.check(records.sign(record, ALICE))[1], MessageRecord)


def test_a_message_payload_is_refused_by_name_beyond_its_limit() -> None:
    with pytest.raises(canonical.CanonicalError) as info:
        unsigned.unsigned_message(ALICE.did, message(payload={"blob": "x" * MAX_PAYLOAD_BYTES}), CREATED)
    assert info.value.field == "$.payload"
    with pytest.raises(canonical.CanonicalError) as info:
        unsigned.unsigned_message(ALICE.did, message(payload={"x": float("inf")}), CREATED)
    assert info.value.field.startswith("$.payload")


def test_declared_and_changed_fields() -> None:
    body = msgspec.convert(
        {"key": "shed", "title": "Build", "depends_on": ["b", "a", "b"], "checkpoint": {"n": 1.0}}, DeclareTask
    )
    fields = unsigned.declared_fields(body)
    assert fields == {"task_key": "shed", "title": "Build", "depends_on": ["a", "b"], "checkpoint": {"n": 1}}
    assert unsigned.changed_fields(fields, None) == {"title": "Build", "depends_on": ["a", "b"], "checkpoint": {"n": 1}}
    now = unsigned.TaskNow(title="Build", status="pending", depends_on=["a", "b"], checkpoint={"n": 1})
    assert unsigned.changed_fields(fields, now) == {}  # a re-declared plan appends nothing
    moved = unsigned.TaskNow(title="Old", status="pending", depends_on=["a"], checkpoint={"n": 1, "m": 2})
    assert unsigned.changed_fields(fields, moved) == {"title": "Build", "depends_on": ["a", "b"]}
    only_key = unsigned.declared_fields(msgspec.convert({"key": "shed"}, DeclareTask))
    assert only_key == {"task_key": "shed"} and unsigned.changed_fields(only_key, None) == {}


def test_task_event_records_are_valid_records() -> None:
    declare = unsigned.unsigned_declare("shed", ALICE.did, CREATED, NODE.did, {"title": "Build", "status": "pending"})
    assert (declare["event"], declare["node_id"], declare["title"]) == ("declare", NODE.did, "Build")
    lease = unsigned.unsigned_task_event(
        "shed", NODE.did, CREATED, "lease", holder=ALICE.did, expires_at="2026-01-02T03:19:05Z"
    )
    lease_hash = records.check(records.sign(lease, NODE))[0]
    complete = unsigned.unsigned_task_event(
        "shed", ALICE.did, CREATED, "complete", **unsigned.finish_fields({"checkpoint": {"done": True}}, lease_hash)
    )
    for record, key in [(declare, ALICE), (complete, ALICE)]:
        _, decoded = records.check(records.sign(record, key))
        assert isinstance(decoded, TaskEventRecord) and decoded.task_key == "shed"
    assert complete["lease"] == lease_hash and complete["checkpoint"] == {"done": True}


def test_finish_fields() -> None:
    assert unsigned.finish_fields({}, None) == {}
    assert unsigned.finish_fields({"checkpoint": {"a": 1}}, "h" * 64) == {"checkpoint": {"a": 1}, "lease": "h" * 64}
    patch = {"checkpoint": {"a": 1}}
    unsigned.finish_fields(patch, "h")
    assert patch == {"checkpoint": {"a": 1}}


def test_status_groups() -> None:
    assert set(unsigned.DONE_STATUSES) | set(unsigned.OPEN_STATUSES) == {"done", "completed", "pending", "processing"}
