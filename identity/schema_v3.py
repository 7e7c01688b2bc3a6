"""The record forms of format v3 (docs/format-v3.md) as schemas: spellings and limits, not yet accepted by any node.

Nothing here is registered in `identity.schema.RECORD_TYPES`: today's nodes keep refusing these forms (a v2 peer
must never be sent them, docs/format-v3.md section 8). The identity, spaces and redaction issues register the kinds
they implement; until then the vectors of tests/identity/vectors/format_v3.json are checked against these Structs,
so the design's spellings are executable.

Rules that are about canonical spelling rather than schema (a `signing_key` equal to `author_id`, which must be
absent instead) are in `check_canonical_v3`, refused as `not_canonical` like the sets rule of `identity.schema`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from identity import schema, vouching
from identity.schema import CreatedAt, Did, Hash, whole

MAX_CHAIN_SEQ = 10_000  # key events per identity; membership or hosting records per member or node of a space
MAX_VOUCHES = 16
MAX_PROOF_STEPS = 21  # pages of a vouch: at most 2^21 (count <= 2^31 - 1 over pages of 2^10)
MAX_REASON_CHARS = 1_024
MAX_SPACE_NAME_CHARS = schema.MAX_NAME_CHARS
MAX_SPACE_DESCRIPTION_CHARS = schema.MAX_DESCRIPTION_CHARS

SpaceId = Annotated[str, msgspec.Meta(pattern=whole("[0-9a-f]{64}"), description="a space: its creation's hash")]
# 32 bytes as unpadded base64url: 43 characters, the last one carrying 4 bits (so only one spelling per value)
Nonce = Annotated[str, msgspec.Meta(pattern=whole("[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]"))]
Seq = Annotated[int, msgspec.Meta(ge=1, le=MAX_CHAIN_SEQ)]
Reason = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_REASON_CHARS)]
MemberRole = Literal["writer", "reader", "none"]
AdminRole = Literal["admin", "none"]
HostRole = Literal["host", "none"]
KeyEventKind = Literal["rotate", "revoke", "recover"]
Count = Annotated[int, msgspec.Meta(ge=0, le=vouching.MAX_COUNT)]


def _invalid(message: str, field: str) -> ValueError:
    # as identity.schema: msgspec turns a ValueError from __post_init__ into a ValidationError naming the path
    return ValueError(f"{message} - at `{field}`")


class VouchSpec(msgspec.Struct, forbid_unknown_fields=True):
    """A vouch as records carry it: `identity.vouching.Vouch` in JSON."""

    count: Count
    root: Hash
    subject: Did

    def __post_init__(self) -> None:
        if self.count == 0 and self.root != vouching.EMPTY_ROOT:
            # nested: msgspec adds the vouch's own path (`$.vouches[0]`) to the message
            raise ValueError("the root of an empty set is SHA-256 of no bytes")


def _check_vouches(vouches: list[VouchSpec], field: str = "$.vouches") -> None:
    subjects = [v.subject for v in vouches]
    if subjects != sorted(set(subjects)):
        raise _invalid("vouches must be sorted by subject, one per subject", field)


def _check_chain(seq: int, prior: str | msgspec.UnsetType) -> None:
    if (seq == 1) != (prior is msgspec.UNSET):
        raise _invalid("prior is present exactly when seq is above 1", "$.prior")


# ---- the kinds of today, with the members v3 adds ----------------------------------------------------------------


class EntryRecordV3(schema.EntryRecord, forbid_unknown_fields=True):
    """An entry: `schema_version` "v2" exactly when it is inside a space (its address then covers `space`)."""

    schema_version: Literal["v1", "v2"]  # type: ignore[assignment]
    signing_key: Did | msgspec.UnsetType = msgspec.UNSET
    space: SpaceId | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        if (self.schema_version == "v2") != (self.space is not msgspec.UNSET):
            raise _invalid('an entry carries space exactly when its schema_version is "v2"', "$.space")


class LinkRecordV3(schema.LinkRecord, forbid_unknown_fields=True):
    """A link, optionally signed by a rotated key and inside a space."""

    signing_key: Did | msgspec.UnsetType = msgspec.UNSET
    space: SpaceId | msgspec.UnsetType = msgspec.UNSET


class MessageRecordV3(schema.MessageRecord, forbid_unknown_fields=True):
    """A bus message, optionally signed by a rotated key and inside a space."""

    signing_key: Did | msgspec.UnsetType = msgspec.UNSET
    space: SpaceId | msgspec.UnsetType = msgspec.UNSET


class TaskEventRecordV3(schema.TaskEventRecord, forbid_unknown_fields=True):
    """A task event, optionally signed by a rotated key and inside its task's space."""

    signing_key: Did | msgspec.UnsetType = msgspec.UNSET
    space: SpaceId | msgspec.UnsetType = msgspec.UNSET


class AgentRecordV3(schema.AgentRecord, forbid_unknown_fields=True):
    """An agent document, optionally signed by a rotated key (identities are global: never in a space)."""

    signing_key: Did | msgspec.UnsetType = msgspec.UNSET


class _Envelope(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The members every new kind of v3 shares (docs/format-v3.md, section 2); each kind adds `kind` and its own."""

    schema_version: Literal["v1"]
    author_id: Did
    created_at: CreatedAt
    signature: str
    signing_key: Did | msgspec.UnsetType = msgspec.UNSET


# ---- identity lifecycle ------------------------------------------------------------------------------------------


class KeyEventRecord(_Envelope, forbid_unknown_fields=True):
    """A step of an identity's key history (docs/format-v3.md, 3.2); who may sign it is decided by its chain."""

    kind: Literal["key_event"]
    event: KeyEventKind
    seq: Seq
    vouches: Annotated[list[VouchSpec], msgspec.Meta(max_length=MAX_VOUCHES)]  # [] only when no key loses
    prior: Hash | msgspec.UnsetType = msgspec.UNSET
    key: Did | msgspec.UnsetType = msgspec.UNSET
    next: Hash | msgspec.UnsetType = msgspec.UNSET
    recovery: Did | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        _check_chain(self.seq, self.prior)
        if self.key is msgspec.UNSET and self.event != "revoke":
            raise _invalid(f"a {self.event} event installs a key", "$.key")
        if self.key is not msgspec.UNSET and self.key in (self.author_id, self.recovery):
            raise _invalid("the new key is neither the identity's first key nor the recovery key", "$.key")
        _check_vouches(self.vouches)


class VouchPageRecord(_Envelope, forbid_unknown_fields=True):
    """One page of a vouched set (docs/format-v3.md, 6.4), signed by the signer of the record it pages."""

    kind: Literal["vouch_page"]
    event: Hash
    subject: Did
    page: Annotated[int, msgspec.Meta(ge=0, le=2**MAX_PROOF_STEPS - 1)]
    versions: Annotated[list[Hash], msgspec.Meta(min_length=1, max_length=vouching.PAGE_LEAVES)]
    proof: Annotated[list[Hash], msgspec.Meta(max_length=MAX_PROOF_STEPS)]
    space: SpaceId | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        try:
            vouching.check_sorted(self.versions, "$.versions")
        except vouching.VouchError as exc:
            raise _invalid(str(exc), exc.field) from None


# ---- spaces -----------------------------------------------------------------------------------------------------


class SpaceRecord(_Envelope, forbid_unknown_fields=True):
    """A space's creation: its hash is the space's id, its author the owner (docs/format-v3.md, 4.1)."""

    kind: Literal["space"]
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_SPACE_NAME_CHARS)]
    description: Annotated[str, msgspec.Meta(max_length=MAX_SPACE_DESCRIPTION_CHARS)]
    nonce: Nonce


class SpaceMemberRecord(_Envelope, forbid_unknown_fields=True):
    """A step of one member's chain in a space (docs/format-v3.md, 4.2); a lowering names what it still vouches for."""

    kind: Literal["space_member"]
    space: SpaceId
    member: Did
    role: MemberRole
    seq: Seq
    prior: Hash | msgspec.UnsetType = msgspec.UNSET
    vouches: Annotated[list[VouchSpec], msgspec.Meta(min_length=1, max_length=1)] | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        _check_chain(self.seq, self.prior)
        if self.seq == 1 and self.role == "none":
            raise _invalid("a member's first record gives it a role", "$.role")
        if self.vouches is not msgspec.UNSET and self.vouches[0].subject != self.member:
            raise _invalid("the vouch of a membership change is for its member", "$.vouches[0].subject")


class SpaceAdminRecord(_Envelope, forbid_unknown_fields=True):
    """A step of one admin's chain in a space (docs/format-v3.md, 4.3): signed by the owner, or by the admin leaving.

    Admin roles live in their own chain, which only the owner and the admin itself sign, so an admin's authority
    never depends on another admin's records."""

    kind: Literal["space_admin"]
    space: SpaceId
    member: Did
    role: AdminRole
    seq: Seq
    prior: Hash | msgspec.UnsetType = msgspec.UNSET
    vouches: Annotated[list[VouchSpec], msgspec.Meta(min_length=1, max_length=1)] | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        _check_chain(self.seq, self.prior)
        if self.seq == 1 and self.role == "none":
            raise _invalid("an admin's first record makes it an admin", "$.role")
        if (self.role == "none") != (self.vouches is not msgspec.UNSET):
            raise _invalid("removing an admin names what it still vouches for, and only that does", "$.vouches")
        if self.vouches is not msgspec.UNSET and self.vouches[0].subject != self.member:
            raise _invalid("the vouch of an admin's removal is for that admin", "$.vouches[0].subject")


class SpaceHostRecord(_Envelope, forbid_unknown_fields=True):
    """A step of one node's hosting chain in a space (docs/format-v3.md, 4.6)."""

    kind: Literal["space_host"]
    space: SpaceId
    node: Did
    role: HostRole
    seq: Seq
    prior: Hash | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        _check_chain(self.seq, self.prior)
        if self.seq == 1 and self.role == "none":
            raise _invalid("a node's first hosting record makes it a host", "$.role")


# ---- redaction --------------------------------------------------------------------------------------------------


class RedactionRecord(_Envelope, forbid_unknown_fields=True):
    """A redaction of the record at `target` (docs/format-v3.md, 5.1); its authority is checked against the target."""

    kind: Literal["redaction"]
    target: Hash
    space: SpaceId | msgspec.UnsetType = msgspec.UNSET
    reason: Reason | msgspec.UnsetType = msgspec.UNSET


V3_RECORD_TYPES: dict[str, type[msgspec.Struct]] = {
    "entry": EntryRecordV3,
    "link": LinkRecordV3,
    "agent": AgentRecordV3,
    "message": MessageRecordV3,
    "task_event": TaskEventRecordV3,
    "key_event": KeyEventRecord,
    "vouch_page": VouchPageRecord,
    "space": SpaceRecord,
    "space_member": SpaceMemberRecord,
    "space_admin": SpaceAdminRecord,
    "space_host": SpaceHostRecord,
    "redaction": RedactionRecord,
}


def check_canonical_v3(record: dict[str, Any]) -> str | None:
    """The JSON path of a v3 member spelled in a way the format forbids, else None: a `signing_key` equal to
    `author_id` (the first key signs without naming itself). Refused as `not_canonical`."""
    if "signing_key" in record and record.get("signing_key") == record.get("author_id"):
        return "$.signing_key"
    return None


def space_of(decoded: Any) -> str | None:
    """The space a decoded record was posted into (a v3 record's `space`), or None for a public record."""
    space = getattr(decoded, "space", None)
    return space if isinstance(space, str) else None


def is_v3(record: dict[str, Any]) -> bool:
    """True if the record is in a form only format v3 has: a new kind, or a v1 kind naming its `signing_key` or
    inside a `space`."""
    return "signing_key" in record or "space" in record or record.get("kind") not in schema.RECORD_TYPES


def struct_for(record: dict[str, Any]) -> type[msgspec.Struct] | None:
    """The Struct that decodes `record`: its kind's v3 Struct when it is in a v3 form (`is_v3`), else the registered
    v1 one (`identity.schema.RECORD_TYPES`); None for a kind neither knows."""
    kind = record.get("kind")
    if not isinstance(kind, str):
        return None
    if is_v3(record):
        return V3_RECORD_TYPES.get(kind)
    return schema.RECORD_TYPES.get(kind)
