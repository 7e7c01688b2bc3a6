"""The wire types of redaction: what a request may say, and the tombstone's JSON."""

from __future__ import annotations

import msgspec
import pytest

from wire.redaction import RedactionIn, RedactionOut, Tombstone


def test_a_request_names_a_hash_and_an_optional_reason() -> None:
    ok = msgspec.convert({"target": "a" * 64, "reason": "leaked"}, RedactionIn)
    assert ok.target == "a" * 64 and ok.reason == "leaked" and ok.record is None
    for bad in ({"target": "A" * 64}, {"target": "a" * 63}, {"reason": ""}, {"reason": "x" * 1025}, {"other": 1}):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(bad, RedactionIn)


def test_the_tombstone_always_says_redacted_and_a_pending_answer_has_none() -> None:
    tomb = Tombstone(hash="a" * 64, kind="entry", author_id="did:key:x", created_at="2026-01-01T00:00:00Z",
                     redacted_by="did:key:x", redacted_at="2026-01-02T00:00:00Z", redaction="b" * 64,
                     versions=["c" * 64])  # fmt: skip
    data = msgspec.json.decode(msgspec.json.encode(tomb))
    assert data["redacted"] is True and data["space"] is None and data["versions"] == ["c" * 64]
    pending = msgspec.json.decode(
        msgspec.json.encode(RedactionOut(redaction="b" * 64, target="a" * 64, created=True, pending=True))
    )
    assert pending == {"redaction": "b" * 64, "target": "a" * 64, "created": True, "pending": True}
