"""The rules of spaces that every part asks, in one module (issue 37; docs/spaces.md): who may read a record of a
space, and who may write into one. Pure functions of a role, so the node's store and `sync/memory.py` (part 2's
simulation) run the same rule; it imports nothing but `identity`.

A role is what `identity.spaces.resolve` gives an agent in a space: owner, admin, writer, reader, or none.
"""

from __future__ import annotations

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
