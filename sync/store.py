"""The storage interface sync needs, implemented by the node's database and by `sync.memory`."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

from sync.messages import PROTOCOL_VERSION, PeerHealth

# `internal`: the record met an error in the receiving node's own code (not the peer's fault; logged there).
# `overflow`: a version refused because its address already holds two versions that precede it (docs/sync.md).
# `waiting`: its authority (a key event installing its signing key) is not held: it waits, not stored in the log;
# `dropped_waiting`: so, but a waiting cap was full: stored nowhere, offered again by reconciliation; `void`: its key
# may not sign for its author (docs/format-v3.md, 3.5 and 7).
# `too_new`: refused only for being of a form a later release may define (docs/format-v3.md, 8.4; never remembered).
OutcomeWord = Literal[
    "saved",
    "duplicate",
    "invalid",
    "pending_link",
    "overflow",
    "internal",
    "waiting",
    "dropped_waiting",
    "void",
    "too_new",
]
# The `Invalid.reason` of a record of a form a later release may define (sync/verify.py): its outcome is `too_new`.
TOO_NEW = "too_new"


class Verified(NamedTuple):
    """A record that passed every check: its hash (address), canonical bytes, decoded JSON and schema Struct."""

    hash: str
    body: bytes
    record: dict[str, Any]
    decoded: Any

    @property
    def version(self) -> str:
        """An entry's version: the SHA-256 of its signed canonical bytes. Every other kind's hash already covers
        all it says (its signature is a deterministic function of the rest), so its version is its hash."""
        return hashlib.sha256(self.body).hexdigest() if self.record.get("kind") == "entry" else self.hash


class Invalid(NamedTuple):
    """A received record that was refused, with the stable reason word and a human message."""

    hash: str | None
    reason: str
    detail: str


class Outcome(NamedTuple):
    """What happened to one received record."""

    hash: str | None
    outcome: OutcomeWord
    reason: str | None = None


class Cursor(NamedTuple):
    """How far this node has read a peer's feed: the peer's store epoch and its seq."""

    epoch: str
    seq: int


class CursorVersion(NamedTuple):
    """What a cursor says beside its position (docs/format-v3.md, 8.4): the protocol version of the release that
    took it (a newer release reconciles with the peer before trusting it) and the lowest feed position of a record
    refused only for being too new that no newer release has read again (`too_new_from`; None: there is none)."""

    version: int = PROTOCOL_VERSION
    too_new_from: int | None = None


@dataclass
class Page:
    """A page of the local changes feed: (seq, address, version, canonical body) of federated versions after
    `since`."""

    epoch: str
    head: int
    next: int
    more: bool
    items: list[tuple[int, str, str, bytes]] = field(default_factory=list)


@dataclass(frozen=True)
class PeerConfig:
    """A configured peer."""

    node_id: str
    url: str


class StoreUnavailable(Exception):
    """The store's database cannot be reached for now (a server restarting, a lost connection: a later call may
    succeed), or this process may no longer write for its node (node/errors.py's NotLeader: its work stops with the
    term): nothing of the call was done. A store raises it (or a subclass: node/store/conn.py's ConnectionLost);
    the puller counts it a failure and backs off, as after an unreachable peer, without a traceback."""

    # whether RoundFailures may log a run of these once: a NotLeader met round after round is leader work that
    # outlived its term, a bug to see each time
    repeats_quietly = True


class RoundFailures:
    """How one background loop that tries again by itself logs its failed rounds. A round that finds the store
    unavailable for now (StoreUnavailable: a database server restarting, a lost connection, a term of leader work
    that ended) is one warning line, as operations expect it, and only the first of a run of them: the next ones go to
    debug (but a kind that must not repeat: `repeats_quietly`), and the first round that gets through after several
    says how many failed (a loop of every second would otherwise log a line a second through an outage). Anything
    else is logged with its stack, as a bug, every time."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self.log, self.what = log, what
        self.unavailable = 0  # rounds in a row that found the store unavailable

    def failed(self, exc: BaseException) -> None:
        """Log the round's failure `exc`."""
        if not isinstance(exc, StoreUnavailable):
            self.log.error("%s failed", self.what, exc_info=exc)
            return
        self.unavailable += 1
        detail = " ".join(str(exc).split())[:300]
        self.log.log(
            logging.WARNING if self.unavailable == 1 or not exc.repeats_quietly else logging.DEBUG,
            "%s failed for now (%s); the next round tries again",
            self.what,
            detail,
        )

    def passed(self) -> None:
        """A round got through: after a run of unavailable rounds, say so once."""
        if self.unavailable > 1:
            self.log.warning(
                "%s works again, after %d rounds that found the store unavailable", self.what, self.unavailable
            )
        self.unavailable = 0


class SyncStore(Protocol):
    """Everything sync reads from and writes to a node's store."""

    node_id: str

    async def position(self) -> tuple[str, int]:
        """This store's (epoch, head seq)."""
        ...

    async def changes(
        self, since: int, limit: int, exclude_origin: str | None = None, v: int = PROTOCOL_VERSION
    ) -> Page:
        """Federated records with seq > since in arrival order, at most `limit` (scope=local never included).

        `exclude_origin` is the asking peer: a record of a space it or this node does not host is left out
        (`identity.space_rules.may_receive`; none: public only). Records that came from it are skipped: it sent
        them (echo suppression); so are
        records `sync.compat.servable` refuses to a peer speaking protocol `v`. `next` moves past skipped records."""
        ...

    async def wait_for_change(self, since: int, timeout: float) -> None:
        """Return when the head passes `since` or after `timeout` seconds."""
        ...

    async def fetch(
        self, ids: list[str], v: int = PROTOCOL_VERSION, peer_id: str | None = None
    ) -> list[tuple[str, str, bytes]]:
        """(address, version, canonical body) of the federated versions whose address or version is in `ids` (at
        protocol `v`, those `sync.compat.servable` allows), public or of a space both this node and the asking peer
        `peer_id` host (`identity.space_rules.may_receive`; no peer: public only)."""
        ...

    async def reconcile_items(
        self, v: int = PROTOCOL_VERSION, peer_id: str | None = None
    ) -> tuple[str, int, list[tuple[int, bytes]]]:
        """(epoch, head, sorted (created_ms, version bytes) of every federated version), from one snapshot (at
        protocol `v`, of those `sync.compat.servable` allows), public or of a space both this node and the peer
        `peer_id` on the other side host: the set both sides reconcile, so neither names a record of a space the
        other does not host (no peer: public only)."""
        ...

    async def set_items(
        self, v: int = PROTOCOL_VERSION, space: str | None = None
    ) -> tuple[str, int, list[tuple[int, bytes]]]:
        """(epoch, head, sorted (created_ms, version bytes)) of one reconciliation set, from one snapshot: the public
        federation's valid federated versions (`space` None) or one space's, every one held here (at protocol `v`,
        those `sync.compat.servable` allows). The same for every peer it is served to, so a responder keeps one
        snapshot per set; whether a peer may be answered over a space is the caller's (`served_spaces`)."""
        ...

    async def hosting_items(self, v: int, space: str, peer_id: str) -> list[tuple[int, bytes]]:
        """The set a responder answers a peer asking for a space not served to it: the hosting records of `space`
        naming `peer_id` (within the operator's filter), which the feed serves it too (so a removed host learns
        it); for any other asker none, as for a space that does not exist."""
        ...

    async def reconcile_spaces(self, peer_id: str, offered: frozenset[str]) -> list[str]:
        """The spaces to reconcile with `peer_id`, one round each: those served to it (`served_spaces`) and those
        it offered (it hosts them and counts this node a host: a late host's backlog), within the operator's
        filter of the peer."""
        ...

    async def served_spaces(self, peer_id: str | None) -> frozenset[str]:
        """The spaces whose records are served to `peer_id`: those both nodes host, within the operator's filter of
        the peer (`identity.space_rules.may_receive`; none for no peer). What a reconciliation snapshot is valid for,
        with the store's position."""
        ...

    async def refused(self, versions: list[str]) -> set[str]:
        """Those of `versions` this store refused or evicted (two better versions of their address are held), or
        holds already (outside the set it reconciles with a peer: a space it no longer serves that peer, while the
        peer still counts it a host): reconciliation does not fetch them."""
        ...

    async def refused_prefixes(self, prefixes: list[str]) -> set[str]:
        """Those of `prefixes` (each the first 32 hex digits of a version, as a compact ids page announces it:
        docs/decisions.md record 74) that begin a version `refused` would name: held, refused or evicted, waiting or
        void here."""
        ...

    async def reconcile_wanted(self) -> set[str]:
        """Peers to reconcile with at once, emptied by the call: a dependency (a key event, a vouch page) of records
        they sent and a full waiting cap dropped is now stored (docs/format-v3.md 7.3); a node's store may name
        every peer once when its epoch changed under it (what a restore or a failover lost comes back so)."""
        ...

    async def ingest(
        self,
        peer_id: str,
        records: list[Verified],
        invalid: list[Invalid],
        cursor: Cursor | None,
        too_new_from: int | None = None,
    ) -> list[Outcome]:
        """Store verified records idempotently, count outcomes for the peer and save `cursor`, in one transaction.

        An `invalid` item whose reason is `TOO_NEW` is counted `too_new`, never `invalid`, and never remembered.
        `too_new_from` (with a cursor: the lowest feed position of such a record in the page) lowers the peer's
        kept `too_new_from`; a cursor of another epoch replaces it. A cursor written takes this release's
        protocol version."""
        ...

    async def peers(self) -> list[PeerConfig]:
        """Configured peers."""
        ...

    async def cursor(self, peer_id: str) -> Cursor | None:
        """The saved cursor into a peer's feed."""
        ...

    async def cursor_version(self, peer_id: str) -> CursorVersion | None:
        """The saved cursor's protocol version and `too_new_from` (None: no cursor yet)."""
        ...

    async def upgrade_cursor(self, peer_id: str) -> None:
        """The cursor after an upgrade's reconciliation (docs/format-v3.md, 8.4): moved back to just before its
        `too_new_from` (so the feed is read again from there; records held come as `duplicate`), which is cleared,
        and given this release's protocol version."""
        ...

    async def note_peer(
        self,
        peer_id: str,
        *,
        remote_epoch: str | None = None,
        remote_head: int | None = None,
        error: str | None = None,
        reconciled: bool = False,
        health: PeerHealth | None = None,
        sync_version: int | None = None,
    ) -> None:
        """Record a peer's position after a successful exchange, or the error of a failed one (and, when
        given, how the puller is faring with it and the protocol version spoken with it)."""
        ...

    async def wanted(self, peer_id: str, now_ms: int, limit: int) -> list[str]:
        """Missing link targets to fetch from this peer now (due, and not given up)."""
        ...

    async def want_failed(self, peer_id: str, hashes: list[str], now_ms: int) -> None:
        """The peer did not serve these targets: back off (and give up after a bound)."""
        ...
