"""NLIP messages through `nlip-sdk`, wrapped where the SDK falls short (issue 26).

What the wrapper fixes or avoids in nlip-sdk 0.1.3:

* `NLIP_Message.format` is a bare `str`: any word passes; `parse` checks it against the SDK's `AllowedFormats`.
* `add_error_code` and `create_error_code` are each defined twice, the second (subformat `text`) hiding the first
  (subformat `code`): `error_message` builds both submessages itself.
* `add_token` passes `self` twice to `add_submessage` (a TypeError); it is not used here.
* `find_labeled_submessage` fails on a message without submessages; `labeled` below does not.
* Validation failures are pydantic errors; `parse` turns them into `NlipError` naming the field as a JSON path.

Nothing here imports `node` beyond `wire`: the node (push, `POST /nlip`) and the agent side share it.
"""

from __future__ import annotations

from typing import Any

import msgspec
from nlip_sdk.nlip import AllowedFormats, NLIP_Factory, NLIP_Message, NLIP_SubMessage
from pydantic import ValidationError

from wire.push import PUSH_LABEL, PushPayload

FORMATS = frozenset(f.value for f in AllowedFormats)
MAX_SUBMESSAGES = 32


class NlipError(Exception):
    """A message that is not a usable NLIP message: `code` is stable, `field` a JSON path."""

    def __init__(self, code: str, detail: str, field: str = "$") -> None:
        super().__init__(detail)
        self.code, self.detail, self.field = code, detail, field


def parse(value: Any) -> NLIP_Message:
    """An NLIP message from decoded JSON, checked by the SDK's model and then by the rules it leaves out."""
    if not isinstance(value, dict):
        raise NlipError("invalid_nlip_message", "an NLIP message is a JSON object")
    try:
        message = NLIP_Message.model_validate(value, strict=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"][:2])
        raise NlipError("invalid_nlip_message", f"{path}: {first['msg']}", path) from None
    if message.format.lower() not in FORMATS:
        raise NlipError("invalid_nlip_format", f"format must be one of {sorted(FORMATS)}", "$.format")
    if message.submessages is not None and len(message.submessages) > MAX_SUBMESSAGES:
        raise NlipError("too_many_submessages", f"at most {MAX_SUBMESSAGES} submessages", "$.submessages")
    unknown = set(value) - set(NLIP_Message.model_fields)
    if unknown:
        name = sorted(unknown)[0]
        raise NlipError("invalid_nlip_message", f"unknown member {name!r}", f"$.{name}")
    return message


def labeled(message: NLIP_Message, label: str) -> NLIP_Message | NLIP_SubMessage | None:
    """The message itself or its first submessage carrying `label` (case-insensitive), if any."""
    if (message.label or "").lower() == label.lower():
        return message
    for sub in message.submessages or []:
        if (sub.label or "").lower() == label.lower():
            return sub
    return None


def encode(message: NLIP_Message) -> bytes:
    """The message as JSON bytes (members that are None left out, as the SDK's `to_json`)."""
    return message.to_json().encode()


def structured(payload: Any, *, label: str, text: str | None = None) -> NLIP_Message:
    """A structured JSON message (`payload` any msgspec-encodable value) with an optional English summary."""
    message = NLIP_Factory.create_json(msgspec.to_builtins(payload), label=label)
    if text is not None:
        message.add_text(text)
    return message


def error_message(code: str, detail: str, field: str | None = None) -> NLIP_Message:
    """An NLIP error answer: format `error` with subformat `code` (the stable code), the detail as an `error/text`
    submessage and, when one input is at fault, its JSON path as an `error/field` submessage."""
    message = NLIP_Message(format=AllowedFormats.error, subformat="code", content=code)
    message.add_submessage(NLIP_SubMessage(format=AllowedFormats.error, subformat="text", content=detail))
    if field is not None:
        message.add_submessage(NLIP_SubMessage(format=AllowedFormats.error, subformat="field", content=field))
    return message


def push_message(payload: PushPayload) -> bytes:
    """The NLIP message of one push: the payload as structured JSON labelled `bbs.notifications`, and a one-line
    English summary for NLIP clients that read text only."""
    tier1 = sum(1 for e in payload.notifications if e.tier == 1)
    total = len(payload.notifications) + payload.more
    text = f"{total} new notification{'s' if total != 1 else ''} ({tier1} tier 1); poll the inbox to lease them"
    return encode(structured(payload, label=PUSH_LABEL, text=text))


def push_payload(raw: bytes) -> PushPayload:
    """The payload of a push as a receiver reads it; NlipError if the body is not one."""
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise NlipError("invalid_json", "the body is not JSON") from None
    part = labeled(parse(value), PUSH_LABEL)
    if part is None or not isinstance(part.content, dict):
        raise NlipError("not_a_push", f"no structured submessage labelled {PUSH_LABEL!r}")
    try:
        return msgspec.convert(part.content, PushPayload)
    except msgspec.ValidationError as exc:
        raise NlipError("not_a_push", f"the push payload does not validate: {exc}") from None
