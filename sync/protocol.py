"""Which sync protocol version the puller speaks with each peer, and the upgrade of a cursor taken by an older
release (docs/format-v3.md, 8.2 and 8.4; docs/sync.md, "Versions of the protocol").

A node speaks its own version and the one before it (`m.SYNC_VERSIONS`). A peer that answers a request with
`422 unsupported_sync_version` is spoken to in the newest version both speak (`fall_back`; no failure), and its
`GET /v1/node` is looked at every VERSION_RECHECK_S to speak the newer one again once it lists it (`recheck`): the
node then reconciles at once, which finds what the peer withheld while the older version was spoken.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import aiohttp

from sync import messages as m
from sync.client import UNSUPPORTED_SYNC_VERSION, SyncError, node_sync_versions, spoken_versions
from sync.store import PeerConfig, SyncStore

log = logging.getLogger("bbs.sync")
# A peer spoken to in an older protocol version (it answered 422 unsupported_sync_version) is asked for the versions
# it speaks (its GET /v1/node) at most this often, to speak this node's own again once it has upgraded.
VERSION_RECHECK_S = 600.0


@dataclass
class Spoken:
    """The sync protocol version this node speaks with a peer, and when it last looked at the peer's versions."""

    version: int = m.PROTOCOL_VERSION
    checked: float = float("-inf")  # the puller's clock at the last look at the peer's GET /v1/node


class PeerVersions:
    """The protocol version spoken with each peer (this node's own unless the peer refused it), for one puller."""

    def __init__(self, store: SyncStore, session: aiohttp.ClientSession, clock: Callable[[], float]) -> None:
        self.store, self.session, self.clock = store, session, clock
        self.spoken: dict[str, Spoken] = {}
        self.upgraded: set[str] = set()  # peers whose cursor this puller has upgraded, or found current

    def version_of(self, peer_id: str) -> int:
        """The sync protocol version this node speaks with a peer."""
        spoken = self.spoken.get(peer_id)
        return m.PROTOCOL_VERSION if spoken is None else spoken.version

    def fall_back(self, peer: PeerConfig, exc: SyncError) -> bool:
        """The peer answered `422 unsupported_sync_version`: speak the newest version both nodes speak, if that is
        not the one spoken (True); a peer spoken to in an older version than this node's own is asked for its
        versions again every VERSION_RECHECK_S (`recheck`)."""
        common = spoken_versions(exc.detail) & set(m.SYNC_VERSIONS)
        if exc.code != UNSUPPORTED_SYNC_VERSION or not common or max(common) == self.version_of(peer.node_id):
            return False
        self.spoken[peer.node_id] = Spoken(max(common), self.clock())
        log.info(
            "peer %s speaks sync protocol v%d: speaking it to the peer (v2 peers are served v2-compatible records"
            " only; its versions are looked at again every %d s)",
            peer.node_id,
            max(common),
            VERSION_RECHECK_S,
        )
        return True

    async def recheck(self, peer: PeerConfig) -> bool:
        """For a peer spoken to in an older version, at most every VERSION_RECHECK_S: when its GET /v1/node lists a
        newer version this node speaks, speak that from now on (True). Never raises: a peer that cannot be asked
        now is asked again next time."""
        spoken = self.spoken.get(peer.node_id)
        if spoken is None or spoken.version >= m.PROTOCOL_VERSION or self.clock() - spoken.checked < VERSION_RECHECK_S:
            return False
        spoken.checked = self.clock()
        try:
            common = await node_sync_versions(self.session, peer.url) & set(m.SYNC_VERSIONS)
        except SyncError as exc:
            log.info("could not read the sync protocol versions of %s: %s", peer.node_id, exc)
            return False
        if max(common, default=spoken.version) <= spoken.version:
            return False
        spoken.version = max(common)
        log.info("peer %s speaks sync protocol v%d now: speaking it", peer.node_id, spoken.version)
        return True

    async def upgrade(self, peer: PeerConfig, reconcile: Callable[[PeerConfig], Awaitable[object]]) -> bool:
        """Before the first pull of a peer by this release (docs/format-v3.md, 8.4): a cursor taken by a release of
        an older protocol version is not trusted alone. `reconcile` with the peer (which finds what it withheld
        from that release), then move the cursor back to just before its `too_new_from` (so what that release
        refused for being too new is read again) and mark it as this release's. True when it did so."""
        held = await self.store.cursor_version(peer.node_id)
        if held is None or held.version >= m.PROTOCOL_VERSION:
            return False
        log.info(
            "the cursor into %s was taken by a release of sync protocol v%d: reconciling before pulling%s",
            peer.node_id,
            held.version,
            "" if held.too_new_from is None else f", then reading its feed again from {held.too_new_from}",
        )
        await reconcile(peer)
        await self.store.upgrade_cursor(peer.node_id)
        return True

    async def step(
        self, peer: PeerConfig, reconcile: Callable[[PeerConfig], Awaitable[object]]
    ) -> Literal["reconciled", "newer"] | None:
        """The puller loop's step of versions, before each pull: the cursor's `upgrade` before the first
        (`reconciled` when it ran), then the `recheck` of a peer spoken to in an older version (`newer`: this
        node's own from now; the loop reconciles at once)."""
        if peer.node_id not in self.upgraded:
            upgraded = await self.upgrade(peer, reconcile)
            self.upgraded.add(peer.node_id)
            if upgraded:
                return "reconciled"
        return "newer" if await self.recheck(peer) else None
