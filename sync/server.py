"""The serving side of the protocol, independent of the web framework: feed, fetch, reconciliation."""

from __future__ import annotations

import asyncio

import msgspec

from sync import compact
from sync import messages as m
from sync.listed import Listed
from sync.negentropy import Negentropy, NegentropyError, VectorStorage
from sync.store import SyncStore

MAX_PAGE_BYTES = 8 * 1024 * 1024


class BadSyncMessage(ValueError):
    """A peer sent a message that cannot be answered (for example an unparsable negentropy message): answered 422
    with `code` naming `field`."""

    def __init__(self, message: str, field: str = "$.message", code: str = "bad_negentropy_message") -> None:
        super().__init__(message)
        self.field, self.code = field, code


class SyncServer:
    """Answers peers' sync requests from `store`, each in the protocol version it asks in (`m.SYNC_VERSIONS`): a
    peer one version behind is served only what `sync.compat.servable` allows it (the store filters)."""

    def __init__(self, store: SyncStore, listed: Listed | None = None) -> None:
        self.store = store
        # the versions each peer listed to this node's puller: never listed back to it (sync/ids_first.py)
        self.listed = listed or Listed()
        self.closing = asyncio.Event()
        # per protocol version and set (None: the public federation; else a space id)
        self._sets: dict[tuple[int, str | None], tuple[tuple[str, int], VectorStorage]] = {}
        # per protocol version and asking peer: the whole set served to a peer of the previous release
        self._storage: dict[tuple[int, str | None], tuple[tuple[str, int], frozenset[str], VectorStorage]] = {}

    async def changes(self, q: m.ChangesQuery, peer_id: str | None = None) -> m.FeedReply:
        """A page of the feed after `q.since`, waiting up to `q.wait_ms` for one when there is nothing yet.
        Records that came from the asking peer are left out: it has them (reconciliation covers a peer
        that lost them). With `q.ids`, each item names its version and body size, without body or address; with
        `q.ids == 2` packed in binary (an `IdsPage`, decision 74)."""
        epoch, head = await self.store.position()
        node_id = self.store.node_id
        if q.epoch is not None and q.epoch != epoch:
            return m.Reset(v=q.v, node_id=node_id, epoch=epoch, head=head, reason="epoch_changed")
        if q.since > head:
            return m.Reset(v=q.v, node_id=node_id, epoch=epoch, head=head, reason="cursor_ahead")
        if q.wait_ms:
            waiter = asyncio.ensure_future(self.store.wait_for_change(q.since, q.wait_ms / 1000))
            closing = asyncio.ensure_future(self.closing.wait())
            await asyncio.wait({waiter, closing}, return_when=asyncio.FIRST_COMPLETED)
            for task in (waiter, closing):
                task.cancel()
        page = await self.store.changes(q.since, q.limit, peer_id, q.v)
        items: list[m.ChangeItem] = []
        size = 0
        next_seq, more = page.next, page.more
        for seq, record_hash, version, body in page.items:
            if q.ids:  # ids first (decision 70): no body, so no byte bound beyond `limit`
                items.append(m.ChangeItem(seq=seq, version=version, size=len(body)))
                continue
            if items and size + len(body) > MAX_PAGE_BYTES:
                next_seq, more = items[-1].seq, True
                break
            items.append(m.ChangeItem(seq=seq, hash=record_hash, version=version, record=m.msgspec.Raw(body)))
            size += len(body)
        items = self.listed.unlisted(peer_id, items)
        if q.ids == m.IDS_COMPACT:
            packed = compact.pack_items(q.since, ((i.seq, i.version, int(i.size or 0)) for i in items))
            epoch_named = "" if page.epoch == q.epoch else page.epoch  # the asker named it: not said again
            return m.IdsPage(v=q.v, epoch=epoch_named, head=page.head, next=next_seq, more=more, items=packed)
        return m.Changes(
            v=q.v, node_id=node_id, epoch=page.epoch, head=page.head, next=next_seq, more=more, items=items
        )

    async def fetch(self, req: m.FetchRequest, peer_id: str | None = None) -> m.Records:
        """Federated versions by address or version, of those served to the asking peer; the ids matching none are
        listed as missing (a record of a space the peer does not host is missing, as one not held)."""
        found = await self.store.fetch(list(dict.fromkeys(req.hashes)), req.v, peer_id)
        have = {h for h, _, _ in found} | {v for _, v, _ in found}
        return m.Records(
            v=req.v,
            node_id=self.store.node_id,
            items=[m.RecordItem(hash=h, version=v, record=m.msgspec.Raw(body)) for h, v, body in found],
            missing=[h for h in dict.fromkeys(req.hashes) if h not in have],
        )

    async def bodies(self, req: m.BodiesRequest, peer_id: str | None = None) -> m.Bodies:
        """The bodies of the asked seqs this node serves the asking peer, in seq order, nothing else (decision 74): a
        seq not served (not a record, purged, of a space the peer does not host, from the peer itself) is left out,
        as one never held. Raises BadSyncMessage for unreadable seqs (`bad_seqs`) or one beyond the head
        (`unknown_seq`). Reads at most one page of the feed (`m.MAX_CHANGES_LIMIT` records) from the first seq."""
        try:
            seqs = compact.unpack_seqs(req.seqs)
        except compact.CompactError as exc:
            raise BadSyncMessage(str(exc), exc.field, "bad_seqs") from None
        _epoch, head = await self.store.position()
        if seqs[-1] > head:
            raise BadSyncMessage(f"seq {seqs[-1]} is beyond this node's head {head}", "$.seqs", "unknown_seq")
        span = min(m.MAX_CHANGES_LIMIT, seqs[-1] - seqs[0] + 1)
        page = await self.store.changes(seqs[0] - 1, span, peer_id, req.v)
        wanted = set(seqs)
        return m.Bodies(v=req.v, records=[msgspec.Raw(body) for seq, _h, _v, body in page.items if seq in wanted])

    async def reconcile(self, req: m.ReconcileRequest, peer_id: str | None = None) -> m.ReconcileReply:
        """Answer one negentropy round as the responder over the set the request names: the public federation (the
        reply lists the spaces served to the asker), a space both host, or, for a space not served to the asker, only
        the hosting records of it naming the asker (none: as if the space did not exist). A request naming no set is
        of the previous release: over the whole set served to the asker."""
        spaces: list[str] | msgspec.UnsetType = msgspec.UNSET
        if req.set is msgspec.UNSET:
            storage, epoch, head = await self._whole_snapshot(req.v, peer_id)
        elif req.set == m.PUBLIC_SET:
            storage, epoch, head = await self._snapshot(req.v, None)
            spaces = sorted(await self.store.served_spaces(peer_id))[: m.MAX_OFFERED_SPACES]
        elif req.set in await self.store.served_spaces(peer_id):
            storage, epoch, head = await self._snapshot(req.v, req.set)
        else:
            epoch, head = await self.store.position()
            named = [] if peer_id is None else await self.store.hosting_items(req.v, req.set, peer_id)
            storage = VectorStorage(named)
        try:
            reply = Negentropy(storage).reconcile(bytes.fromhex(req.message))
        except (NegentropyError, ValueError) as exc:
            raise BadSyncMessage(f"bad negentropy message: {exc}") from None
        return m.ReconcileReply(
            v=req.v,
            node_id=self.store.node_id,
            epoch=epoch,
            head=head,
            message=reply.hex() if reply is not None else None,
            spaces=spaces,
        )

    def snapshots(self) -> list[str]:
        """The item vectors this responder keeps, by name: `v3 public`, `v3 <space id>` (one per set) and
        `v3 whole <peer id>` (one per peer of the previous release)."""
        sets = [f"v{v} {m.PUBLIC_SET if space is None else space}" for v, space in self._sets]
        return sorted(sets + [f"v{v} whole {peer}" for v, peer in self._storage])

    async def _snapshot(self, v: int, space: str | None) -> tuple[VectorStorage, str, int]:
        """The sorted item vector of protocol `v`'s set `space` (None: the public federation), rebuilt only when the
        store has moved. One per set, whichever peers it is served to: a node hosting S spaces keeps at most S + 1
        per protocol version, however many peers reconcile with it, and only those built since the store last moved
        (a rebuild drops the stale ones)."""
        position = await self.store.position()
        held = self._sets.get((v, space))
        if held is not None and held[0] == position:
            return held[1], position[0], position[1]
        epoch, head, items = await self.store.set_items(v, space)
        storage = VectorStorage(items)
        # the store moved: every other set's vector is stale too, and would be rebuilt before its next use, so it
        # goes now (a set no peer asks for any more, a space no longer hosted, is not kept for good)
        self._sets = {key: kept for key, kept in self._sets.items() if kept[0] == position}
        self._sets[(v, space)] = ((epoch, head), storage)
        return storage, epoch, head

    async def _whole_snapshot(self, v: int, peer_id: str | None) -> tuple[VectorStorage, str, int]:
        """The sorted item vector of protocol `v`'s whole set as served to `peer_id`, for a peer of the previous
        release (one round over the public federation and every space both host), rebuilt only when the store
        has moved or the spaces served to that peer change (a hosting record stored, the filter changed)."""
        position = await self.store.position()
        served = await self.store.served_spaces(peer_id)
        held = self._storage.get((v, peer_id))
        if held is not None and held[0] == position and held[1] == served:
            return held[2], position[0], position[1]
        epoch, head, items = await self.store.reconcile_items(v, peer_id)
        storage = VectorStorage(items)
        self._storage = {key: kept for key, kept in self._storage.items() if kept[0] == position}  # stale: they go
        self._storage[(v, peer_id)] = ((epoch, head), served, storage)
        return storage, epoch, head
