"""What one reader may see of the spaces a node holds: the read rule of docs/spaces.md, applied.

A `Sight` is computed once per read by `node.spaces.store.sight_of` from `readable_spaces` (the one function
that decides which spaces an agent may read, by `identity.space_rules.may_read`), and every read path filters
by it: in SQL through `Sight.sql` on the `space` column of what it reads, in Python through `Sight.sees`, in the
search index through `Sight.spaces`. A public record (no space) is seen by every reader; the node's operator (the
admin token) sees every space the node holds (docs/spaces.md, the threat model). Pure: no I/O, so default mode's
runtime may name it.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from identity.space_rules import may_read, may_write
from node.errors import Forbidden, NotFound
from node.store.conn import POSTGRESQL, SQLITE

_SPACE_ID = re.compile(r"[0-9a-f]{64}")


class Sight(NamedTuple):
    """The spaces a reader may read, besides the public federation; `everything` for the node's operator."""

    spaces: frozenset[str] = frozenset()
    everything: bool = False

    def sees(self, space: str | None) -> bool:
        """Whether the reader may read a record of `space` (None: a public record)."""
        return space is None or self.everything or space in self.spaces

    def sql(self, column: str, engine: str = SQLITE) -> str:
        """A SQL condition true exactly for the rows whose `column` (a space, NULL when public) the reader may read,
        in `engine`'s SQL (`node.store.conn.engine_of`): the operator's is `1` on SQLite and `TRUE` on PostgreSQL,
        which refuses an integer as a condition (docs/decisions.md record 76).

        The space ids are written into the statement: each is 64 lowercase hex (checked), so no quoting can break,
        and a statement per reader's set keeps SQLite's plan for the common public-only case."""
        if self.everything:
            return "TRUE" if engine == POSTGRESQL else "1"
        if not self.spaces:
            return f"{column} IS NULL"
        for space in self.spaces:
            if not _SPACE_ID.fullmatch(space):
                raise ValueError(f"not a space id: {space!r}")
        listed = ", ".join(f"'{space}'" for space in sorted(self.spaces))
        return f"({column} IS NULL OR {column} IN ({listed}))"


PUBLIC = Sight()  # a reader of the public federation only
OPERATOR = Sight(everything=True)  # the node's operator: every space the node holds


# Who reads: an agent's did, the node's operator (None: the admin token, whom the threat model lets read everything
# the node holds), or a sight already decided (PUBLIC for a reader of the public federation only, such as default
# mode until its candidates can land in a space). `node.spaces.store.sight_of` turns one into a Sight.
Viewer = str | Sight | None


def stored_scope(space: str | None, scope: str = "federation") -> str:
    """The scope a record is stored with: its own (`federation` unless its author signed `local`), a record of a
    space as any other (issue 38). A federated record of a space is tagged with its space in the log (`records.space`)
    and served only to peers that host the space (`identity.space_rules.may_receive`; docs/sync.md, "Spaces"), so
    `space` changes nothing here; it stays in the signature for the callers that name it."""
    del space  # where a record goes is decided when it is served, by its space's hosts
    return scope


def kept_local(space: str | None, scope: str = "federation") -> str:
    """The scope of a record of a space that stays on this node for now (`local`): a task's events and twin notices
    in a space, whose authority the node decides alone (docs/decisions.md, record 67) until a later part of issue 38
    names it; any other keeps its own `scope`."""
    return scope if space is None else "local"


def require_writer(role: str | None, verb: str = "post") -> None:
    """Refuse an agent with `role` in the space named at `$.space` unless it writes there: 404 `unknown_space` to
    a non-member (the space's existence is not revealed), 403 `not_a_writer` to a reader (docs/spaces.md)."""
    if role is None or not may_read(role):
        raise NotFound("no such space here", field="$.space", code="unknown_space")
    if not may_write(role):
        raise Forbidden(f"a reader of this space may not {verb} into it", field="$.space", code="not_a_writer")
