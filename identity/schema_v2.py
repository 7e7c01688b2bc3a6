"""The record schemas of the last release of sync protocol v2, frozen: never edit this file.

A node of protocol v3 serves a v2 peer only records that peer can verify and store unchanged (sync/compat.py,
docs/format-v3.md section 8.2), and "store" means "accepted by these schemas": they are a copy of
identity/schema.py's v1 kinds as of commit 1e0e0a4 (the last v2 release), limits written out, so that a field or
value a later release adds to a v1 kind (as `agent_type` was added to agent documents: docs/decisions.md) makes
the record not v2-compatible by itself, without anyone remembering to say so. tests/sync/test_compat.py checks
that every field here is still in the current schema of its kind.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import msgspec

from identity import canonical


def whole(pattern: str) -> str:
    """`identity.schema.whole`, frozen."""
    return f"^(?:{pattern})$(?!\\n)"


EntryType = Literal["finding", "question", "synthesis", "contradiction", "task"]
Performative = Literal["inform", "request", "propose", "confirm", "disconfirm", "retract", "query", "ack", "decline"]
AssertableLinkType = Literal[
    "supports", "contradicts", "supersedes", "responds_to", "derived_from", "depends_on", "same_as"
]
TruthState = Literal["fact", "hypothesis", "simulation"]
Authority = Literal["raw", "derived"]
Scope = Literal["federation", "local"]

Hash = Annotated[str, msgspec.Meta(pattern=whole("[0-9a-f]{64}"))]
Did = Annotated[str, msgspec.Meta(pattern=whole("did:key:z[1-9A-HJ-NP-Za-km-z]{40,60}"))]
Tag = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Content = Annotated[str, msgspec.Meta(min_length=1, max_length=65_536)]
Confidence = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Annotation = Annotated[str, msgspec.Meta(max_length=1_024)]
CreatedAt = str
AgentType = Annotated[str, msgspec.Meta(pattern=whole("[a-z0-9][a-z0-9_.-]{0,31}"))]

TaskStatus = Literal["pending", "processing", "done", "completed", "failed", "cancelled"]
TaskEventKind = Literal["declare", "lease", "release", "complete"]
TaskKey = Annotated[str, msgspec.Meta(pattern=whole(r"(?![0-9]+$)[A-Za-z0-9_.:@-]{1,128}"))]
TaskDeps = Annotated[list[TaskKey], msgspec.Meta(max_length=64)]
ProjectName = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
MessageType = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
MessageBody = Annotated[str, msgspec.Meta(max_length=65_536)]
DependencyId = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
TaskTitle = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_CHECKPOINT_BYTES = 64 * 1024


def _invalid(message: str, field: str) -> ValueError:
    return ValueError(f"{message} - at `{field}`")


def _json_size(value: Any) -> int:
    return len(json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode())


class EntryLink(msgspec.Struct, forbid_unknown_fields=True):
    """An entry's link, as v2 knew it."""

    target: Hash
    link_type: AssertableLinkType
    annotation: Annotation = ""


class EntryRecord(msgspec.Struct, forbid_unknown_fields=True):
    """An entry, as v2 knew it."""

    kind: Literal["entry"]
    schema_version: Literal["v1"]
    author_id: Did
    created_at: CreatedAt
    entry_type: EntryType
    performative: Performative
    content: Content
    confidence: Confidence
    tags: Annotated[list[Tag], msgspec.Meta(max_length=32)]
    directed_to: Annotated[list[Did], msgspec.Meta(max_length=32)]
    links: Annotated[list[EntryLink], msgspec.Meta(max_length=32)]
    metadata: dict[str, Any]
    truth_state: TruthState
    authority: Authority
    scope: Scope
    signature: str


class LinkRecord(msgspec.Struct, forbid_unknown_fields=True):
    """A link, as v2 knew it."""

    kind: Literal["link"]
    schema_version: Literal["v1"]
    author_id: Did
    created_at: CreatedAt
    source: Hash
    target: Hash
    link_type: AssertableLinkType
    annotation: Annotation
    signature: str


class AgentRecord(msgspec.Struct, forbid_unknown_fields=True):
    """An agent document, as v2 knew it (with `agent_type`, decisions.md 28)."""

    kind: Literal["agent"]
    schema_version: Literal["v1"]
    author_id: Did
    created_at: CreatedAt
    display_name: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    description: Annotated[str, msgspec.Meta(max_length=2_048)]
    home_node: Did
    signature: str
    agent_type: AgentType | msgspec.UnsetType = msgspec.UNSET


class MessageRecord(msgspec.Struct, forbid_unknown_fields=True):
    """A bus message, as v2 knew it."""

    kind: Literal["message"]
    schema_version: Literal["v1"]
    author_id: Did
    created_at: CreatedAt
    message_type: MessageType
    body: MessageBody
    payload: dict[str, Any]
    dependency_ids: Annotated[list[DependencyId], msgspec.Meta(max_length=32)]
    tags: Annotated[list[Did], msgspec.Meta(min_length=1, max_length=2)]
    authority: Literal["raw"]
    truth_state: Literal["fact"]
    confidence: Literal[1]
    signature: str
    to_agent: Did | msgspec.UnsetType = msgspec.UNSET  # absent: a broadcast
    project: ProjectName | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        ends = {self.author_id} if self.to_agent is msgspec.UNSET else {self.author_id, self.to_agent}
        if self.tags != sorted(ends):
            raise _invalid("tags must be the sorted set of the sender and the recipient", "$.tags")
        if _json_size(self.payload) > MAX_PAYLOAD_BYTES:
            raise _invalid(f"payload exceeds {MAX_PAYLOAD_BYTES} bytes", "$.payload")


class TaskEventRecord(msgspec.Struct, forbid_unknown_fields=True):
    """As v2 knew it. One event of a task's life, keyed by the task's key; the current task is the fold of its events.

    declare: create or update (title, depends_on, status, checkpoint merge patch); `node_id` is the node
    that accepted it, and the earliest declaration names the task's home node.
    lease: a grant signed by the home node's key: `holder` may work on the task until `expires_at`.
    release, complete: signed by the holder; `lease` names the grant they end. complete marks the task done.
    """

    kind: Literal["task_event"]
    schema_version: Literal["v1"]
    author_id: Did
    created_at: CreatedAt
    event: TaskEventKind
    task_key: TaskKey
    signature: str
    node_id: Did | msgspec.UnsetType = msgspec.UNSET
    title: TaskTitle | msgspec.UnsetType = msgspec.UNSET
    depends_on: TaskDeps | msgspec.UnsetType = msgspec.UNSET
    status: TaskStatus | msgspec.UnsetType = msgspec.UNSET
    checkpoint: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    holder: Did | msgspec.UnsetType = msgspec.UNSET
    expires_at: CreatedAt | msgspec.UnsetType = msgspec.UNSET
    lease: Hash | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        allowed = {
            "declare": {"node_id", "title", "depends_on", "status", "checkpoint"},
            "lease": {"holder", "expires_at"},
            "release": {"lease", "checkpoint"},
            "complete": {"lease", "checkpoint"},
        }[self.event]
        required = {"declare": {"node_id"}, "lease": {"holder", "expires_at"}}.get(self.event, set())
        for name in ("node_id", "title", "depends_on", "status", "checkpoint", "holder", "expires_at", "lease"):
            present = getattr(self, name) is not msgspec.UNSET
            if present and name not in allowed:
                raise _invalid(f"a {self.event} event has no field {name}", f"$.{name}")
            if not present and name in required:
                raise _invalid(f"a {self.event} event needs {name}", f"$.{name}")
        if self.depends_on is not msgspec.UNSET:
            if self.depends_on != sorted(set(self.depends_on)):
                raise _invalid("depends_on must be deduplicated and sorted", "$.depends_on")
            if self.task_key in self.depends_on:
                raise _invalid("a task cannot depend on itself", "$.depends_on")
        if self.checkpoint is not msgspec.UNSET and _json_size(self.checkpoint) > MAX_CHECKPOINT_BYTES:
            raise _invalid(f"checkpoint exceeds {MAX_CHECKPOINT_BYTES} bytes", "$.checkpoint")
        if self.expires_at is not msgspec.UNSET:
            try:
                expires = canonical.parse_created_at(self.expires_at, "$.expires_at")
                created = canonical.parse_created_at(self.created_at, "$.created_at")
            except canonical.CanonicalError as exc:
                raise _invalid(str(exc), exc.field) from None
            if expires <= created:
                raise _invalid("expires_at must be after created_at", "$.expires_at")


RECORD_TYPES: dict[str, type[msgspec.Struct]] = {
    "entry": EntryRecord,
    "link": LinkRecord,
    "agent": AgentRecord,
    "message": MessageRecord,
    "task_event": TaskEventRecord,
}


def accepts(record: dict[str, Any]) -> bool:
    """True when the schema of `record`'s kind in the last v2 release decodes it (the rest of what v2 checked,
    canonical spelling, hash and signature, is unchanged in v3 and already held for any record a node stores)."""
    struct = RECORD_TYPES.get(record.get("kind"))  # type: ignore[arg-type]
    if struct is None:
        return False
    try:
        msgspec.convert(record, struct)
    except msgspec.ValidationError:
        return False
    return True
