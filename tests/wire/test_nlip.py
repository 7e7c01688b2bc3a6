"""The nlip-sdk wrapper: parsing refuses what the SDK lets through, errors keep their code, pushes round-trip."""

from __future__ import annotations

import pytest

from wire import nlip
from wire.api import Envelope
from wire.push import PushPayload

ENV = Envelope(
    1,
    2,
    "h" * 64,
    "did:key:z",
    "2026-01-01T00:00:00Z",
    "question",
    "request",
    ["t"],
    0.5,
    True,
    [],
    1,
    "directed_request",
    1,
)


@pytest.mark.parametrize(
    ("value", "code", "field"),
    [
        ([], "invalid_nlip_message", "$"),
        ({"format": "text", "subformat": "english"}, "invalid_nlip_message", "$.content"),
        ({"format": "bogus", "subformat": "x", "content": "a"}, "invalid_nlip_format", "$.format"),
        ({"format": "text", "subformat": "english", "content": "a", "extra": 1}, "invalid_nlip_message", "$.extra"),
        (
            {"format": "text", "subformat": "e", "content": "a", "submessages": [{"format": "text"}] * 40},
            "invalid_nlip_message",
            "$.submessages[0]",
        ),
    ],
)
def test_parse_refuses_bad_messages(value: object, code: str, field: str) -> None:
    with pytest.raises(nlip.NlipError) as caught:
        nlip.parse(value)
    assert (caught.value.code, caught.value.field) == (code, field)


def test_an_error_message_carries_code_text_and_field() -> None:
    msg = nlip.error_message("unknown_op", "no such op", "$.content.op")
    assert (msg.format, msg.subformat, msg.content) == ("error", "code", "unknown_op")
    assert [(s.subformat, s.content) for s in msg.submessages or []] == [
        ("text", "no such op"),
        ("field", "$.content.op"),
    ]


def test_a_push_round_trips_and_carries_a_summary() -> None:
    payload = PushPayload(node_id="did:key:n", agent_id="did:key:a", notifications=[ENV], more=2)
    raw = nlip.push_message(payload)
    assert nlip.push_payload(raw) == payload
    message = nlip.parse(__import__("json").loads(raw))
    assert "3 new notifications (1 tier 1)" in (message.extract_text() or "")
    with pytest.raises(nlip.NlipError) as caught:
        nlip.push_payload(nlip.encode(nlip.structured({"x": 1}, label="other")))
    assert caught.value.code == "not_a_push"
    assert nlip.labeled(nlip.structured({}, label="A"), "a") is not None
