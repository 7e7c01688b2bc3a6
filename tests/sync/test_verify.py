"""sync.verify: every check a received record passes before it is stored, each refusal with its reason word."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from identity import canonical, keys, records
from sync import verify
from sync.store import Invalid, Verified
from tests.sync.conftest import body_of, hash_of, signed_entry

AUTHOR = keys.SigningKey.generate()


def reason(raw: bytes, claimed: str | None = None) -> str:
    result = verify.verify_record(raw, claimed)
    assert isinstance(result, Invalid), result
    return result.reason


def test_a_good_record_is_verified_with_its_hash_and_struct() -> None:
    record = signed_entry(AUTHOR, "a fine record")
    for claimed in (hash_of(record), None):
        result = verify.verify_record(body_of(record), claimed)
        assert isinstance(result, Verified)
        assert (result.hash, result.body, result.record) == (hash_of(record), body_of(record), record)
        assert result.decoded.content == "a fine record"


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"{", "malformed"),
        (b"[1, 2]", "malformed"),
        (b'"text"', "malformed"),
        (b"[" * 200 + b"]" * 200, "malformed"),
        (b'{"a":' * 40 + b"1" + b"}" * 40, "malformed"),
        (b"x" * (verify.MAX_WIRE_RECORD_BYTES + 1), "too_large"),
    ],
)
def test_what_is_not_a_record(raw: bytes, why: str) -> None:
    assert reason(raw) == why


def test_bytes_must_be_the_canonical_form() -> None:
    record = signed_entry(AUTHOR, "spaced out")
    spaced = json.dumps(record, sort_keys=True).encode()  # ", " and ": " separators
    assert reason(spaced) == "not_canonical"
    unsorted = json.dumps(dict(reversed(list(record.items()))), separators=(",", ":")).encode()
    assert reason(unsorted) == "not_canonical"


def test_the_claimed_hash_must_match() -> None:
    record = signed_entry(AUTHOR, "claimed")
    result = verify.verify_record(body_of(record), "0" * 64)
    assert isinstance(result, Invalid) and result.reason == "hash_mismatch" and result.hash == "0" * 64
    assert hash_of(record) in result.detail


def test_a_record_that_cannot_be_hashed_is_malformed() -> None:
    assert reason(body_of({"kind": "entry", "author_id": AUTHOR.did})) == "malformed"


def test_signature_and_schema() -> None:
    record = signed_entry(AUTHOR, "signed")
    forged = {**record, "content": "changed after signing"}
    result = verify.verify_record(body_of(forged), None)
    assert isinstance(result, Invalid) and result.reason == "bad_signature" and result.hash == hash_of(forged)
    unsigned = {k: v for k, v in record.items() if k != "signature"}
    wrong_schema = records.sign({**unsigned, "confidence": 2}, AUTHOR)
    assert reason(body_of(wrong_schema)) == "schema"


def test_a_local_record_never_travels() -> None:
    record = signed_entry(AUTHOR, "mine only", scope="local")
    result = verify.verify_record(body_of(record), hash_of(record))
    assert isinstance(result, Invalid) and (result.reason, result.hash) == ("local_scope", hash_of(record))


def test_a_record_dated_far_ahead_is_refused_until_its_time() -> None:
    def dated(seconds_ahead: float) -> dict[str, Any]:
        moment = canonical.format_created_at(datetime.fromtimestamp(time.time() + seconds_ahead, UTC))
        return signed_entry(AUTHOR, f"from the future {seconds_ahead}", created_at=moment)

    assert reason(body_of(dated(verify.MAX_FUTURE_S + 3600))) == "future_dated"
    assert isinstance(verify.verify_record(body_of(dated(verify.MAX_FUTURE_S - 3600)), None), Verified)


def test_a_workers_verdicts_give_back_what_verify_record_gives() -> None:
    good = [signed_entry(AUTHOR, f"verdict {i}") for i in range(3)]
    items: list[tuple[bytes, str | None, str | None]] = [(body_of(r), hash_of(r), None) for r in good]
    items += [(b"{", None, None), (body_of(good[0]), "0" * 64, None), (body_of(good[1]), None, "f" * 64)]
    answers = verify.verdicts(items)
    assert answers[:3] == [hash_of(r) for r in good]
    reasons = [a.reason for a in answers[3:] if isinstance(a, Invalid)]
    assert reasons == ["malformed", "hash_mismatch", "version_mismatch"]
    assert verify.accept_all(items, answers) == [verify.verify_record(*item) for item in items]


def test_a_passed_record_that_does_not_decode_here_is_verified_here() -> None:
    record = signed_entry(AUTHOR, "decoded again")
    raw = body_of(record)
    # a worker that wrongly passed bytes this process cannot decode: this process's own verification answers
    assert verify.accept_all([(b"{", None, None)], [hash_of(record)]) == [verify.verify_record(b"{", None)]
    assert verify.accept_all([(raw, None, None)], [hash_of(record)]) == [verify.verify_record(raw, None)]


def test_a_worker_learns_the_record_kinds_its_parent_knows() -> None:
    from identity import schema

    before = dict(schema.RECORD_TYPES)
    verify.register_types(before)
    assert before == schema.RECORD_TYPES


# ---- format v3 forms from peers: every state-free check here, the signature against the named key --------------


def _v3(body: dict[str, Any], signer: keys.SigningKey) -> dict[str, Any]:
    return {**body, "signature": signer.sign(canonical.canonical_bytes(body))}


def test_a_record_signed_by_its_signing_key_passes_and_decodes_as_v3() -> None:
    from identity import schema_v3

    rotated = keys.SigningKey.generate()
    unsigned = records.unsigned(signed_entry(AUTHOR, "signed by a rotated key")) | {"signing_key": rotated.did}
    record = _v3(unsigned, rotated)
    result = verify.verify_record(body_of(record), hash_of(record))
    assert isinstance(result, Verified) and isinstance(result.decoded, schema_v3.EntryRecordV3)
    item = (body_of(record), hash_of(record), None)
    (answer,) = verify.accept_all([item], verify.verdicts([item]))
    assert isinstance(answer, Verified) and answer.decoded == result.decoded
    # signed by the author's first key while naming another: the named key decides
    assert reason(body_of(_v3(unsigned, AUTHOR))) == "bad_signature"
    # naming the author's own first key is another spelling of no signing_key
    assert reason(body_of(_v3(unsigned | {"signing_key": AUTHOR.did}, AUTHOR))) == "not_canonical"
    # a client's record is checked without the v3 forms: still refused there (issue 36)
    with pytest.raises(records.RecordError) as refused:
        records.check(record)
    assert refused.value.reason == "bad_signature"  # against author_id, as for every client record


def test_a_key_event_passes_its_schema_here_and_its_chain_is_left_to_the_writer() -> None:
    from identity import vouching

    event = {
        "kind": "key_event",
        "schema_version": "v1",
        "author_id": AUTHOR.did,
        "created_at": "2026-03-02T08:00:00Z",
        "event": "rotate",
        "seq": 2,  # its prior is not held anywhere: nothing here asks
        "prior": "ab" * 32,
        "key": keys.SigningKey.generate().did,
        "vouches": [vouching.vouch(AUTHOR.did, []).as_json()],
    }
    assert isinstance(verify.verify_record(body_of(_v3(event, AUTHOR)), None), Verified)
    assert reason(body_of(_v3({k: v for k, v in event.items() if k != "prior"}, AUTHOR))) == "schema"
    with pytest.raises(records.RecordError):
        records.check(_v3(event, AUTHOR))  # never from a client


def test_records_of_a_space_are_known_and_a_task_event_in_one_is_too_new() -> None:
    """Records of a space are taken from peers since issue 38 (node/federation/space_gate.py decides them); a task
    event in a space is of a form this release does not take yet: `too_new`, never remembered as invalid, so the
    release that knows it fetches it again (docs/format-v3.md, 8.4)."""
    space_link = {
        "kind": "link",
        "schema_version": "v1",
        "author_id": AUTHOR.did,
        "created_at": "2026-03-02T08:00:00Z",
        "source": "ab" * 32,
        "target": "cd" * 32,
        "link_type": "supports",
        "annotation": "",
        "space": "ef" * 32,
    }
    assert isinstance(verify.verify_record(body_of(_v3(space_link, AUTHOR)), None), Verified)
    space = {
        "kind": "space",
        "schema_version": "v1",
        "author_id": AUTHOR.did,
        "created_at": "2026-03-02T08:00:00Z",
        "name": "kitchen",
        "description": "",
        "nonce": "A" * 43,
    }
    assert isinstance(verify.verify_record(body_of(_v3(space, AUTHOR)), None), Verified)
    task_event = {
        "kind": "task_event",
        "schema_version": "v1",
        "author_id": AUTHOR.did,
        "created_at": "2026-03-02T08:00:00Z",
        "space": "ef" * 32,
    }
    assert reason(body_of(_v3(task_event, AUTHOR))) == "too_new"


def test_a_vouch_page_is_checked_against_its_schema_here_and_against_its_event_by_the_writer() -> None:
    page = {
        "kind": "vouch_page",
        "schema_version": "v1",
        "author_id": AUTHOR.did,
        "created_at": "2026-03-02T08:00:00Z",
        "event": "ab" * 32,  # not held anywhere: nothing here asks
        "subject": AUTHOR.did,
        "page": 0,
        "versions": ["cd" * 32],
        "proof": [],
    }
    assert isinstance(verify.verify_record(body_of(_v3(page, AUTHOR)), None), Verified)
    assert reason(body_of(_v3(page | {"versions": ["cd" * 32, "ab" * 32]}, AUTHOR))) == "schema"  # not sorted
