"""Replay protection of one node served by several processes on PostgreSQL: one boot generation, node-wide nonces.

Behind a load balancer a peer reads the boot id at one process and sends its next request to another, and a captured
request could be replayed to any of them. So every process serves and accepts the one boot id kept in the database
(`peer_boot`), and the nonce of every accepted peer signature is written to `peer_nonces` before the request is acted
on, by one statement on this process's own connection (node/store/side.py: never the writer's lock, never a wait
for it) that also reads the boot row, so the nonce and the generation are decided together:

    fresh nonce, the boot the signature names is the row's  -> accepted
    the nonce was there                                      -> 401 replayed_request (whichever process saw it)
    another boot                                             -> 401 stale_boot (the peer reads GET /v1/node again)
    no boot id (a peer of the previous release), created at
    or before the generation's `since` (the second it was
    drawn plus MAX_SKEW_S; 0 for a database's first one)     -> 401 stale_request (it signs again)

Both tables are UNLOGGED (migration 0053): the server empties them after a crash, a replica holds them empty, a
backup leaves their rows out. That is the one way the nonce memory is lost, and it takes the boot row with it: the
first process to find no row draws a new generation (`INSERT ... ON CONFLICT DO NOTHING`: one winner, the others read
it), so nothing signed for the old one is accepted again, whatever the clocks say. A process start changes nothing:
the nonces it would have forgotten are in the database (docs/decisions.md record 86, amending 46). The logged
`peer_boot_draws` tells a database's first generation (nothing was ever accepted on it: its `since` is 0) from one
drawn after a loss.

Expired nonces are swept now and then by whichever process admits a request, with a margin for clocks that differ
between the processes' machines (SWEEP_MARGIN_S).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from node.federation import store
from node.store.conn import DatabaseError
from node.store.side import SideConnection, SideUnavailable
from sync.auth import BEFORE_START, MAX_SKEW_S, REPLAYED, STALE_BOOT, PeerAuthError, Signed

log = logging.getLogger("bbs.sync")

# A nonce row stays this long past its signature's freshness: a process whose clock runs ahead of another's by
# less than this never sweeps a nonce the other would still take for fresh.
SWEEP_MARGIN_S = 300
SWEEP_EVERY_S = 30.0  # at most one sweep per process this often
T = TypeVar("T")


class NodeReplay:
    """The node-wide boot generation and nonce memory of one serving process (see the module docstring)."""

    def __init__(self, side: SideConnection, clock: Callable[[], float] = time.time) -> None:
        self.side, self.clock = side, clock
        self.boot_id: str | None = None  # the generation last read (what GET /v1/node shows is read anew)
        self.drawn = 0  # generations this process drew (the first one of a database, or after a loss)
        self._swept_at = 0.0

    async def current(self) -> tuple[str, int]:
        """The node's boot generation (boot id, its first second), drawn now when the database holds none."""
        for _ in range(3):
            # a signature accepted before it may be dated up to MAX_SKEW_S ahead of the clock that accepted it
            found = await self._guarded(
                store.draw_boot(self.side, secrets.token_urlsafe(12), int(self.clock()) + MAX_SKEW_S)
            )
            if found is not None:
                boot_id, since, drawn = found
                if drawn and since == 0:
                    self.drawn += 1
                    log.info("drew the first boot generation of this database, %s", boot_id)
                elif drawn:
                    self.drawn += 1
                    log.warning(
                        "drew boot generation %s: the peer nonces were lost (a crash of the PostgreSQL server, a"
                        " failover or a restore); requests signed for the previous one are refused stale_boot, and"
                        " peers read the new one at GET /v1/node",
                        boot_id,
                    )
                self.boot_id = str(boot_id)
                return self.boot_id, int(since)
        raise PeerAuthError("replay_memory_unavailable", "the node's boot generation could not be read", 503)

    async def admit(self, signed: Signed) -> None:
        """Accept `signed` once on the whole node, or raise PeerAuthError (stale_boot, stale_request,
        replayed_request; 503 replay_memory_unavailable when the database cannot be reached)."""
        fresh, boot_id, since = await self._guarded(
            store.admit_nonce(self.side, signed.peer, signed.nonce, signed.expires)
        )
        if boot_id is None:  # the nonce memory was lost with the generation: a new one, before anything is accepted
            boot_id, since = await self.current()
        self.boot_id = str(boot_id)
        if signed.boot is not None:
            if signed.boot != boot_id:
                raise PeerAuthError("stale_boot", STALE_BOOT)
        elif signed.created <= since:
            raise PeerAuthError("stale_request", BEFORE_START)
        if not fresh:
            raise PeerAuthError("replayed_request", REPLAYED)
        await self._sweep()

    async def _sweep(self) -> None:
        now = self.clock()
        if now - self._swept_at < SWEEP_EVERY_S:
            return
        self._swept_at = now
        try:
            await store.sweep_nonces(self.side, int(now) - SWEEP_MARGIN_S)
        except (SideUnavailable, DatabaseError) as exc:  # the next admit sweeps; this request was accepted
            log.warning("could not sweep expired peer nonces: %s", exc)

    async def _guarded(self, statement: Awaitable[T]) -> T:
        """`statement`'s answer, or 503 replay_memory_unavailable when the database cannot be reached."""
        try:
            return await statement
        except (SideUnavailable, DatabaseError) as exc:
            raise PeerAuthError(
                "replay_memory_unavailable", f"this node cannot record accepted requests now: {exc}", 503
            ) from None
