"""The serving side of the protocol, independent of the web framework: feed, fetch, reconciliation."""

from __future__ import annotations

import asyncio

from sync import messages as m
from sync.negentropy import Negentropy, NegentropyError, VectorStorage
from sync.store import SyncStore

MAX_PAGE_BYTES = 8 * 1024 * 1024


class BadSyncMessage(ValueError):
    """A peer sent a message that cannot be answered (for example an unparsable negentropy message)."""


class SyncServer:
    """Answers peers' sync requests from `store`, each in the protocol version it asks in (`m.SYNC_VERSIONS`): a
    peer one version behind is served only what `sync.compat.servable` allows it (the store filters)."""

    def __init__(self, store: SyncStore) -> None:
        self.store = store
        self.closing = asyncio.Event()
        # per protocol version and asking peer
        self._storage: dict[tuple[int, str | None], tuple[tuple[str, int], frozenset[str], VectorStorage]] = {}

    async def changes(self, q: m.ChangesQuery, peer_id: str | None = None) -> m.ChangesReply:
        """A page of the feed after `q.since`, waiting up to `q.wait_ms` for one when there is nothing yet.
        Records that came from the asking peer are left out: it has them (reconciliation covers a peer
        that lost them)."""
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
            if items and size + len(body) > MAX_PAGE_BYTES:
                next_seq, more = items[-1].seq, True
                break
            items.append(m.ChangeItem(seq=seq, hash=record_hash, version=version, record=m.msgspec.Raw(body)))
            size += len(body)
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

    async def reconcile(self, req: m.ReconcileRequest, peer_id: str | None = None) -> m.ReconcileReply:
        """Answer one negentropy round as the responder, over the records served to the asking peer."""
        storage, epoch, head = await self._snapshot(req.v, peer_id)
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
        )

    async def _snapshot(self, v: int, peer_id: str | None) -> tuple[VectorStorage, str, int]:
        """The sorted item vector of protocol `v`'s set as served to `peer_id`, rebuilt only when the store has moved
        (rounds of one session share it). One per peer: each sees the public federation and the spaces it hosts
        with this node (`served_spaces`: a hosting change or the operator's filter changes it)."""
        position = await self.store.position()
        served = await self.store.served_spaces(peer_id)
        held = self._storage.get((v, peer_id))
        if held is not None and held[0] == position and held[1] == served:
            return held[2], position[0], position[1]
        epoch, head, items = await self.store.reconcile_items(v, peer_id)
        storage = VectorStorage(items)
        self._storage[(v, peer_id)] = ((epoch, head), served, storage)
        return storage, epoch, head
