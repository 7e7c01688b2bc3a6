"""Ids first (docs/decisions.md record 70; docs/sync.md, "Ids first"): a page of the changes feed asked with `ids=1`
names each version and its body size; the puller fetches by version (`POST /v1/sync/fetch`) only the bodies it does
not hold, not refused, not waiting, each once per page, and stores them with the cursor after the page.

When to ask ids first is per peer (`FeedModes`, policy `ids`, the default): always, but for a backlog: while a peer's
pages say `more` and most of their items were new here (a fresh node's catch-up), they are read by bodies (one
request a page instead of one plus a fetch per 256 records). A peer that refuses the parameter (a node of an
earlier release: 422 on `ids`) is read by bodies, and asked ids first again after `IDS_RETRY_S`. The policies
`bodies` (flooding) and `adaptive` (by bodies while a peer's recent pages were mostly new, caught up or not) are
kept to measure against (docs/performance.md).

Compact (decision 74): a caller that can fetch by seq (`bodies`: the puller, the simulation) asks `ids=2`, a page of
the same items packed in binary, and fetches what it lacks by the peer's seqs (`POST /v1/sync/bodies`), which brings
the bodies alone: each one's version is computed here and a body of a version not asked for is dropped and counted
(`Resolved.unasked`; the puller counts it a failed fetch). A peer of the release before refuses `ids=2` as it refuses
any value it does not know (422 on `ids`): it is asked `ids=1` at once, and `ids=2` again after `IDS_RETRY_S`.

The cursor rule (docs/format-v3.md 8.4: no cursor passes a record it neither holds nor fetched): a body the fetch
does not return stops the page just before that record (the records before it are stored with the cursor there),
and the next page from the peer is read by bodies from there: whatever the feed still serves comes with its body,
whatever it serves no more (purged, redacted, a space no longer shared) is passed as the feed itself passes it. A
fetch that fails stores nothing of the page and keeps the cursor, as any failed pull.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from identity.schema import MAX_RECORD_BYTES
from sync import compact
from sync import messages as m
from sync.client import SyncError
from sync.listed import Listed
from sync.server import MAX_PAGE_BYTES
from sync.store import SyncStore

log = logging.getLogger("bbs.sync")
Policy = Literal["bodies", "ids", "adaptive"]
POLICIES: tuple[Policy, ...] = ("bodies", "ids", "adaptive")
# adaptive: ids first while at least this share of the items of a peer's last pages was held here already
IDS_HELD_SHARE = 0.5
RECENT_PAGES = 4  # the pages of a peer the share is taken over
IDS_RETRY_S = 600.0  # a peer that refused `ids` is asked ids first again after this long (it may have upgraded)
REFUSED_CODE = "validation_error"  # what a node of an earlier release answers a parameter it does not know

Fetch = Callable[[list[str]], Awaitable[m.Records]]
Bodies = Callable[[list[int]], Awaitable[list[bytes]]]  # the bodies at the peer's seqs (after a compact page)
Ask = Callable[[int], Awaitable[m.ChangesReply]]  # a page of the feed: by bodies (0), ids first (1), compact (2)


@dataclass
class Resolved:
    """An ids page turned into a page of bodies: `page` holds the fetched records at their seqs (its `next` and
    `more` moved back when a body was not returned), with what it took."""

    page: m.Changes
    announced: int = 0  # items of the ids page
    held: int = 0  # of them, held, refused or waiting here: not fetched
    fetched: int = 0  # bodies asked for
    missed: int = 0  # bodies asked for and not returned
    unasked: int = 0  # bodies returned by seq whose version was not asked for: dropped (a hostile or broken peer)


async def resolve(store: SyncStore, fetch: Fetch, reply: m.Changes, bodies: Bodies | None = None) -> Resolved:
    """Fetch the bodies of `reply` (an ids page) this store lacks, by version (or with `bodies`, after a compact
    page, by the peer's seqs), in requests of at most `m.MAX_FETCH_HASHES` ids and about `MAX_PAGE_BYTES` of
    announced bodies. Items that carry their body already (a peer that ignored `ids`) are kept as they are. Raises
    SyncError when a fetch fails (nothing is stored)."""
    sized = [item for item in reply.items if item.record is msgspec.UNSET]
    if not sized:
        return Resolved(reply, announced=len(reply.items))
    # announced versions: whole (ids=1), or prefixes (a compact page: looked up by prefix, bodies matched by it)
    versions = list(dict.fromkeys(item.version for item in sized))
    held = await (store.refused(versions) if bodies is None else store.refused_prefixes(versions))
    want = [v for v in versions if v not in held]
    # a size is the peer's word: no more than a record may be, so a peer cannot split a fetch into one per record
    size = {item.version: min(item.size, MAX_RECORD_BYTES) if isinstance(item.size, int) else 0 for item in sized}
    got_bodies: dict[str, m.RecordItem] = {}
    unasked = 0
    first_seq: dict[str, int] = {}
    for item in sized:
        first_seq.setdefault(item.version, item.seq)
    for chunk in _chunks(want, size):
        asked = set(chunk)
        if bodies is None:
            for got in (await fetch(chunk)).items:
                if got.version in asked:
                    got_bodies[got.version] = got
            continue
        for body in await bodies(sorted(first_seq[v] for v in chunk)):
            version = compact.asked_version(body, asked)
            announced = None if version is None else version[: len(chunk[0])]
            if announced is not None and announced not in got_bodies:  # the address comes from verifying the body
                got_bodies[announced] = m.RecordItem(hash="", version=str(version), record=msgspec.Raw(body))
            else:
                unasked += 1
    missed = [item.seq for item in sized if item.version not in held and item.version not in got_bodies]
    cut = min(missed, default=None)
    items: list[m.ChangeItem] = []
    for item in reply.items:
        if cut is not None and item.seq >= cut:
            break
        if item.record is not msgspec.UNSET:
            items.append(item)
        elif item.version in got_bodies:  # a version once, at its first seq
            got = got_bodies.pop(item.version)
            items.append(m.ChangeItem(seq=item.seq, hash=got.hash, version=got.version, record=got.record))
    page = m.Changes(
        v=reply.v,
        node_id=reply.node_id,
        epoch=reply.epoch,
        head=reply.head,
        next=reply.next if cut is None else cut - 1,
        more=reply.more or cut is not None,
        items=items,
    )
    return Resolved(page, len(reply.items), len(sized) - sum(1 for i in sized if i.version in want),
                    len(want), len(set(missed)), unasked)  # fmt: skip


def _chunks(versions: list[str], size: dict[str, int]) -> list[list[str]]:
    chunks: list[list[str]] = []
    total = 0
    for version in versions:
        if not chunks or len(chunks[-1]) >= m.MAX_FETCH_HASHES or total + size[version] > MAX_PAGE_BYTES:
            chunks.append([])
            total = 0
        chunks[-1].append(version)
        total += size[version]
    return chunks


@dataclass
class _Peer:
    recent: collections.deque[tuple[int, int]] = field(default_factory=lambda: collections.deque(maxlen=RECENT_PAGES))
    refused_at: float | None = None  # when the peer refused `ids`
    compact_refused_at: float | None = None  # when the peer refused `ids=2` (a node of the release before)
    bodies_next: bool = False  # a fetch missed a body: the next page by bodies
    backlog: bool = False  # the last page said `more` and most of it was new here: a catch-up, read by bodies


class FeedModes:
    """Whether to ask each peer's feed ids first (`policy`: always bodies, always ids, or adaptive), for one puller
    (or one simulated node)."""

    def __init__(
        self, policy: Policy = "ids", clock: Callable[[], float] = time.monotonic, listed: Listed | None = None
    ) -> None:
        self.policy, self.clock = policy, clock
        self.listed = listed or Listed()  # what each peer listed (its node's server leaves it out of its answers)
        self.peers: dict[str, _Peer] = {}

    def _peer(self, peer_id: str) -> _Peer:
        return self.peers.setdefault(peer_id, _Peer())

    def ids_for(self, peer_id: str, compact: bool = False) -> int:
        """How the next page of `peer_id`'s feed is asked: 0 by bodies, 1 ids first, 2 compact ids first (only when
        the caller can fetch by seq, `compact`, and the peer has not refused it lately)."""
        peer = self._peer(peer_id)
        if self.policy == "bodies" or peer.bodies_next:
            return 0
        if peer.refused_at is not None and self.clock() - peer.refused_at < IDS_RETRY_S:
            return 0
        if self.policy == "ids":
            ids = not peer.backlog
        else:
            announced = sum(a for a, _ in peer.recent)
            ids = announced == 0 or sum(h for _, h in peer.recent) >= IDS_HELD_SHARE * announced
        if not ids:
            return 0
        recent = peer.compact_refused_at is not None and self.clock() - peer.compact_refused_at < IDS_RETRY_S
        return m.IDS_COMPACT if compact and not recent else m.IDS_JSON

    def noted(self, peer_id: str, announced: int, held: int, more: bool = False) -> None:
        """A page of `announced` items came from the peer, `held` of them held here already; `more`: another page
        is ready."""
        peer = self._peer(peer_id)
        peer.bodies_next = False
        peer.backlog = more and announced > 0 and held < IDS_HELD_SHARE * announced
        if announced:
            peer.recent.append((announced, held))

    def missed(self, peer_id: str) -> None:
        """A fetch after an ids page did not return a body: the next page is read by bodies."""
        self._peer(peer_id).bodies_next = True

    def refused(self, peer_id: str, exc: SyncError, level: int = m.IDS_JSON) -> bool:
        """Whether `exc` is the peer refusing the `ids` parameter at `level` (a node of an earlier release); if so,
        for `IDS_RETRY_S` its feed is asked one level lower (compact refused: `ids=1`; `ids=1` refused: by bodies)."""
        if exc.code != REFUSED_CODE or not (exc.field == "$.ids" or "ids" in (exc.detail or "")):
            return False
        if level == m.IDS_COMPACT:
            self._peer(peer_id).compact_refused_at = self.clock()
        else:
            self._peer(peer_id).refused_at = self.clock()
        return True


async def read_page(
    feeds: FeedModes,
    store: SyncStore,
    peer_id: str,
    ask: Ask,
    fetch: Fetch,
    bodies: Bodies | None = None,
    health: m.PeerHealth | None = None,
) -> m.ChangesReply:
    """One page of `peer_id`'s feed with its bodies, as the puller and the simulation read it: asked ids first
    when `feeds` says so (then the bodies `store` lacks fetched: `resolve`), compact when the caller gives `bodies`
    (decision 74), by bodies otherwise or when the peer refuses `ids` (a node of an earlier release: one level
    lower at once). A body sent by seq that was not asked for is dropped and counted in `health.fetch_failures`.
    Raises SyncError when the peer fails (nothing is stored)."""
    ids = feeds.ids_for(peer_id, compact=bodies is not None)
    while True:
        try:
            reply = await ask(ids)
            break
        except SyncError as exc:
            if not (ids and feeds.refused(peer_id, exc, ids)):
                raise
            log.info("peer %s does not serve its feed with ids=%d (%s); asking it one level lower", peer_id, ids, exc)
            ids -= 1
    if not isinstance(reply, m.Changes):
        return reply
    feeds.listed.note(peer_id, [item.version for item in reply.items])
    if not ids:
        held = await store.refused([i.version for i in reply.items]) if feeds.policy != "bodies" else set()
        feeds.noted(peer_id, len(reply.items), len(held), reply.more)
        return reply
    # a compact page names prefixes and is fetched by seq; a JSON page (a peer that answered ids=2 as ids=1) by version
    packed = ids == m.IDS_COMPACT and all(len(i.version) == compact.PREFIX_HEX for i in reply.items)
    resolved = await resolve(store, fetch, reply, bodies if packed else None)
    feeds.noted(peer_id, resolved.announced, resolved.held, reply.more)
    if resolved.unasked:
        log.warning("peer %s sent %d bodies that were not asked for; dropped", peer_id, resolved.unasked)
        if health is not None:
            health.fetch_failures += 1
    if resolved.missed:
        feeds.missed(peer_id)
        log.info("peer %s did not return %d bodies it listed; reading on by bodies from seq %d",
                 peer_id, resolved.missed, resolved.page.next)  # fmt: skip
    return resolved.page
