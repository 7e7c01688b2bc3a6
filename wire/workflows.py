"""Wire types of the agent-workflows API (`/v1/agent-workflows`): msgspec Structs for validation and OpenAPI.

Like wire/api.py this imports nothing of `node`, so clients can share it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from identity.schema import (
    MAX_DEPENDENCY_IDS,
    MAX_TASK_DEPENDS,
    DependencyId,
    Did,
    MessageBody,
    MessageType,
    ProjectName,
    TaskKey,
    TaskStatus,
    TaskTitle,
    whole,
)
from identity.schema_v3 import SpaceId
from wire.api import AgentRef, IdempotencyKey

LEASE_DEFAULT_SECONDS = 900
LEASE_MIN_SECONDS = 30
LEASE_MAX_SECONDS = 86_400
MAX_MESSAGE_PAGE = 200
MAX_READY_PAGE = 1_000
MAX_GRAPH_NODES = 10_000

LeaseSeconds = Annotated[int, msgspec.Meta(ge=LEASE_MIN_SECONDS, le=LEASE_MAX_SECONDS)]
LeaseToken = Annotated[
    str,
    msgspec.Meta(pattern=whole("[0-9a-f]{64}"), description="fencing token: the lease_id of your live lease"),
]
Cursor = Annotated[str, msgspec.Meta(pattern=whole(r"[0-9]{1,16}\.[0-9]{1,18}"), description="next_cursor of a page")]


# ---- messages ---------------------------------------------------------------------------------------------


class PostMessage(msgspec.Struct, forbid_unknown_fields=True):
    """Append a message to the bus, signed by the node with the sender's node-kept key (agents holding their own
    key send the signed record instead). Omit to_agent to broadcast."""

    message_type: MessageType
    body: MessageBody = ""
    to_agent: AgentRef | None = None  # a did or a local name
    payload: dict[str, Any] = {}
    dependency_ids: Annotated[list[DependencyId], msgspec.Meta(max_length=MAX_DEPENDENCY_IDS)] = []
    project: ProjectName | None = None
    from_agent: AgentRef | None = None  # optional; when given it must name the authenticated agent
    idempotency_key: IdempotencyKey | None = None  # or the Idempotency-Key header
    space: SpaceId | None = None  # send it in this space (a writer of it; `to_agent` a reader): docs/spaces.md


class MessageOut(msgspec.Struct):
    """A message as stored: what was sent, by whom, to whom."""

    id: int
    record_hash: str
    from_agent: str
    to_agent: str | None
    message_type: str
    body: str
    payload: dict[str, Any]
    dependency_ids: list[str]
    project: str | None
    tags: list[str]
    authority: str
    truth_state: str
    confidence: float
    created_at: str
    space: str | None = None  # the space it was sent in; None: the public bus


class MessageQuery(msgspec.Struct, forbid_unknown_fields=True):
    """Filters of GET /messages. `agent` matches messages it sent or received."""

    project: ProjectName | None = None
    agent: AgentRef | None = None
    message_type: MessageType | None = None
    # arrival: in the order this node stored them (its local id); following it never skips a message that
    # arrives late from a peer or carries an older created_at
    order: Literal["newest", "oldest", "arrival"] = "newest"
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_MESSAGE_PAGE)] = 50
    cursor: Cursor | None = None
    space: SpaceId | None = None  # only this space's messages (one the caller may read)


class MessagePage(msgspec.Struct):
    """One page of messages; pass next_cursor back as `cursor` for the next page (null at the end)."""

    messages: list[MessageOut]
    next_cursor: str | None


# ---- tasks ------------------------------------------------------------------------------------------------


class DeclareTask(msgspec.Struct, forbid_unknown_fields=True):
    """Create or update a task by key. Omitted fields keep their value; checkpoint is merged (RFC 7396)."""

    key: TaskKey
    title: TaskTitle | None = None
    depends_on: Annotated[list[TaskKey], msgspec.Meta(max_length=MAX_TASK_DEPENDS)] | None = None
    status: TaskStatus | None = None
    checkpoint: dict[str, Any] | None = None
    # the fencing token: the holder of a live lease names it to change the status or the checkpoint
    lease: LeaseToken | None = None
    # the task's space (a writer of it): the key names a task of that space, its dependencies keys of that space
    space: SpaceId | None = None


class LeaseOut(msgspec.Struct):
    """A live lease (an expired one is never reported)."""

    lease_id: str
    holder: str
    expires_at: str


class TaskTwin(msgspec.Struct):
    """A later twin of a task: the same key first-declared on another node that acted as its home (it granted
    leases) before it held the earlier declaration. Its grants do not count on the task itself."""

    identity: str  # the hash of the twin's first declaration
    twin_of: str  # the identity of the task the key resolves to (the earliest first declaration)
    home_node: str  # the node that first-declared it and granted its leases
    declared_by: str
    declared_at: str
    holders: list[str]  # every agent that node granted a lease on it, in grant order
    lease: LeaseOut | None  # its newest grant while live (not expired, released or completed)


class TaskOut(msgspec.Struct):
    """A task as the fold of its events. `status` is processing while a live lease is held.

    `identity` is the hash of its earliest declaration (by created_at, then hash): what a key resolves to.
    `twins` are the later twins of the key (docs/workflows.md, Twin tasks), usually none."""

    id: int
    key: str
    title: str
    status: str
    depends_on: list[str]
    waiting_on: list[str]
    checkpoint: dict[str, Any]
    home_node: str
    lease: LeaseOut | None
    created_at: str
    updated_at: str
    identity: str = ""
    twins: list[TaskTwin] = []
    space: str | None = None  # the task's space (docs/spaces.md); None: a public task


class ReadyTask(msgspec.Struct):
    """A task that can start now: every dependency done, no live lease."""

    id: int
    key: str
    title: str
    depends_on: list[str]
    checkpoint: dict[str, Any]
    home_node: str
    space: str | None = None  # the task's space; None: a public task


class ReadyQuery(msgspec.Struct, forbid_unknown_fields=True):
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_READY_PAGE)] = 100
    after: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None
    space: SpaceId | None = None  # only this space's tasks (one the caller may read)


class TaskRefQuery(msgspec.Struct, forbid_unknown_fields=True):
    """Where a task named by key lives: `space` for a task of a space (a key names the public task without it);
    a task named by its local id needs none."""

    space: SpaceId | None = None


class ReadyList(msgspec.Struct):
    """Ready tasks in id order; pass next_after back as `after` for more (null at the end)."""

    tasks: list[ReadyTask]
    next_after: int | None


class LeaseIn(msgspec.Struct, forbid_unknown_fields=True):
    """Claim a task for `seconds` (30 to 86,400; 900 by default). Re-leasing by the holder extends."""

    agent: AgentRef | None = None
    seconds: LeaseSeconds = LEASE_DEFAULT_SECONDS


class FinishIn(msgspec.Struct, forbid_unknown_fields=True):
    """Release or complete a task, optionally merging a last checkpoint. `lease` is the fencing token: the
    lease_id of the caller's live lease (required while the caller holds one; a stale one is refused)."""

    checkpoint: dict[str, Any] | None = None
    lease: LeaseToken | None = None


# ---- graph ------------------------------------------------------------------------------------------------


class GraphQuery(msgspec.Struct, forbid_unknown_fields=True):
    format: Literal["json", "dot", "mermaid"] = "json"
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_GRAPH_NODES)] = MAX_GRAPH_NODES
    space: SpaceId | None = None  # only this space's tasks (one the caller may read)


class GraphNode(msgspec.Struct):
    """A task; `state` is done, leased, ready, blocked, failed or cancelled."""

    id: int
    key: str
    title: str
    state: str
    lease_holder: str | None
    identity: str = ""  # the hash of the task's earliest declaration (docs/workflows.md, Twin tasks)
    space: str | None = None  # the task's space; None: a public task


class GraphEdge(msgspec.Struct):
    """`from_key` precedes `to_key`; `from_id` is null while the prerequisite has not been declared."""

    type: Literal["precedes"]
    from_key: str
    to_key: str
    from_id: int | None
    to_id: int


class Graph(msgspec.Struct):
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    missing: list[str]
    truncated: bool


# ---- federation: a lease request forwarded to the task's home node --------------------------------------


RequestId = Annotated[
    str,
    msgspec.Meta(
        pattern=whole(r"[A-Za-z0-9_-]{16,64}"),
        description="chosen at random by the asking node for each request; the home node answers each id once",
    ),
]


class PeerLeaseIn(msgspec.Struct, forbid_unknown_fields=True):
    """A peer asks the home node to grant `agent_id` the lease of `task_key` (peer-signed request)."""

    task_key: TaskKey
    agent_id: Did
    request_id: RequestId
    seconds: LeaseSeconds = LEASE_DEFAULT_SECONDS
    # the agent's signed identity document as the asking node holds it: the home node may not have synced it yet
    agent_document: dict[str, Any] | None = None


class PeerLeaseOut(msgspec.Struct):
    """The grant: the lease record the home node signed (the asking node stores it) and the task there."""

    record: dict[str, Any]
    task: TaskOut


class PeerTaskEventIn(msgspec.Struct, forbid_unknown_fields=True):
    """A peer sends the home node a task event its agent signed, for the home node to decide and store: a
    declaration changing status or checkpoint (`lease`: the agent's fencing token), a release or a completion
    (whose record names the lease)."""

    record: dict[str, Any]
    lease: LeaseToken | None = None


class PeerTaskEventOut(msgspec.Struct):
    """The task on the home node once the event is decided; `stored` is false when it changed nothing there
    (or was stored before): the asking node then stores nothing either."""

    task: TaskOut
    stored: bool
