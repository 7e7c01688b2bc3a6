"""What each peer listed in its changes feed to this node, which it therefore holds (docs/decisions.md record 70).
Kept by the first 32 hex digits of each version, as a compact ids page announces it (record 74)."""

from __future__ import annotations

import itertools

from sync import messages as m
from sync.compact import PREFIX_HEX

LISTED_KEPT = 20_000  # versions remembered per peer as listed by it (a few MB per peer at most)


class Listed:
    """The versions each peer listed in its feed to this node, which it therefore holds: this node's feed never lists
    them back to it (decision 70; like echo suppression, which leaves out what the peer sent). In memory, the last
    `LISTED_KEPT` per peer: a restart forgets them, and a peer that lost what it held (a restore) gets it back by
    reconciliation, as for echo suppression. Shared by a node's puller (which notes) and its server (which asks)."""

    def __init__(self, kept: int = LISTED_KEPT) -> None:
        self.kept = kept
        self.peers: dict[str, dict[str, None]] = {}

    def note(self, peer_id: str, versions: list[str]) -> None:
        """`peer_id` listed `versions` in a page of its feed."""
        held = self.peers.setdefault(peer_id, {})
        for version in versions:
            held.pop(version[:PREFIX_HEX], None)
            held[version[:PREFIX_HEX]] = None
        for old in list(itertools.islice(held, max(0, len(held) - self.kept))):
            del held[old]

    def unlisted(self, peer_id: str | None, items: list[m.ChangeItem]) -> list[m.ChangeItem]:
        """Those of `items` that `peer_id` has not listed to this node."""
        held = self.peers.get(peer_id or "")
        return items if not held else [item for item in items if item.version[:PREFIX_HEX] not in held]
