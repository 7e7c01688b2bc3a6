"""The rules of spaces that every part asks, in one module (issues 37 and 38; docs/spaces.md): who may read a record
of a space, who may write into one, and which nodes a space's records go to. Pure functions, so the node's store and
`sync/memory.py` (part 2's simulation) run the same rule; it imports nothing but `identity`.

A role is what `identity.spaces.resolve` gives an agent in a space: owner, admin, writer, reader, or none. A space's
hosts are the nodes its admins name in signed `space_host` records (`identity.spaces.Space.hosts`), and the node the
space was created on (`hosting`).
"""

from __future__ import annotations

from collections.abc import Collection

from identity.spaces import ROLE_RANK

READ_ROLES = frozenset({"owner", "admin", "writer", "reader"})  # the roles that read a space's records
WRITE_ROLES = frozenset({"owner", "admin", "writer"})  # the roles that post into a space
ADMIN_ROLES = frozenset({"owner", "admin"})  # the roles that change another agent's membership


def may_read(role: str | None) -> bool:
    """True if an agent with `role` in a space (None or "none": not a member) may read the space's records."""
    return role is not None and ROLE_RANK.get(role, 0) >= ROLE_RANK["reader"]


def may_write(role: str | None) -> bool:
    """True if an agent with `role` in a space may post into it (entries, links, messages, task events)."""
    return role is not None and ROLE_RANK.get(role, 0) >= ROLE_RANK["writer"]


def may_administer(role: str | None) -> bool:
    """True if an agent with `role` may add members and change or remove their roles (the owner's own chain aside:
    only the owner adds or removes admins, docs/format-v3.md 4.3)."""
    return role is not None and ROLE_RANK.get(role, 0) >= ROLE_RANK["admin"]


def hosting(named: Collection[str], creation_node: str | None = None, chained: Collection[str] = ()) -> frozenset[str]:
    """The nodes that host a space: those its owner and admins name (`identity.spaces.Space.hosts`: the hosting
    chains ending in `host`), and `creation_node`, the node its creation record was stored on from a client, which
    hosts it implicitly while no hosting chain names it (`chained`: the nodes with a winning chain, `Space.host_chains`;
    a chain ending in `none` is the admins' word against it). Only that node knows it was the creation node; the
    others learn it from a `space_host` record naming it, which a node signs for a node-kept owner with the creation
    (docs/spaces.md, "Which nodes host a space")."""
    implicit = creation_node is not None and creation_node not in chained
    return frozenset(named) | ({creation_node} if implicit and creation_node is not None else frozenset())


def may_receive(peer_node: str, space: str | None, hosts: Collection[str]) -> bool:
    """True if the node `peer_node` may receive a record of `space` (None: the public federation, which every node
    receives) whose hosting nodes are `hosts` (`hosting`). A node serves a space's record only to a peer this says
    yes to, and only while it hosts the space itself (`may_receive` of its own id); a node that does not host a space
    learns nothing of it: not a record, an address, a count, nor the space's id."""
    return space is None or peer_node in hosts
