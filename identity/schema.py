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

Hash = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$", description="SHA-256 record hash, lowercase hex")]
Did = Annotated[str, msgspec.Meta(pattern="^did:key:z[1-9A-HJ-NP-Za-km-z]{40,60}$", description="Ed25519 did:key id")]
Tag = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TAG_CHARS)]
Content = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_CONTENT_CHARS)]
Confidence = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Annotation = Annotated[str, msgspec.Meta(max_length=MAX_ANNOTATION_CHARS)]
CreatedAt = Annotated[str, msgspec.Meta(description="YYYY-MM-DDTHH:MM:SS[.mmm]Z, UTC")]


class EntryLink(msgspec.Struct, forbid_unknown_fields=True):
    """A link asserted by an entry, from the entry to `target` (a record hash)."""

    target: Hash
    link_type: LinkType
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
