"""Schemas and limits of each record kind, shared by every node and client.

A record that passes `identity.records.verify` is then decoded against the
Struct of its kind here (unknown fields refused), so every node applies the same
limits to what it stores and syncs.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

# Limits are part of what "valid" means across the federation: change them with care.
MAX_RECORD_BYTES = 256 * 1024
MAX_CONTENT_CHARS = 65_536
MAX_TAGS = 32
MAX_TAG_CHARS = 64
MAX_DIRECTED = 32
MAX_LINKS_PER_ENTRY = 32
MAX_ANNOTATION_CHARS = 1_024
MAX_METADATA_BYTES = 16 * 1024
MAX_NAME_CHARS = 128
MAX_DESCRIPTION_CHARS = 2_048


def whole(pattern: str) -> str:
    """A msgspec `pattern` that must match the whole string: `^(?:pattern)$(?!\\n)`.

    msgspec applies patterns with `re.search`, where `$` also matches before a final newline, so `^[a-z]+$`
    alone accepts "abc\\n". The lookahead refuses that in Python and changes nothing in ECMA-262 regexes (what
    OpenAPI clients apply), where `$` matches only at the very end.
    """
    return f"^(?:{pattern})$(?!\\n)"


EntryType = Literal["finding", "question", "synthesis", "contradiction", "task"]
Performative = Literal["inform", "request", "propose", "confirm", "disconfirm", "retract", "query", "ack", "decline"]
LinkType = Literal[
    "supports", "contradicts", "supersedes", "responds_to", "derived_from", "depends_on", "same_as", "retracted_by"
]
# retracted_by is created by nodes from a retract entry, never asserted directly.
AssertableLinkType = Literal[
    "supports", "contradicts", "supersedes", "responds_to", "derived_from", "depends_on", "same_as"
]
TruthState = Literal["fact", "hypothesis", "simulation"]
Authority = Literal["raw", "derived"]
Scope = Literal["federation", "local"]

ENTRY_TYPES: tuple[str, ...] = EntryType.__args__  # type: ignore[attr-defined]
PERFORMATIVES: tuple[str, ...] = Performative.__args__  # type: ignore[attr-defined]
LINK_TYPES: tuple[str, ...] = LinkType.__args__  # type: ignore[attr-defined]

Hash = Annotated[str, msgspec.Meta(pattern=whole("[0-9a-f]{64}"), description="SHA-256 record hash, lowercase hex")]
Did = Annotated[
    str, msgspec.Meta(pattern=whole("did:key:z[1-9A-HJ-NP-Za-km-z]{40,60}"), description="Ed25519 did:key id")
]
Tag = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TAG_CHARS)]
Content = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_CONTENT_CHARS)]
Confidence = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Annotation = Annotated[str, msgspec.Meta(max_length=MAX_ANNOTATION_CHARS)]
CreatedAt = Annotated[str, msgspec.Meta(description="YYYY-MM-DDTHH:MM:SS[.mmm]Z, UTC")]


class EntryLink(msgspec.Struct, forbid_unknown_fields=True):
    """A link asserted by an entry, from the entry to `target` (a record hash)."""

    target: Hash
    link_type: AssertableLinkType
    annotation: Annotation = ""


class EntryRecord(msgspec.Struct, forbid_unknown_fields=True):
    """A knowledge entry as signed by its author."""

    kind: Literal["entry"]
    schema_version: Literal["v1"]
    author_id: Did
    created_at: CreatedAt
    entry_type: EntryType
    performative: Performative
    content: Content
    confidence: Confidence
    tags: Annotated[list[Tag], msgspec.Meta(max_length=MAX_TAGS)]
    directed_to: Annotated[list[Did], msgspec.Meta(max_length=MAX_DIRECTED)]
    links: Annotated[list[EntryLink], msgspec.Meta(max_length=MAX_LINKS_PER_ENTRY)]
    metadata: dict[str, Any]
    truth_state: TruthState
    authority: Authority
    scope: Scope
    signature: str


class LinkRecord(msgspec.Struct, forbid_unknown_fields=True):
    """A typed link between two entries, by record hash, asserted by its author."""

    kind: Literal["link"]
    schema_version: Literal["v1"]
    author_id: Did
    created_at: CreatedAt
    source: Hash
    target: Hash
    link_type: AssertableLinkType
    annotation: Annotation
    signature: str


# What kind of agent a document describes (seed 000's agents.agent_type): a short lowercase word such as
# assistant, household, service, human.
AgentType = Annotated[
    str, msgspec.Meta(pattern=whole("[a-z0-9][a-z0-9_.-]{0,31}"), description="a short lowercase word: assistant, ...")
]


class AgentRecord(msgspec.Struct, forbid_unknown_fields=True):
    """An agent's identity document, signed by the agent's own key."""

    kind: Literal["agent"]
    schema_version: Literal["v1"]
    author_id: Did
    created_at: CreatedAt
    display_name: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS)]
    description: Annotated[str, msgspec.Meta(max_length=MAX_DESCRIPTION_CHARS)]
    home_node: Did
    signature: str
    # Optional and absent unless set, so a document without it is byte for byte what the previous release
    # signed; that release refuses a document carrying it (`invalid: schema`), see docs/decisions.md.
    agent_type: AgentType | msgspec.UnsetType = msgspec.UNSET


RECORD_TYPES: dict[str, type[msgspec.Struct]] = {
    "entry": EntryRecord,
    "link": LinkRecord,
    "agent": AgentRecord,
}


def register_record_type(kind: str, struct: type[msgspec.Struct]) -> None:
    """Add the schema of a record kind defined elsewhere (workflow records, for example)."""
    RECORD_TYPES[kind] = struct


def sorted_set(values: list[str]) -> list[str]:
    """Tags and directed_to are sets: deduplicated and sorted before signing."""
    return sorted(set(values))


def check_sets(record: dict[str, Any]) -> str | None:
    """Return the name of a set-valued field that is not deduplicated and sorted, else None."""
    for name in ("tags", "directed_to"):
        value = record.get(name)
        if isinstance(value, list) and value != sorted(set(value)):
            return name
    return None


# ---- agent workflows: the message bus and the task graph --------------------------------------------------

MAX_MESSAGE_TYPE_CHARS = 64
MAX_PROJECT_CHARS = 128
MAX_DEPENDENCY_IDS = 32
MAX_DEPENDENCY_ID_CHARS = 128
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_TASK_KEY_CHARS = 128
MAX_TASK_TITLE_CHARS = 512
MAX_TASK_DEPENDS = 64
MAX_CHECKPOINT_BYTES = 64 * 1024


TaskStatus = Literal["pending", "processing", "done", "completed", "failed", "cancelled"]
TaskEventKind = Literal["declare", "lease", "release", "complete"]
# A task key is a name a supervisor chooses; never all digits, so a path segment is a local id or a key.
TaskKey = Annotated[
    str,
    msgspec.Meta(
        pattern=whole(r"(?![0-9]+$)[A-Za-z0-9_.:@-]{1,128}"),
        description="letters, digits and _.:@- (1 to 128 characters, not all digits)",
    ),
]
TaskDeps = Annotated[list[TaskKey], msgspec.Meta(max_length=MAX_TASK_DEPENDS)]
ProjectName = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PROJECT_CHARS)]
MessageType = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_MESSAGE_TYPE_CHARS)]
MessageBody = Annotated[str, msgspec.Meta(max_length=MAX_CONTENT_CHARS)]
DependencyId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_DEPENDENCY_ID_CHARS)]
TaskTitle = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TASK_TITLE_CHARS)]


def _invalid(message: str, field: str) -> ValueError:
    # msgspec turns a ValueError from __post_init__ into a ValidationError; the suffix carries the JSON path.
    return ValueError(f"{message} - at `{field}`")


def _json_size(value: Any) -> int:
    import json

    return len(json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode())


class MessageRecord(msgspec.Struct, forbid_unknown_fields=True):
    """A bus message, signed by its sender. It records that the message was sent, not that it is true."""

    kind: Literal["message"]
    schema_version: Literal["v1"]
    author_id: Did
    created_at: CreatedAt
    message_type: MessageType
    body: MessageBody
    payload: dict[str, Any]
    dependency_ids: Annotated[list[DependencyId], msgspec.Meta(max_length=MAX_DEPENDENCY_IDS)]
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
    """One event of a task's life, keyed by the task's key; the current task is the fold of its events.

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
            from identity import canonical

            try:
                expires = canonical.parse_created_at(self.expires_at, "$.expires_at")
                created = canonical.parse_created_at(self.created_at, "$.created_at")
            except canonical.CanonicalError as exc:
                raise _invalid(str(exc), exc.field) from None
            if expires <= created:
                raise _invalid("expires_at must be after created_at", "$.expires_at")


RECORD_TYPES["message"] = MessageRecord
RECORD_TYPES["task_event"] = TaskEventRecord
