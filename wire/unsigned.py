"""The unsigned workflow records, `message` and `task_event`, built the same way by the node and the client.

The node (for keys it keeps) and agent.client.Client (for keys the agent holds) both build these records
here, so a record means the same, byte for byte, whoever signs it. Like wire/api.py this imports
nothing of the node's runtime: whatever a record depends on besides its input (the task's current fields,
the time of its newest event, the caller's live lease) is passed in. The node reads it from its tables; the
client reads it from GET /v1/agent-workflows/tasks/{task_id}. Errors are identity.canonical.CanonicalError,
naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from identity import canonical
from identity.schema import MAX_CHECKPOINT_BYTES, MAX_PAYLOAD_BYTES
from wire.workflows import DeclareTask, PostMessage

DONE_STATUSES = ("done", "completed")
OPEN_STATUSES = ("pending", "processing")


def next_event_ms(last_ms: int | None, now_ms: int) -> int:
    """A created time after the task's newest event (`last_ms`), so a writer's own events fold in the order made.

    The clock may stand still (or two events land in one millisecond); the fold orders by (created_ms, hash),
    and a later decision must never sort before an earlier one.
    """
    return now_ms if last_ms is None or last_ms < now_ms else last_ms + 1


def checkpoint_too_large(current: dict[str, Any], patch: dict[str, Any]) -> str | None:
    """Why merging `patch` into `current` is refused, or None. The merged checkpoint may hold 64 KiB; one that
    is over already (two patches merged across a partition) may still shrink, so a `null` makes room."""
    size = len(canonical.canonical_bytes(merge_patch(current, patch)))
    if size <= MAX_CHECKPOINT_BYTES or size <= len(canonical.canonical_bytes(current)):
        return None
    return f"the merged checkpoint would be {size} bytes, over {MAX_CHECKPOINT_BYTES} (remove keys with null)"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON merge patch: objects merge recursively, null removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# ---- messages ---------------------------------------------------------------------------------------------


def _payload(payload: dict[str, Any]) -> dict[str, Any]:
    """A message payload in canonical form, refused (naming it) beyond its limit: otherwise a big payload is
    reported as a too-large record at `$`."""
    normal: dict[str, Any] = canonical.normalize_value(payload, "$.payload")
    if len(canonical.canonical_bytes(normal)) > MAX_PAYLOAD_BYTES:
        raise canonical.CanonicalError(f"payload exceeds {MAX_PAYLOAD_BYTES} bytes in canonical form", "$.payload")
    return normal


def unsigned_message(sender: str, body: PostMessage, created_at: str) -> dict[str, Any]:
    """The unsigned record of a message: raw authority, a fact that it was sent, both agents as tags."""
    record: dict[str, Any] = {
        "kind": "message",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": sender,
        "created_at": created_at,
        "message_type": canonical.normalize_value(body.message_type),
        "body": canonical.normalize_value(body.body),
        "payload": _payload(body.payload),
        "dependency_ids": canonical.normalize_value(body.dependency_ids, "$.dependency_ids"),
        "tags": sorted({sender} | ({body.to_agent} if body.to_agent else set())),
        "authority": "raw",
        "truth_state": "fact",
        "confidence": 1,
    }
    if body.to_agent is not None:
        record["to_agent"] = body.to_agent
    if body.project is not None:
        record["project"] = canonical.normalize_value(body.project)
    if body.space is not None:
        record["space"] = body.space
    return record


# ---- task events ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskNow:
    """What a declaration is compared with: a task's current title, status, dependencies and checkpoint."""

    title: str
    status: str
    depends_on: list[str]
    checkpoint: dict[str, Any]


def declared_fields(body: DeclareTask) -> dict[str, Any]:
    """A declaration's normalised fields: task_key and whichever of title, depends_on, status, checkpoint it gives."""
    fields: dict[str, Any] = {"task_key": body.key}
    if body.space is not None:
        fields["space"] = body.space
    if body.title is not None:
        fields["title"] = canonical.normalize_value(body.title)
    if body.depends_on is not None:
        fields["depends_on"] = sorted(set(body.depends_on))
    if body.status is not None:
        fields["status"] = body.status
    if body.checkpoint is not None:
        fields["checkpoint"] = canonical.normalize_value(body.checkpoint, "$.checkpoint")
    return fields


def changed_fields(fields: dict[str, Any], current: TaskNow | None) -> dict[str, Any]:
    """Which of a declaration's fields change the task (all of them for a new task); task_key is left out.

    A checkpoint is a merge patch: it changes the task when merging it changes the checkpoint. Declaring
    only what changes is what lets a re-declared plan converge with nothing appended.
    """
    changed: dict[str, Any] = {}
    for name in ("title", "status", "depends_on"):
        if name in fields and (current is None or fields[name] != getattr(current, name)):
            changed[name] = fields[name]
    if "checkpoint" in fields:
        before = current.checkpoint if current is not None else {}
        if merge_patch(before, fields["checkpoint"]) != before:
            changed["checkpoint"] = fields["checkpoint"]
    return changed


def unsigned_task_event(
    key: str, author: str, created_at: str, event: str, space: str | None = None, **fields: Any
) -> dict[str, Any]:
    """The unsigned record of one task event (declare, lease, release or complete) with its event fields; `space`:
    the task's space (inside the signing bytes, `schema_version` "v1" as a message's), None for a public task."""
    return {
        "kind": "task_event",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": author,
        "created_at": created_at,
        "event": event,
        "task_key": key,
        **({} if space is None else {"space": space}),
        **fields,
    }


def unsigned_declare(
    key: str, author: str, created_at: str, node_id: str, changed: dict[str, Any], space: str | None = None
) -> dict[str, Any]:
    """A declaration accepted by `node_id` carrying the `changed` fields (see changed_fields), in `space`."""
    return unsigned_task_event(key, author, created_at, "declare", space, node_id=node_id, **changed)


def finish_fields(checkpoint_change: dict[str, Any], lease: str | None) -> dict[str, Any]:
    """The fields of a release or complete: the checkpoint patch if it changes anything, the lease it ends."""
    fields = dict(checkpoint_change)
    if lease is not None:
        fields["lease"] = lease
    return fields
