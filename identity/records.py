"""Signed records: the unit every node stores, syncs and verifies.

A record is a JSON object with at least `kind`, `schema_version`, `author_id`
(a did:key) and `created_at`, plus `signature`: the author's Ed25519 signature
over the canonical bytes of every other field. Its hash is the seed's
`record_hash` for entries and SHA-256 of those same canonical bytes for every
other kind.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec

from identity import canonical, keys

RECORD_KINDS = frozenset({"entry", "link", "agent", "message", "task_event"})
# The kinds of format v3 this release accepts (docs/format-v3.md, 7.7): key events, vouch pages, and the v1 kinds
# entry, link, message, task event and agent document signed by a rotated key (`signing_key`). The kinds of spaces
# and redaction are accepted from a node's own clients only (below).
V3_KINDS = frozenset({"entry", "link", "message", "task_event", "agent", "key_event", "vouch_page"})
# The kinds of a space's creation, membership and hosting (docs/format-v3.md, 4): accepted from a node's own clients
# (issues 37 and 38), and from peers by a node that hosts the space (node/federation/space_gate.py).
SPACE_KINDS = frozenset({"space", "space_member", "space_admin", "space_host"})
# The kinds of posts this release accepts inside a space from its own clients (docs/spaces.md): entries, link
# records, bus messages and task events (a task's events stay in its space: `schema_version` "v1", the space inside
# the signing bytes, as a message's).
SPACE_POST_KINDS = frozenset({"entry", "link", "message", "task_event"})
# A redaction (docs/format-v3.md 5): accepted from a node's own clients and from peers (issue 39: redactions
# federate with their target's scope, node/federation/store.py).
REDACTION_KINDS = frozenset({"redaction"})
# The kinds a redaction may take back (docs/format-v3.md 5.2); any other target is `not_redactable`.
REDACTABLE_KINDS = frozenset({"entry", "link", "message"})
# Every kind a record inside a space may be, here: membership, posts, the vouch pages of a removal's vouched set, and
# redactions of the space's posts.
IN_SPACE_KINDS = SPACE_KINDS | SPACE_POST_KINDS | REDACTION_KINDS | {"vouch_page"}
# Every kind this release verifies and stores from a peer (sync/verify.py: any other is `too_new`).
KNOWN_KINDS = RECORD_KINDS | V3_KINDS | SPACE_KINDS | REDACTION_KINDS


class RecordError(ValueError):
    """A record failed verification. `reason` is a stable word, `field` the JSON path."""

    def __init__(self, reason: str, message: str, field: str = "$") -> None:
        super().__init__(message)
        self.reason = reason
        self.field = field


def unsigned(record: dict[str, Any]) -> dict[str, Any]:
    """The record without its signature: what the signature covers."""
    return {k: v for k, v in record.items() if k != "signature"}


def statement_of(record: dict[str, Any]) -> str:
    """What an entry version says, whichever of its author's keys signed it: the lowercase hex SHA-256 of its
    canonical bytes without `signing_key` and `signature`. Two versions of one address with the same statement are
    one entry re-signed after a rotation, not an equivocation (docs/format-v3.md 3.6, docs/sync.md "Versions")."""
    rest = {k: v for k, v in record.items() if k not in ("signing_key", "signature")}
    return canonical.sha256_hex(canonical.canonical_bytes(rest))


def signing_bytes(record: dict[str, Any]) -> bytes:
    """Canonical bytes the author signs."""
    return canonical.canonical_bytes(unsigned(record))


def signing_bytes_of(record: dict[str, Any], body: bytes) -> bytes:
    """`signing_bytes(record)`, cut out of `body`, the record's canonical bytes (signature included), when that is
    certain: without its `"signature":...` member the rest of `body` is the unsigned record's canonical form (keys
    sorted, compact), so removing the member and one comma beside it gives the same bytes as encoding again.

    A JSON string cannot hold an unescaped quote, so the member's exact bytes occur in `body` only where some
    object of the record has that key with that value; when they occur once, it is the top level's. Otherwise
    (a nested object repeats it, or `signature` is not a string) the unsigned record is encoded again.
    """
    signature = record.get("signature")
    if type(signature) is str:
        member = b'"signature":' + canonical.canonical_bytes(signature)
        start = body.find(member)
        if start > 0 and body.find(member, start + 1) < 0:
            end = start + len(member)
            if body[start - 1] == 0x2C:  # ',' before it: drop that comma with the member
                return body[: start - 1] + body[end:]
            if body[end] == 0x2C:  # the first member: drop the comma after it
                return body[:start] + body[end + 1 :]
            return body[:start] + body[end:]  # the only member
    return signing_bytes(record)


def compute_hash(record: dict[str, Any]) -> str:
    """The record's content address: an entry's is the seed's `record_hash` over its preimage (v1), or, inside a
    space (`schema_version` "v2"), the v2 preimage that adds the space (docs/format-v3.md 2); any other kind's is
    SHA-256 of its signed bytes."""
    if record.get("kind") == "entry" and "space" in record:
        return canonical.space_record_hash(
            record["author_id"],
            record["created_at"],
            record["entry_type"],
            record["performative"],
            record["content"],
            record["space"],
        )
    if record.get("kind") == "entry":
        return canonical.record_hash(
            record["author_id"], record["created_at"], record["entry_type"], record["performative"], record["content"]
        )
    return canonical.sha256_hex(signing_bytes(record))


def sign(record: dict[str, Any], key: keys.SigningKey) -> dict[str, Any]:
    """Return a copy of an already-normalised record signed by `key`, whose did must be the record's
    `signing_key` when it names one (a rotated key, docs/format-v3.md 2), else its author."""
    if record.get("signing_key", record.get("author_id")) != key.did:
        named = "$.signing_key" if "signing_key" in record else "$.author_id"
        raise RecordError("wrong_signer", "the signing key is not the record's signer", named)
    body = unsigned(record)
    return {**body, "signature": key.sign(canonical.canonical_bytes(body))}


@functools.lru_cache(maxsize=4096)
def _is_did(value: str) -> bool:
    """`keys.is_did`, remembered: a node sees the same few authors over and over (base58 decoding is slow)."""
    return keys.is_did(value)


def verify(
    record: dict[str, Any],
    *,
    check_signature: bool = True,
    body: bytes | None = None,
    record_hash: str | None = None,
    v3: bool = False,
) -> str:
    """Check form, canonical spelling and signature; return the record hash or raise RecordError.

    Kind-specific schema checks belong to the caller; this is what every record shares. `check_signature`
    false is only for a record this process signed a moment ago (see `check`). `body` and `record_hash`, when
    given, are the record's canonical bytes and `compute_hash(record)`, already computed by the caller: they are
    used rather than computed again. `v3` admits the forms of format v3 this release accepts from peers
    (`V3_KINDS`, a `signing_key`): the signature is then checked against the named key (docs/format-v3.md, 2).
    """
    if not isinstance(record, dict):
        raise RecordError("malformed", "a record must be a JSON object")
    kind = record.get("kind")
    if not isinstance(kind, str) or kind not in (V3_KINDS | SPACE_KINDS | REDACTION_KINDS if v3 else RECORD_KINDS):
        raise RecordError("malformed", f"unknown record kind {kind!r}", "$.kind")
    _check_schema_version(record, kind, v3)
    author = record.get("author_id")
    if not isinstance(author, str) or not _is_did(author):
        raise RecordError("malformed", "author_id must be an Ed25519 did:key", "$.author_id")
    if not isinstance(record.get("created_at"), str):
        raise RecordError("malformed", "created_at is missing", "$.created_at")
    unsigned_record = unsigned(record)
    try:
        canonical.parse_created_at(record["created_at"], "$.created_at")
        canonical.check_canonical(unsigned_record)
    except canonical.CanonicalError as exc:
        raise RecordError("not_canonical", str(exc), exc.field) from None
    if kind == "entry":
        for name in ("entry_type", "performative", "content"):
            if not isinstance(record.get(name), str):
                raise RecordError("malformed", f"{name} must be a string", f"$.{name}")
        if canonical.normalize_content(record["content"]) != record["content"]:
            raise RecordError(
                "not_canonical", "content must be NFC with no trailing whitespace and \\n newlines", "$.content"
            )
    signature = record.get("signature")
    if not isinstance(signature, str):
        raise RecordError("bad_signature", "signature is missing", "$.signature")
    # An entry's hash is the seed's record_hash over five fields: its signed bytes serve only the signature.
    signed_bytes = b""
    if check_signature or (kind != "entry" and record_hash is None):
        signed_bytes = canonical.canonical_bytes(unsigned_record) if body is None else signing_bytes_of(record, body)
    signer = _signer_v3(record, author) if v3 else author
    if check_signature and not keys.verify(signer, signed_bytes, signature):
        named = "signing_key" if signer != author else "author_id"
        raise RecordError("bad_signature", f"signature does not verify against {named}", "$.signature")
    if record_hash is not None:
        return record_hash
    return compute_hash(record) if kind == "entry" else canonical.sha256_hex(signed_bytes)


def _check_schema_version(record: dict[str, Any], kind: str, v3: bool) -> None:
    """`schema_version` is "v1", but "v2" for an entry inside a space (format v3: docs/format-v3.md 2)."""
    version = record.get("schema_version")
    space_entry = v3 and kind == "entry" and version == canonical.SPACE_SCHEMA_VERSION
    if version != canonical.SCHEMA_VERSION and not space_entry:
        raise RecordError("malformed", "schema_version must be 'v1' ('v2' for an entry in a space)", "$.schema_version")
    if kind == "entry" and (version == canonical.SPACE_SCHEMA_VERSION) != ("space" in record):
        raise RecordError("malformed", "an entry carries space exactly when its schema_version is 'v2'", "$.space")


def _signer_v3(record: dict[str, Any], author: str) -> str:
    """The key that signed a record of format v3: its `signing_key`, else its author's first key. A record of a
    space other than `IN_SPACE_KINDS` is refused (not accepted here yet), and so is a `signing_key` naming the first
    key (another spelling)."""
    if "space" in record and record.get("kind") not in IN_SPACE_KINDS:
        raise RecordError("malformed", "records of this kind are not accepted in a space here yet", "$.space")
    signer = record.get("signing_key", author)
    if not isinstance(signer, str) or not _is_did(signer):
        raise RecordError("malformed", "signing_key must be an Ed25519 did:key", "$.signing_key")
    if "signing_key" in record and signer == author:
        raise RecordError("not_canonical", "signing_key equal to author_id must be absent", "$.signing_key")
    return signer


def canonical_body(record: dict[str, Any]) -> bytes:
    """The record's canonical bytes (signature included), as `check` takes them as `body`: a record nesting
    deeper than `canonical.MAX_DEPTH`, or holding a value JSON has no spelling for, is `malformed`."""
    try:
        body = canonical.canonical_bytes_within_depth(record)
    except (ValueError, TypeError) as exc:
        raise RecordError("malformed", f"record is not plain JSON: {exc}") from None
    if body is None:
        raise RecordError("malformed", f"record nests deeper than {canonical.MAX_DEPTH} levels")
    return body


def check(
    record: dict[str, Any],
    *,
    check_signature: bool = True,
    body: bytes | None = None,
    record_hash: str | None = None,
    v3: bool = False,
) -> tuple[str, Any]:
    """Full verification of a received record: size, form, canonical spelling, signature, then schema.

    Returns (hash, decoded Struct of its kind). Raises RecordError with a stable reason:
    `too_large`, `malformed`, `not_canonical`, `bad_signature` or `schema`. `check_signature` false skips
    only the Ed25519 verification, for a record just signed here by `sign` (which refuses a key that is not
    the author's): every other rule a receiving node applies still runs.

    `body` is for a caller that already holds the record's canonical bytes: it has found the record nests at
    most `canonical.MAX_DEPTH` deep and that `canonical.canonical_bytes(record) == body` (sync/verify.py does,
    on the bytes a peer sent). They are not computed again; `record_hash`, `compute_hash(record)` computed by
    that caller, is not either. `v3` admits the forms of `V3_KINDS` and `signing_key` (see `verify`), decoded by
    `identity.schema_v3`'s Structs; a client's records are checked without it, so they stay refused.
    """
    from identity import schema, schema_v3  # local: schema is data, records is mechanism

    if not isinstance(record, dict):
        raise RecordError("malformed", "a record must be a JSON object")
    size = len(canonical_body(record) if body is None else body)
    if size > schema.MAX_RECORD_BYTES:
        raise RecordError("too_large", f"record is {size} bytes; the limit is {schema.MAX_RECORD_BYTES}")
    record_hash = verify(record, check_signature=check_signature, body=body, record_hash=record_hash, v3=v3)
    struct_type = schema_v3.struct_for(record) if v3 else schema.RECORD_TYPES.get(record["kind"])
    if struct_type is None:
        raise RecordError("malformed", f"record kind {record['kind']!r} is not supported here", "$.kind")
    try:
        decoded = msgspec.convert(record, struct_type)
    except msgspec.ValidationError as exc:
        raise RecordError("schema", str(exc), _path_of(str(exc))) from None
    if isinstance(decoded, schema.EntryRecord):
        for i, link in enumerate(decoded.links):
            if link.target == record_hash:
                raise RecordError("schema", "an entry cannot link to itself", f"$.links[{i}].target")
    if isinstance(decoded, schema.LinkRecord) and decoded.source == decoded.target:
        raise RecordError("schema", "an entry cannot link to itself", "$.target")
    bad_set = schema.check_sets(record)
    if bad_set:
        raise RecordError("not_canonical", f"{bad_set} must be deduplicated and sorted", f"$.{bad_set}")
    metadata = record.get("metadata")
    if metadata is not None and len(canonical.canonical_bytes(metadata)) > schema.MAX_METADATA_BYTES:
        raise RecordError("too_large", f"metadata exceeds {schema.MAX_METADATA_BYTES} bytes", "$.metadata")
    return record_hash, decoded


def _path_of(message: str) -> str:
    """The JSON path of a msgspec validation message (`... - at `$.field``), down to an unknown or missing field."""
    marker = "at `"
    path = message.rsplit(marker, 1)[1].rstrip("`") if marker in message else "$"
    for prefix in ("Object contains unknown field `", "Object missing required field `"):
        if message.startswith(prefix):
            return f"{path}.{message[len(prefix) :].split('`', 1)[0]}"
    return path
