"""Wire types of redaction (issue 39; docs/api.md "Redaction"; docs/format-v3.md 5): a request to redact a record, what
the node did, and the tombstone reads answer for a redacted address. Imports nothing of `node`."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from identity.schema import Did, Hash
from identity.schema_v3 import MAX_REASON_CHARS

Reason = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_REASON_CHARS)]


class RedactionIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """POST /v1/redactions: a node-kept agent names the target (the node signs the `redaction` record), a
    self-signing agent sends its signed `redaction` record."""

    target: Hash | None = None
    reason: Reason | None = None
    record: dict[str, Any] | None = None


class Tombstone(msgspec.Struct, kw_only=True):
    """What stays of a redacted address on this node (docs/format-v3.md 5.3): who wrote it and when, who redacted it
    and when; the body (content, tags, metadata, links, payload), its signature and signing key are gone."""

    hash: str  # the target's address
    kind: str  # entry, link or message
    author_id: str
    created_at: str
    redacted: bool = True
    redacted_by: str
    redacted_at: str
    redaction: str  # the redaction record's address
    space: str | None = None  # the target's space; null when it had none
    versions: list[str]


class RedactionOut(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a redaction did here: its address, its target, whether the record is new, and the tombstone when the
    target's body was held (dropped now or before); none while the target was never seen here (`pending`)."""

    redaction: str
    target: str
    created: bool
    pending: bool = False
    tombstone: Tombstone | None = None


class PurgeIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """POST /v1/admin/purges: the operator removes one record (`target`) or every entry, link and bus message of one
    author (`author`) from this node alone."""

    target: Hash | None = None
    author: Did | None = None
    reason: Reason | None = None


class PurgeOut(msgspec.Struct, kw_only=True):
    """The addresses purged (none: nothing of them was held here)."""

    purged: list[str]


class PurgeQuery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """GET /v1/admin/purges: the newest `limit` purges."""

    limit: Annotated[int, msgspec.Meta(ge=1, le=500)] = 100


class Purged(msgspec.Struct, kw_only=True):
    """One address the operator purged from this node: what it was, whose, how many versions went, why, when."""

    hash: str
    kind: str
    author_id: str
    versions: int
    reason: str | None
    purged_at: str


class PurgeList(msgspec.Struct, kw_only=True):
    """The newest purges (newest first), how many there are in all and of how many authors, and how many addresses
    this node holds as tombstones of redactions: what `bbs doctor` counts, listed for the operator."""

    purges: list[Purged]
    total: int
    authors: int
    tombstones: int
