"""Verification of records received from a peer, before anything is stored.

Order: size limit, JSON object, canonical bytes, the form (a kind, `schema_version` and members this release
knows), hash recomputed and compared with the claim, then signature and schema (identity.records.check). A record
that fails gets a stable reason word.

`too_new` is told from every other reason (docs/format-v3.md, 8.4): a record of a form a later release may define
(an unknown kind, an unknown `schema_version`, an unknown member of a known kind, an unknown value of a closed set)
is not wrong, only not understood here. The store counts it apart from `invalid` and never remembers it, and the
puller keeps the feed position of the first one so that a newer release reads it again (sync/puller.py).

Records in the forms of format v3 that this release accepts from peers (`identity.records.V3_KINDS`: key events,
and records naming a `signing_key`) get the same checks here, the signature against the named key; none of them
depends on another record. What does (may that key sign for the author?) is decided in the ingest transaction
(node/federation/waiting.py, docs/format-v3.md section 7.4).
"""

from __future__ import annotations

import functools
import os
import re
import signal
import threading
import time
from typing import Any

import msgspec

from identity import canonical, records, schema, schema_v3
from sync.store import Invalid, Verified

MAX_WIRE_RECORD_BYTES = schema.MAX_RECORD_BYTES
PARENT_CHECK_S = 1.0  # how often a worker process checks that its parent is still there
MAX_FUTURE_S = 24 * 3600  # records dated further ahead than this are refused (a peer's clock may run fast)
TOO_NEW = "too_new"  # the reason of a record of a form a later release may define (sync.store.TOO_NEW)
# how a name of a kind, a member or a schema version a later release defines is spelled: anything else is
# simply malformed, in every release
_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_SCHEMA_VERSION = re.compile(r"v[0-9]{1,4}")
# msgspec's words for a value outside a closed set and for a member its Struct does not have
_UNKNOWN_VALUE = "Invalid enum value"
_UNKNOWN_MEMBER = re.compile(r"Object contains unknown field `([^`]*)`")


def too_new(record: dict[str, Any]) -> str | None:
    """Why `record` (a JSON object in canonical form) is of a form a later release may define, else None: a kind,
    a `schema_version` or top-level members this release does not know. Checked before the hash and the signature,
    which such a record may compute another way (a v2 entry's address, a `signing_key`)."""
    kind = record.get("kind")
    if isinstance(kind, str) and kind not in records.KNOWN_KINDS:
        return f"record kind {kind!r} is not known to this release" if _NAME.fullmatch(kind) else None
    version = record.get("schema_version")
    space_entry = kind == "entry" and "space" in record and version == canonical.SPACE_SCHEMA_VERSION
    if (
        isinstance(version, str)
        and version != canonical.SCHEMA_VERSION
        and not space_entry
        and _SCHEMA_VERSION.fullmatch(version)
    ):
        return f"schema_version {version!r} is not known to this release"
    if not isinstance(kind, str):
        return None
    if "space" in record and (kind not in records.IN_SPACE_KINDS or kind == "task_event"):
        # a task's events in a space stay on their node for now (docs/decisions.md, 67): a later release takes them
        return f"a {kind} of a space is not known to this release"
    # The v3 forms this release accepts from peers (key events, vouch pages, entries, links and messages naming a
    # `signing_key`) are known; a `signing_key` on another kind is a form a later release may define.
    v3_kind = kind in records.V3_KINDS | records.SPACE_KINDS | records.REDACTION_KINDS
    struct = schema_v3.struct_for(record) if v3_kind else schema.RECORD_TYPES.get(kind)
    if struct is None:
        return None
    known = _members(struct)
    unknown = sorted(name for name in record if name not in known and _NAME.fullmatch(name))
    return f"members {', '.join(unknown)} of a {kind} are not known to this release" if unknown else None


@functools.cache
def _members(struct: type[msgspec.Struct]) -> frozenset[str]:
    return frozenset(struct.__struct_fields__)


def _newer_schema(message: str) -> bool:
    """Is a schema error one of a form a later release may define: a value outside a closed set, or a member
    (nested: the top level's are found before) spelled as a member name?"""
    member = _UNKNOWN_MEMBER.match(message)
    return message.startswith(_UNKNOWN_VALUE) or (member is not None and _NAME.fullmatch(member.group(1)) is not None)


def _canonical_object(raw: bytes, claimed_hash: str | None) -> dict[str, Any] | Invalid:
    """`verify_record`, step 1: the bytes are at most the size limit and a JSON object in canonical form."""
    if len(raw) > MAX_WIRE_RECORD_BYTES:
        return Invalid(claimed_hash, "too_large", f"record is {len(raw)} bytes; limit {MAX_WIRE_RECORD_BYTES}")
    try:
        record: Any = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        return Invalid(claimed_hash, "malformed", f"record is not JSON: {exc}")
    except RecursionError:
        return Invalid(claimed_hash, "malformed", f"record nests deeper than {canonical.MAX_DEPTH} levels")
    if not isinstance(record, dict):
        return Invalid(claimed_hash, "malformed", "record is not a JSON object")
    try:
        body = canonical.canonical_bytes_within_depth(record)
    except (canonical.CanonicalError, TypeError, ValueError) as exc:
        return Invalid(claimed_hash, "malformed", f"record cannot be hashed: {exc}")
    if body is None:
        return Invalid(claimed_hash, "malformed", f"record nests deeper than {canonical.MAX_DEPTH} levels")
    if body != raw:
        return Invalid(claimed_hash, "not_canonical", "record bytes are not its canonical form")
    return record


def verify_record(raw: bytes, claimed_hash: str | None, claimed_version: str | None = None) -> Verified | Invalid:
    """Check one received record; never raises. The result's `version` is the SHA-256 of `raw`; a claimed one
    that differs is `version_mismatch`."""
    record = _canonical_object(raw, claimed_hash)
    if isinstance(record, Invalid):
        return record
    newer = too_new(record)
    if newer is not None:
        return Invalid(claimed_hash, TOO_NEW, newer)
    try:
        computed = records.compute_hash(record)
    except (canonical.CanonicalError, KeyError, TypeError, ValueError) as exc:
        return Invalid(claimed_hash, "malformed", f"record cannot be hashed: {exc}")
    if claimed_hash is not None and computed != claimed_hash:
        return Invalid(claimed_hash, "hash_mismatch", f"record hashes to {computed}")
    try:
        # `raw` is the record's canonical form (checked above) and `computed` its hash: neither is computed again
        # A v3 form (a key event, a record naming its signing_key) gets every check that needs only the record
        # itself here, the signature against the named key included; whether that key may sign for the author is
        # decided by the writer, from the author's key history (docs/format-v3.md, 7.4).
        v3 = schema_v3.is_v3(record)
        record_hash, decoded = records.check(record, body=raw, record_hash=computed, v3=v3)
    except records.RecordError as exc:
        if exc.reason == "schema" and _newer_schema(str(exc)):
            return Invalid(computed, TOO_NEW, f"{exc} (a form this release does not know)")
        return Invalid(computed, exc.reason, str(exc))
    if record.get("scope") == "local":
        return Invalid(record_hash, "local_scope", "a scope:local record must never leave its node")
    created = canonical.parse_created_at(record["created_at"]).timestamp()
    if created > time.time() + MAX_FUTURE_S:
        # Refused, not lost: reconciliation offers it again, and it is taken once its date is near.
        return Invalid(record_hash, "future_dated", f"created_at {record['created_at']} is too far in the future")
    verified = Verified(record_hash, raw, record, decoded)
    if claimed_version is not None and verified.version != claimed_version:
        return Invalid(record_hash, "version_mismatch", f"record's version is {verified.version}")
    return verified


def verdicts(items: list[tuple[bytes, str | None, str | None]]) -> list[str | Invalid]:
    """`verify_record` of each item, as a worker process answers: a record that passed by its hash alone (the
    caller decodes it again from the bytes it holds, with `accepted`: cheaper than sending the decoded record
    back across the process boundary), a refused one as its `Invalid`."""
    return [r.hash if isinstance(r, Verified) else r for r in (verify_record(*item) for item in items)]


def accepted(raw: bytes, record_hash: str) -> Verified:
    """The `Verified` of a record a worker process passed (`verdicts`): decoded again from its bytes, exactly as
    `verify_record` decodes it. Raises if the bytes do not decode as they did there (the caller verifies again)."""
    record = msgspec.json.decode(raw)
    struct = schema_v3.struct_for(record)
    if struct is None:
        raise KeyError(record.get("kind"))
    return Verified(record_hash, raw, record, msgspec.convert(record, struct))


def accept_all(
    items: list[tuple[bytes, str | None, str | None]], answers: list[str | Invalid]
) -> list[Verified | Invalid]:
    """The results of `items` from a worker's `verdicts`: each passed record decoded again by `accepted`; one that
    does not decode here as it did there (a schema this process lacks) is verified here, from the start."""
    results: list[Verified | Invalid] = []
    for item, answer in zip(items, answers, strict=True):
        if isinstance(answer, str):
            try:
                results.append(accepted(item[0], answer))
            except Exception:  # whatever went wrong, this process's own verification decides
                results.append(verify_record(*item))
        else:
            results.append(answer)
    return results


def start_worker(types: dict[str, type[msgspec.Struct]], parent_pid: int) -> None:
    """A worker process's initializer: learn the record kinds its parent knows (features register theirs at
    import), and end when the parent has gone, however it ended (a killed node leaves no workers behind)."""
    register_types(types)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_CHECK_S)
        os.kill(os.getpid(), signal.SIGKILL)  # a worker holds nothing to save

    threading.Thread(target=watch, name="parent watch", daemon=True).start()


def register_types(types: dict[str, type[msgspec.Struct]]) -> None:
    """Register record kinds by name (`identity.schema.register_record_type`)."""
    for kind, struct in types.items():
        schema.register_record_type(kind, struct)
