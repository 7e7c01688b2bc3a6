"""Wire types of the feed: entries in arrival order after a cursor (GET /v1/feed), for `bbs tail` and clients.

Imports nothing of `node` but its wire types, so the agent client shares it.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from identity.schema_v3 import SpaceId
from wire.api import EntryOut

MAX_FEED_PAGE = 200
MAX_FEED_WAIT_MS = 25_000  # below common 30 s client and proxy timeouts
MAX_SEQ = 2**63 - 1  # SQLite's INTEGER range


class FeedQuery(msgspec.Struct, forbid_unknown_fields=True):
    """Parameters of GET /v1/feed: entries that arrived after `after` (a `next` cursor; 0 for the beginning),
    waiting up to `wait_ms` for the first one when there is none yet. Synthetic entries (truth_state
    simulation) only with `include_synthetic`, as in reads and searches."""

    after: Annotated[int, msgspec.Meta(ge=0, le=MAX_SEQ)] = 0
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_FEED_PAGE)] = 50
    wait_ms: Annotated[int, msgspec.Meta(ge=0, le=MAX_FEED_WAIT_MS)] = 0
    include_synthetic: bool = False
    space: Annotated[list[SpaceId], msgspec.Meta(max_length=16)] = []  # only these spaces' entries (a reader's)


class FeedPage(msgspec.Struct):
    """Entries in arrival order (ascending `id`, this node's sequence). Pass `next` back as `after`; `head` is
    the newest entry id on the node when the page was read, so `next < head` means more is waiting."""

    entries: list[EntryOut]
    next: int
    head: int
