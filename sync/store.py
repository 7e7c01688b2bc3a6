"""The storage interface sync needs, implemented by the node's database and by `sync.memory`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

from sync.messages import PeerHealth

# `internal`: the record met an error in the receiving node's own code (not the peer's fault; logged there).
# `overflow`: a version refused because its address already holds two versions that precede it (docs/sync.md).
# `waiting`: its authority (a key event installing its signing key) is not held: it waits, not stored in the log;
# `dropped_waiting`: so, but a waiting cap was full: stored nowhere, offered again by reconciliation; `void`: its key
# may not sign for its author (docs/format-v3.md, 3.5 and 7).
OutcomeWord = Literal[
    "saved", "duplicate", "invalid", "pending_link", "overflow", "internal", "waiting", "dropped_waiting", "void"
]


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


class SyncStore(Protocol):
    """Everything sync reads from and writes to a node's store."""

    node_id: str

    async def position(self) -> tuple[str, int]:
        """This store's (epoch, head seq)."""
        ...

    async def changes(self, since: int, limit: int, exclude_origin: str | None = None) -> Page:
        """Federated records with seq > since in arrival order, at most `limit` (scope=local never included).

        Records that came from `exclude_origin` are skipped: the asking peer sent them (echo suppression)."""
        ...

    async def wait_for_change(self, since: int, timeout: float) -> None:
        """Return when the head passes `since` or after `timeout` seconds."""
        ...

    async def fetch(self, ids: list[str]) -> list[tuple[str, str, bytes]]:
        """(address, version, canonical body) of the federated versions whose address or version is in `ids`."""
        ...

    async def reconcile_items(self) -> tuple[str, int, list[tuple[int, bytes]]]:
        """(epoch, head, sorted (created_ms, version bytes) of every federated version), from one snapshot."""
        ...

    async def refused(self, versions: list[str]) -> set[str]:
        """Those of `versions` this store refused or evicted (two better versions of their address are held):
        reconciliation does not fetch them again."""
        ...

    async def ingest(
        self, peer_id: str, records: list[Verified], invalid: list[Invalid], cursor: Cursor | None
    ) -> list[Outcome]:
        """Store verified records idempotently, count outcomes for the peer and save `cursor`, in one transaction."""
        ...

    async def peers(self) -> list[PeerConfig]:
        """Configured peers."""
        ...

    async def cursor(self, peer_id: str) -> Cursor | None:
        """The saved cursor into a peer's feed."""
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
    ) -> None:
        """Record a peer's position after a successful exchange, or the error of a failed one (and, when
        given, how the puller is faring with it)."""
        ...

    async def wanted(self, peer_id: str, now_ms: int, limit: int) -> list[str]:
        """Missing link targets to fetch from this peer now (due, and not given up)."""
        ...

    async def want_failed(self, peer_id: str, hashes: list[str], now_ms: int) -> None:
        """The peer did not serve these targets: back off (and give up after a bound)."""
        ...
