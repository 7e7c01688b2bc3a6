"""Wire types of spaces (issue 37; docs/spaces.md): creating a space, changing a member's role, listing and showing
spaces. Imports nothing of `node`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from identity.schema_v3 import MAX_SPACE_DESCRIPTION_CHARS, MAX_SPACE_NAME_CHARS

MAX_MEMBER_PAGES = 64  # vouch pages sent with one membership record: 64 * 1,024 posts vouched for

Role = Literal["admin", "writer", "reader", "none"]


class SpaceIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """POST /v1/spaces: a node-kept agent names the space (the node signs its record), a self-signing agent sends
    its signed `space` record."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_SPACE_NAME_CHARS)] | None = None
    description: Annotated[str, msgspec.Meta(max_length=MAX_SPACE_DESCRIPTION_CHARS)] = ""
    record: dict[str, Any] | None = None


class MemberIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """POST /v1/spaces/{space_id}/members: give an agent a role (the node signs the chain records of a node-kept
    caller), or a self-signing caller's signed `space_member` / `space_admin` record."""

    agent_id: str | None = None
    role: Role | None = None
    record: dict[str, Any] | None = None
    # the vouch pages of `record` when it is a lowering vouching for posts (kind `vouch_page`, in the space, signed
    # like it): without them its vouched set is not known here and the member's posts it may void stay as they are
    pages: Annotated[list[dict[str, Any]], msgspec.Meta(max_length=MAX_MEMBER_PAGES)] = msgspec.field(
        default_factory=list
    )


HostRole = Literal["host", "none"]


class HostIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """POST /v1/spaces/{space_id}/hosts: name a node a host of the space (`host`) or no longer (`none`); the node
    signs the hosting chain's record for a node-kept owner or admin, a self-signing one sends its signed
    `space_host` record (issue 38; docs/spaces.md, "Which nodes host a space")."""

    node: str | None = None
    role: HostRole | None = None
    record: dict[str, Any] | None = None


class SpaceSubmitted(msgspec.Struct, kw_only=True):
    """What a write to a space did: the space, the address of the (last) record stored, whether it was new."""

    space_id: str
    address: str | None
    created: bool


class MemberOut(msgspec.Struct, kw_only=True):
    agent_id: str
    role: str


class SpaceOut(msgspec.Struct, kw_only=True):
    """A space as its members see it: `role` is the caller's; `members` and `hosts` only when one space is shown."""

    space_id: str
    owner: str
    name: str
    description: str
    created_at: str
    role: str
    members: list[MemberOut] | None = None
    hosts: list[str] | None = None  # the nodes hosting it (node ids), when one space is shown


class SpaceList(msgspec.Struct, kw_only=True):
    spaces: list[SpaceOut]
