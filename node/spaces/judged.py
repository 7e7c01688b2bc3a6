"""The resolutions of spaces a node keeps between batches from peers (node/federation/space_gate.py; docs/sync.md,
"Spaces", "What the gate keeps").

A space's membership, admin and hosting chains and vouch pages (its "structure": what `space_records` lists) decide
its posts; no decision depends on a post. So the gate resolves a space's structure once and decides each batch of its
posts against it (`identity.spaces.Spaces.decide_posts`), instead of resolving the space again for every batch.

An entry is kept with the exact inputs it was resolved from (`Inputs`: the addresses of the structure records held,
not flagged void, in log order, and the addresses of the key events and vouch pages of their authors). The gate reads
the inputs again for every batch (addresses only: no body, no resolution) and uses the entry only when they are equal,
so no hook has to invalidate it: a membership, hosting, admin or vouch record stored, flagged void or unflagged,
purged, a key event of one of their authors stored or deleted, a rolled-back transaction, another process writing
the same database: each changes the inputs, and the space is resolved again. At most `MAX_SPACES` spaces are kept,
the least recently used dropped first.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from identity import spaces

MAX_SPACES = 64  # spaces whose resolution is kept (docs/sync.md, "What the gate keeps": about 2 KB per record)


class Inputs(NamedTuple):
    """What a space's resolution is a function of, as addresses: its structure records held (log order), and the key
    events and vouch pages of their authors (sorted)."""

    structure: tuple[str, ...]
    keys: tuple[str, ...]


class JudgedSpaces:
    """A bounded map of space id to (inputs, resolution of its structure records over those inputs)."""

    def __init__(self, limit: int = MAX_SPACES) -> None:
        self.limit = limit
        self._kept: OrderedDict[str, tuple[Inputs, spaces.Spaces]] = OrderedDict()

    def get(self, space: str, inputs: Inputs) -> spaces.Spaces | None:
        """The resolution kept for `space` when it was made from exactly `inputs`, else None."""
        kept = self._kept.get(space)
        if kept is None or kept[0] != inputs:
            return None
        self._kept.move_to_end(space)
        return kept[1]

    def put(self, space: str, inputs: Inputs, resolved: spaces.Spaces) -> None:
        """Keep `resolved` as `space`'s resolution over `inputs`, dropping the least recently used past the limit."""
        self._kept[space] = (inputs, resolved)
        self._kept.move_to_end(space)
        while len(self._kept) > self.limit:
            self._kept.popitem(last=False)

    def clear(self) -> None:
        """Forget every resolution kept."""
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)
