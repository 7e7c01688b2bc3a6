"""Dashboard check of digest agreement with a federation peer.

A peer's digest is only readable with that peer's admin token, so the dashboard does not compare
digests directly: it runs one range-based reconciliation (negentropy, the peer-signed sync protocol)
with the peer. Both sides hold the same federated records, and so have equal digests, exactly when the
reconciliation finds nothing missing on either side. Records found missing here are fetched, as the
scheduler's own periodic reconciliation would.
"""

from __future__ import annotations

import aiohttp
import msgspec
from aiohttp import web

from node.errors import NotFound, Unavailable
from node.web.appkeys import NODE, SYNC
from node.web.http import Route, json_response
from sync.client import SyncError
from sync.puller import Puller
from wire.time import format_ms

RECONCILE_TIMEOUT_S = 30


class Agreement(msgspec.Struct):
    """The outcome of one reconciliation with a peer."""

    peer: str
    in_agreement: bool
    missing_here: int  # records the peer holds that this node lacked (now fetched)
    missing_there: int  # records this node holds that the peer lacks (it fetches them on its next pull)
    fetched: int
    rounds: int
    checked_at: str


async def check_agreement(request: web.Request) -> web.Response:
    node = request.app[NODE]
    store = request.app[SYNC].store
    peer_id = request.match_info["node_id"]
    peer = next((p for p in await store.peers() if p.node_id == peer_id), None)
    if peer is None:
        raise NotFound(f"{peer_id} is not a configured peer", code="peer_not_found", field="node_id")
    timeout = aiohttp.ClientTimeout(total=RECONCILE_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        try:
            report = await Puller(store, node.node_keys.signer, session).reconcile(peer)
        except SyncError as exc:
            raise Unavailable(f"could not reconcile with {peer_id}: {exc}", code="peer_unreachable") from None
    return json_response(
        Agreement(
            peer=peer_id,
            in_agreement=report.need == 0 and report.have == 0,
            missing_here=report.need,
            missing_there=report.have,
            fetched=sum(1 for o in report.outcomes if o.outcome == "saved"),
            rounds=report.rounds,
            checked_at=format_ms(node.now_ms()),
        )
    )


ROUTES: list[Route] = [
    Route(
        "POST",
        "/dashboard/api/peers/{node_id}/agreement",
        check_agreement,
        "Reconcile with a peer now and say whether both hold the same records",
        "admin",
    ),
]
