"""One reconciliation with a peer, set by set (docs/sync.md, "Reconciliation round"): a negentropy session over the
public federation, then one over each space to reconcile with the peer, the request naming its set; with a peer of
the release before per-space rounds, one session over the whole set served to it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import msgspec

from sync import messages as m
from sync.client import PeerClient, SyncError
from sync.negentropy import Negentropy, NegentropyError, VectorStorage
from sync.store import Outcome, SyncStore

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    """What one reconciliation with a peer did."""

    sets: int = 0  # negentropy sessions: the public federation and each space reconciled (or one whole set)
    rounds: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    need: int = 0
    have: int = 0
    outcomes: list[Outcome] = field(default_factory=list)


async def reconcile_sets(
    client: PeerClient, store: SyncStore, peer_id: str, report: ReconcileReport
) -> tuple[list[bytes], list[bytes], m.ReconcileReply]:
    """Reconcile every set with the peer: the public federation, then each space `SyncStore.reconcile_spaces` gives
    (the spaces both host and those the peer's first reply offers). A peer of the previous release (it refuses the
    `set` member) is reconciled in one session over the whole set served to it. Returns what this node has that
    the peer lacks (`have`), what it needs, and the peer's first reply (its position)."""
    have: list[bytes] = []
    need: list[bytes] = []
    try:
        _e, _h, items = await store.set_items(client.version, None)
        first = await session(client, items, m.PUBLIC_SET, report, have, need)
    except SyncError as exc:
        # a responder of the previous release refuses the unknown member: `Object contains unknown field `set``
        if exc.code != "validation_error" or "`set`" not in (exc.detail or "") or report.rounds:
            raise
        log.info("peer %s reconciles whole sets only (a release before per-space rounds)", peer_id)
        report.sets = 0
        _e, _h, items = await store.reconcile_items(client.version, peer_id)
        first = await session(client, items, msgspec.UNSET, report, have, need)
    else:
        offered = frozenset(first.spaces) if first.spaces is not msgspec.UNSET else frozenset()
        for space in await store.reconcile_spaces(peer_id, offered):
            _e, _h, items = await store.set_items(client.version, space)
            await session(client, items, space, report, have, need)
    return have, need, first


async def session(
    client: PeerClient,
    items: list[tuple[int, bytes]],
    set_: str | msgspec.UnsetType,
    report: ReconcileReport,
    have: list[bytes],
    need: list[bytes],
) -> m.ReconcileReply:
    """One negentropy session over one set (`items`, this node's side of it) with the peer: rounds until the peer
    has nothing more to say; `have` and `need` grow. Returns the peer's first reply."""
    neg = Negentropy(VectorStorage(items))
    message: bytes | None = neg.initiate()
    first: m.ReconcileReply | None = None
    report.sets += 1
    while message is not None:
        reply = await client.reconcile(message, set_)
        report.rounds += 1
        first = first or reply
        if reply.message is None:
            break
        try:
            message = neg.reconcile(bytes.fromhex(reply.message), have, need)
        except (NegentropyError, ValueError) as exc:
            raise SyncError(f"malformed reconciliation message: {exc}") from None
    assert first is not None  # initiate() always gives a message
    return first
