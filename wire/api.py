"""Wire types of the REST API: msgspec Structs used for validation, JSON and the OpenAPI document.

This module imports nothing else of `node`, so the agent client can share it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec

from identity import canonical
from identity.schema import (
    MAX_ANNOTATION_CHARS,
    MAX_DESCRIPTION_CHARS,
    MAX_DIRECTED,
    MAX_LINKS_PER_ENTRY,
    MAX_NAME_CHARS,
    MAX_TAG_CHARS,
    MAX_TAGS,
    AgentType,
    Annotation,
    AssertableLinkType,
    Authority,
    Confidence,
    Content,
    Did,
    EntryType,
    LinkType,
    Performative,
    Scope,
    Tag,
    TruthState,
    whole,
)
from identity.schema_v3 import SpaceId
from wire.redaction import Tombstone

MAX_HOPS = 3
MAX_PAGE = 200
MAX_IDS = 100
MAX_IDEMPOTENCY_KEY = 128
MAX_QUERY_CHARS = 512
MAX_FILTER_VALUES = 32
MAX_ACK_IDS = 500
MAX_BATCH = 100  # entries per POST /v1/entries/batch
MAX_AGENT_PAGE = 200  # agents per page of GET /v1/agents

Direction = Literal["outbound", "inbound", "both"]
# No control characters (NUL among them): the client SDK sends a body's key as the Idempotency-Key header.
IdempotencyKey = Annotated[
    str, msgspec.Meta(min_length=1, max_length=MAX_IDEMPOTENCY_KEY, pattern=whole(r"[^\u0000-\u001f\u007f]+"))
]
EntryRef = Annotated[
    str, msgspec.Meta(min_length=1, max_length=64, description="an entry's local id (digits) or its record hash")
]
# An agent named in a request: its did, or its local name on this node (node/agents/refs.py resolves it).
AGENT_REF = r"[a-z0-9][a-z0-9_-]{0,63}|did:key:z[1-9A-HJ-NP-Za-km-z]{40,60}"
AGENT_REF_PATTERN = re.compile(AGENT_REF)
AgentRef = Annotated[
    str, msgspec.Meta(max_length=128, pattern=whole(AGENT_REF), description="an agent's did or its local name")
]
Limit = Annotated[int, msgspec.Meta(ge=1, le=MAX_PAGE)]
Hops = Annotated[int, msgspec.Meta(ge=0, le=MAX_HOPS)]
Offset = Annotated[int, msgspec.Meta(ge=0, le=100_000)]


class Problem(msgspec.Struct, omit_defaults=True):
    """RFC 9457 problem details, with a stable machine-readable `code`."""

    type: str
    title: str
    status: int
    code: str
    detail: str
    field: str | None = None


# ---- post -------------------------------------------------------------------------------------------------


class LinkSpec(msgspec.Struct, forbid_unknown_fields=True):
    """A link to create along with a new entry: from the new entry to `target`."""

    target: EntryRef
    link_type: AssertableLinkType
    annotation: Annotation = ""


class PostEntry(msgspec.Struct, forbid_unknown_fields=True):
    """Create an entry signed by the node on the author's behalf."""

    entry_type: EntryType
    performative: Performative
    content: Content
    confidence: Confidence = 0.5
    tags: Annotated[list[Tag], msgspec.Meta(max_length=MAX_TAGS)] = []
    directed_to: Annotated[list[AgentRef], msgspec.Meta(max_length=MAX_DIRECTED)] = []  # dids or local names
    links: Annotated[list[LinkSpec], msgspec.Meta(max_length=MAX_LINKS_PER_ENTRY)] = []
    metadata: dict[str, Any] = {}
    truth_state: TruthState = "fact"
    authority: Authority = "raw"
    scope: Scope = "federation"
    idempotency_key: IdempotencyKey | None = None
    space: SpaceId | None = None  # post into this space (a writer of it); None: the public federation


def unsigned_entry(body: PostEntry, author_id: str, created_at: str, targets: list[str]) -> dict[str, Any]:
    """The canonical, unsigned entry record a PostEntry becomes (link targets already resolved to hashes).

    The node (for keys it keeps) and the client (for keys the agent holds) both build records with this, so
    a record means the same whoever signs it. Raises identity.canonical.CanonicalError naming the field.
    """
    content = canonical.normalize_content(body.content)
    if not content:
        raise canonical.CanonicalError("content is empty after trimming whitespace", "$.content")
    in_space = {} if body.space is None else {"space": body.space}
    return {
        "kind": "entry",
        "schema_version": canonical.SCHEMA_VERSION if body.space is None else canonical.SPACE_SCHEMA_VERSION,
        **in_space,
        "author_id": author_id,
        "created_at": created_at,
        "entry_type": body.entry_type,
        "performative": body.performative,
        "content": content,
        "confidence": canonical.normalize_float(body.confidence, "$.confidence"),
        "tags": sorted(set(canonical.normalize_value(body.tags, "$.tags"))),
        "directed_to": sorted(set(body.directed_to)),
        "links": [
            {"target": target, "link_type": link.link_type, "annotation": canonical.normalize_value(link.annotation)}
            for target, link in zip(targets, body.links, strict=True)
        ],
        "metadata": canonical.normalize_value(body.metadata, "$.metadata"),
        "truth_state": body.truth_state,
        "authority": body.authority,
        "scope": body.scope,
    }


class SignedSubmission(msgspec.Struct, forbid_unknown_fields=True):
    """Submit a record the author signed itself; the node verifies it and stores it byte for byte."""

    record: dict[str, Any]
    idempotency_key: IdempotencyKey | None = None


_ITEM_SCHEMA = {
    "items": {"oneOf": [{"$ref": "#/components/schemas/PostEntry"}, {"$ref": "#/components/schemas/SignedSubmission"}]}
}


class PostEntries(msgspec.Struct, forbid_unknown_fields=True):
    """Post up to MAX_BATCH entries in one request, all or nothing. Each item is a POST /v1/entries body
    (node-signed fields or `{"record": ...}`) with its own optional idempotency_key."""

    # Items are checked one by one against PostEntry or SignedSubmission (msgspec cannot decode an untagged
    # union of two Structs), so errors name `$.entries[i]...`; the schema shows the union.
    entries: Annotated[list[Any], msgspec.Meta(min_length=1, max_length=MAX_BATCH, extra_json_schema=_ITEM_SCHEMA)]


class PostLink(msgspec.Struct, forbid_unknown_fields=True):
    """Create a typed link between two entries."""

    source: EntryRef
    target: EntryRef
    link_type: AssertableLinkType
    annotation: Annotated[str, msgspec.Meta(max_length=MAX_ANNOTATION_CHARS)] = ""
    idempotency_key: IdempotencyKey | None = None
    space: SpaceId | None = None  # assert it in this space (a writer of it): both ends in it, or public


# ---- results ----------------------------------------------------------------------------------------------


class EntryOut(msgspec.Struct):
    """A stored entry."""

    id: int
    record_hash: str
    content_fingerprint: str
    author_id: str
    created_at: str
    entry_type: EntryType
    performative: Performative
    content: str
    confidence: float
    tags: list[str]
    directed_to: list[str]
    metadata: dict[str, Any]
    truth_state: TruthState
    authority: Authority
    scope: Scope
    signature: str
    retracted: bool
    superseded: bool
    community_confidence: float | None = None  # from the trust cache (docs/trust.md); None when not computed
    # superseding entries whose `supersedes` link the author of this entry has not accepted (docs/api.md)
    superseded_claims: list[str] = []
    # its author signed two bodies under this address; this is the winner of the two (docs/sync.md, "Versions")
    equivocated: bool = False
    versions: int = 1  # versions of this address the node holds (at most 2)
    # the space it was posted into (docs/spaces.md), None for a public entry; its record is then schema_version v2
    space: str | None = None


class PostedEntry(msgspec.Struct):
    """One item of a batch: the stored entry, and whether this request created it (false: a replay)."""

    created: bool
    entry: EntryOut


class PostedEntries(msgspec.Struct):
    """The batch's entries, in request order."""

    results: list[PostedEntry]


class LinkOut(msgspec.Struct):
    """A stored link. `resolved` is false while its source or target entry has not arrived."""

    id: int
    origin_hash: str
    source: str
    target: str
    link_type: LinkType
    author_id: str
    created_at: str
    annotation: str
    resolved: bool
    derived: bool
    space: str | None = None  # the space of the record asserting it; None: public


class ReadResult(msgspec.Struct):
    """Entries and the links of their neighbourhood; `redacted`: the tombstones of the addresses asked for, or named
    by those links, whose bodies were redacted here (docs/api.md, "Redaction")."""

    entries: list[EntryOut]
    links: list[LinkOut]
    missing: list[str] = []
    truncated: bool = False
    redacted: list[Tombstone] = []


class Snippet(msgspec.Struct):
    """A short passage of a hit's content with the search's matches marked.

    `highlights` are [start, end) UTF-8 byte offsets into `text` (`text.encode()[start:end]` is a match); `text`
    starts or ends with "…" where the content goes on.
    """

    text: str
    highlights: list[Annotated[list[int], msgspec.Meta(min_length=2, max_length=2)]]  # [start, end] pairs


class SearchResult(msgspec.Struct):
    """A page of matching entries, with their neighbourhood when hops > 0.

    `snippets` maps the record hash of each entry of the page (not of its neighbourhood) to its snippet, when
    the search has words.
    """

    entries: list[EntryOut]
    links: list[LinkOut]
    limit: int
    offset: int
    next_offset: int | None = None
    truncated: bool = False
    snippets: dict[str, Snippet] = {}
    stale: bool = False  # the search waited for the search index to cover newer entries and the wait ran out
    indexed_through: int | None = None  # every entry up to this id was in the search index (searches with words)


# ---- queries ----------------------------------------------------------------------------------------------


class ReadQuery(msgspec.Struct, forbid_unknown_fields=True):
    """Parameters of GET /v1/entries and GET /v1/entries/{ref}."""

    ids: Annotated[list[EntryRef], msgspec.Meta(max_length=MAX_IDS)] = []
    include_links: bool = True
    hops: Hops = 0
    link_types: Annotated[list[LinkType], msgspec.Meta(max_length=8)] = []
    direction: Direction = "both"
    include_synthetic: bool = False


# A search's tag filter may not hold a NUL (docs/decisions.md record 83): no client can post such a tag, and
# PostgreSQL text cannot hold one, so both stores answer alike, 422 naming the tag.
FilterTag = Annotated[
    str, msgspec.Meta(min_length=1, max_length=MAX_TAG_CHARS, pattern=whole("[^\\u0000]*"), description="no NUL")
]


class SearchQuery(msgspec.Struct, forbid_unknown_fields=True):
    """Parameters of GET /v1/search. Lists are OR within the dimension; dimensions are ANDed."""

    q: Annotated[str, msgspec.Meta(max_length=MAX_QUERY_CHARS)] | None = None
    tags: Annotated[list[FilterTag], msgspec.Meta(max_length=MAX_FILTER_VALUES)] = []
    entry_type: Annotated[list[EntryType], msgspec.Meta(max_length=5)] = []
    performative: Annotated[list[Performative], msgspec.Meta(max_length=9)] = []
    author: Annotated[list[AgentRef], msgspec.Meta(max_length=MAX_FILTER_VALUES)] = []
    truth_state: Annotated[list[TruthState], msgspec.Meta(max_length=3)] = []
    min_confidence: Confidence | None = None
    since: str | None = None
    include_synthetic: bool = False
    min_trust: Confidence | None = None
    sort: Literal["default", "trust", "community_confidence"] = "default"
    limit: Limit = 20
    offset: Offset = 0
    hops: Hops = 0
    link_types: Annotated[list[LinkType], msgspec.Meta(max_length=8)] = []
    direction: Direction = "both"
    fresh: bool = False  # wait (bounded) until the search index covers every entry stored when the search came
    space: Annotated[list[SpaceId], msgspec.Meta(max_length=MAX_FILTER_VALUES)] = []  # only these spaces' entries


# ---- subscriptions and inbox ------------------------------------------------------------------------------


# A subscription's tag may not hold a NUL: fan-out finds candidate subscriptions by the entry's tags through
# SQLite's json_each, which cuts text at a NUL, so such a subscription could never fire (docs/decisions.md).
SubscriptionTag = Annotated[
    str, msgspec.Meta(min_length=1, max_length=MAX_TAG_CHARS, pattern=whole("[^\\u0000]*"), description="no NUL")
]


class SubscriptionIn(msgspec.Struct, forbid_unknown_fields=True):
    """A notification filter: OR within each list, AND across lists; empty list = any.

    `directed: true` restricts the subscription to entries directed to the subscriber. Entries
    directed to an agent notify it whether or not it subscribes.
    """

    tags: Annotated[list[SubscriptionTag], msgspec.Meta(max_length=MAX_FILTER_VALUES)] = []
    entry_types: Annotated[list[EntryType], msgspec.Meta(max_length=5)] = []
    performatives: Annotated[list[Performative], msgspec.Meta(max_length=9)] = []
    authors: Annotated[list[AgentRef], msgspec.Meta(max_length=MAX_FILTER_VALUES)] = []
    directed: bool = False
    # only entries of these spaces (each one the subscriber may read); empty: public entries and those of every
    # space the subscriber reads
    spaces: Annotated[list[SpaceId], msgspec.Meta(max_length=MAX_FILTER_VALUES)] = []


class SubscriptionOut(msgspec.Struct):
    """A stored subscription."""

    id: int
    agent_id: str
    tags: list[str]
    entry_types: list[str]
    performatives: list[str]
    authors: list[str]
    directed: bool
    created_at: str
    spaces: list[str] = []


class SubscriptionList(msgspec.Struct):
    subscriptions: list[SubscriptionOut]


class InboxQuery(msgspec.Struct, forbid_unknown_fields=True):
    """Parameters of GET /v1/inbox."""

    limit: Limit = 50
    since: str | None = None
    mark_delivered: bool = False
    space: SpaceId | None = None  # only notifications of this space's entries (a space the caller reads)


class Envelope(msgspec.Struct):
    """A notification: metadata only, never content."""

    notification_id: int
    entry_id: int
    record_hash: str
    author: str
    created_at: str
    entry_type: str
    performative: str
    tags: list[str]
    confidence: float
    directed_to_me: bool
    link_targets: list[str]
    tier: int
    reason: str
    attempt: int
    space: str | None = None  # the space of the entry (one the recipient reads); None: public
    # a notice (reason `redacted`): the address of the redaction that dropped the entry this agent was notified of;
    # entry_type, performative and tags are then empty (the body is gone). None for every other notification.
    redaction: str | None = None


class InboxResult(msgspec.Struct):
    notifications: list[Envelope]
    lease_seconds: int


class AckIn(msgspec.Struct, forbid_unknown_fields=True):
    """Acknowledge notifications (by notification_id)."""

    ids: Annotated[list[int], msgspec.Meta(min_length=1, max_length=MAX_ACK_IDS)]


class AckOut(msgspec.Struct):
    acknowledged: int


# ---- agents and node --------------------------------------------------------------------------------------


class AgentTrust(msgspec.Struct):
    """An agent's trust as computed from the records (docs/trust.md). Neutral 0.5 without signals."""

    score: float
    laplace: float
    confirms: int
    disconfirms: int
    computed_seq: int


class KeyEventItem(msgspec.Struct):
    """One key event of an identity held here (docs/format-v3.md 3.2), and whether it is on the winning chain."""

    address: str
    seq: int
    event: str  # rotate | revoke | recover
    signer: str  # the did:key that signed it
    created_at: str
    in_chain: bool  # on the winning chain (3.4); false: a losing branch, refused, or waiting for its prior
    key: str | None = None  # the key it installs
    role: str | None = None  # the role its signer held on the chain (current, next, recovery); None off the chain


class KeyHistory(msgspec.Struct):
    """An identity's key history as this node holds it: the key that may sign for it now and its key events."""

    current_key: str | None  # None after a revocation that installed no key
    events: list[KeyEventItem]
    next: str | None = None  # the pre-rotation commitment (SHA-256 of the next key's did), when set
    recovery: str | None = None  # the recovery key, when set


class KeyEventIn(msgspec.Struct, forbid_unknown_fields=True):
    """POST /v1/agents/{agent_id}/key-events: a key event its identity signed, with vouch pages of it (its own,
    or those of an event already held: a large vouched set travels in several requests)."""

    record: dict[str, Any]
    pages: list[dict[str, Any]] = msgspec.field(default_factory=list)


class KeyEventOut(msgspec.Struct):
    """What a key event submission stored: the event's address, whether it is new here, the pages stored, and
    the identity's key history after it."""

    address: str
    created: bool
    pages_stored: int
    key_history: KeyHistory


class RotatedNodeKey(msgspec.Struct):
    """The node's new key (POST /v1/node/key, `bbs node rotate-key`): the rotation's key event (signed by the key
    before, which it vouches for `vouched` records of) and the key that signs from now on."""

    node_id: str
    signing_key: str
    previous_key: str
    event: str
    vouched: int


class NodeKeyState(msgspec.Struct):
    """The keys this node signs with (GET /v1/node/key): the newest, the one before while some peer has not pulled
    its rotation (`peers_holding` have), the key events installing them, and why it signs nothing if it does not
    (`blocked`: a database restored from before a rotation of the node key)."""

    node_id: str
    signing_key: str
    previous_key: str | None
    events: list[str]
    peers_holding: list[str]
    blocked: str | None


class RotatedKey(msgspec.Struct):
    """A node-kept agent's new signing key (POST /v1/agents/{agent_id}/signing-key): the rotation's key event
    and how many of the old key's records it vouches for."""

    name: str
    agent_id: str
    signing_key: str
    event: str
    vouched: int
    key_history: KeyHistory


MAX_SIGNED_VERSIONS_PAGE = 10_000


class SignedVersionsQuery(msgspec.Struct, forbid_unknown_fields=True):
    """Parameters of GET /v1/agents/{agent_id}/signed-versions: the versions of the agent's records this node holds
    signed by `key` (the set a rotation or revocation of that key vouches for), in version order, a page at a time."""

    key: Did
    after: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")] | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_SIGNED_VERSIONS_PAGE)] = MAX_SIGNED_VERSIONS_PAGE


class SignedVersions(msgspec.Struct):
    """A page of versions signed by one key of an agent; `next_after` is the `after` of the next page (None: last)."""

    versions: list[str]
    next_after: str | None = None


class RevokeIn(msgspec.Struct, forbid_unknown_fields=True):
    """POST /v1/agents/{agent_id}/revocation (admin): revoke a node-kept agent's current key and install a new one.
    `key`, when given, must be the current key (a check against revoking the wrong one); `dry_run` answers what
    the revocation would sign (how many records it vouches for) and stores nothing."""

    key: str | None = None
    dry_run: bool = False


class RecoverIn(msgspec.Struct, forbid_unknown_fields=True):
    """POST /v1/agents/{agent_id}/recovery (admin): recover a node-kept agent with the node's recovery key;
    `dry_run` answers what it would sign and stores nothing."""

    dry_run: bool = False


class KeyChange(msgspec.Struct):
    """A node-kept agent's revocation or recovery: who signs it (`signer`, with its `role`), the key it takes
    authority from, how many of that key's records it vouches for (every other record of that key is void), how
    many key events of the chain it replaces (a recovery), and, unless it was a dry run, the stored event and the
    new signing key."""

    name: str
    agent_id: str
    event_kind: str  # revoke | recover
    signer: str
    role: str  # recovery | current
    removed_key: str | None
    vouched: int
    replaced_events: int
    key_history: KeyHistory
    event: str | None = None  # None: a dry run
    signing_key: str | None = None  # the new key this node keeps; None: a dry run


class AgentOut(msgspec.Struct):
    """An agent's public identity as this node knows it."""

    agent_id: str
    display_name: str
    description: str
    home_node: str
    created_at: str
    entry_count: int
    trust: AgentTrust | None = None
    agent_type: str | None = None  # from the agent's document; None when it has none
    key_history: KeyHistory | None = None  # its key events as held here (docs/format-v3.md 3)


class AgentListQuery(msgspec.Struct, forbid_unknown_fields=True):
    """Parameters of GET /v1/agents (admin): agents in did order, a page at a time."""

    local: bool = False  # only the agents registered on this node (they have a local name)
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_AGENT_PAGE)] = 50
    after: Did | None = None  # the previous page's next_after


class AgentListItem(msgspec.Struct):
    """An agent this node knows, with its local name and whether this node keeps its key."""

    agent_id: str
    name: str | None  # its local name when registered on this node; null for an agent known by sync only
    display_name: str
    description: str
    agent_type: str | None
    home_node: str
    created_at: str
    entry_count: int
    key_kept: bool  # this node keeps its private key (and signs for it); false for identity-file or remote agents


class AgentPage(msgspec.Struct):
    """One page of GET /v1/agents; pass next_after back as `after` for the next (null at the end)."""

    agents: list[AgentListItem]
    next_after: str | None


MAX_VOID_PAGE = 500


class VoidRecordsQuery(msgspec.Struct, forbid_unknown_fields=True):
    """Parameters of GET /v1/admin/void-records: records flagged void, in log order, a page at a time."""

    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_VOID_PAGE)] = 100
    after: Annotated[int, msgspec.Meta(ge=0)] = 0  # the previous page's next_after


class VoidRecord(msgspec.Struct):
    """A record stored before a later key event made it void: in the log, hidden from every read and from peers."""

    seq: int
    record_hash: str
    version: str
    kind: str
    author_id: str
    reason: str  # unvouched, revoked_key, losing_branch
    flagged_at: str


class VoidRecordPage(msgspec.Struct):
    """One page of GET /v1/admin/void-records; pass next_after back as `after` for the next (null at the end)."""

    records: list[VoidRecord]
    next_after: int | None
    total: int


class CreateAgent(msgspec.Struct, forbid_unknown_fields=True):
    """Admin: create an agent whose key this node keeps."""

    name: Annotated[str, msgspec.Meta(pattern=whole("[a-z0-9][a-z0-9_-]{0,63}"))]
    display_name: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS)] | None = None
    description: Annotated[str, msgspec.Meta(max_length=MAX_DESCRIPTION_CHARS)] = ""
    agent_type: AgentType | None = None  # written into the signed identity document when given


class CreatedAgent(msgspec.Struct):
    """A new agent. The api_key is shown once and never stored in clear."""

    name: str
    agent_id: str
    api_key: str


class NodeInfo(msgspec.Struct):
    node_id: str
    public_key: str
    software: str
    version: str
    schema_version: int
    record_schema: str
    limits: dict[str, int]
    # the sync protocol versions this node speaks: its own and the one before it (docs/sync.md); a node of
    # protocol v2 has no such member
    sync_versions: list[int]
    # this process's boot id: peers name it in their signed requests (docs/security.md, "Replay across restarts")
    boot_id: str | None = None
    # the answering process's id: each `bbs serve` of a node on PostgreSQL draws its own (docs/operations.md,
    # "Several processes"); a node of an earlier release has no such member
    process_id: str | None = None


class Health(msgspec.Struct):
    status: str


# ---- key-proof authentication (node/agents/sessions.py) --------------------------------------------------------


class ChallengeIn(msgspec.Struct, forbid_unknown_fields=True):
    """Ask for a one-time challenge to prove you hold `agent_id`'s private key."""

    agent_id: Did


class ChallengeOut(msgspec.Struct):
    """Sign `canonical JSON of {"purpose": "agent-bbs-session", "node_id", "agent_id", "challenge"}`."""

    challenge: str
    agent_id: str
    node_id: str
    purpose: str
    expires_at: str


class SessionIn(msgspec.Struct, forbid_unknown_fields=True):
    """A signed challenge, exchanged for a bearer token bound to the agent."""

    agent_id: Did
    challenge: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    signature: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    signing_key: Did | None = None  # the key that signed, when it is not agent_id's first key (a rotated identity)


class SessionOut(msgspec.Struct):
    """A bearer token for `agent_id` that expires at `expires_at`."""

    token: str
    agent_id: str
    expires_at: str
    expires_in: int
