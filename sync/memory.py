"""An in-memory SyncStore: the reference for what the protocol needs from storage, and a test double."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from dataclasses import dataclass, field

import msgspec

from identity import canonical
from sync.messages import PeerHealth
from sync.store import Cursor, Invalid, Outcome, Page, PeerConfig, Verified

MAX_WANT_ATTEMPTS = 8


@dataclass
class _Want:
    peer: str
    attempts: int = 0
    next_ms: int = 0


@dataclass
class MemoryStore:
    """Records, cursors, peers and counters held in dictionaries."""

    node_id: str
    epoch: str = field(default_factory=lambda: secrets.token_hex(16))
    log: list[tuple[str, bytes, int, str]] = field(default_factory=list)  # (hash, body, created_ms, scope)
    index: dict[str, int] = field(default_factory=dict)
    peer_list: list[PeerConfig] = field(default_factory=list)
    cursors: dict[str, Cursor] = field(default_factory=dict)
    health: dict[str, PeerHealth] = field(default_factory=dict)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    wants: dict[str, _Want] = field(default_factory=dict)
    errors: dict[str, str | None] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, v: Verified, scope: str = "federation", origin: str = "local") -> bool:
        """Append a verified record once; True if new."""
        if v.hash in self.index:
            return False
        ms = int(canonical.parse_created_at(v.record["created_at"]).timestamp() * 1000)
        self.log.append((v.hash, v.body, ms, scope))
        self.origins[v.hash] = origin
        self.index[v.hash] = len(self.log)
        self.wants.pop(v.hash, None)
        self.changed.set()
        return True

    async def position(self) -> tuple[str, int]:
        return self.epoch, len(self.log)

    async def changes(self, since: int, limit: int, exclude_origin: str | None = None) -> Page:
        items = [
            (seq, h, body)
            for seq, (h, body, _ms, scope) in enumerate(self.log[since:], start=since + 1)
            if scope == "federation" and self.origins.get(h) != exclude_origin
        ][:limit]
        more = len(items) == limit and items[-1][0] < len(self.log)
        return Page(self.epoch, len(self.log), items[-1][0] if more else len(self.log), more, items)

    async def wait_for_change(self, since: int, timeout: float) -> None:
        while not any(scope == "federation" for *_, scope in self.log[since:]):
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), timeout)
            except TimeoutError:
                return

    async def fetch(self, hashes: list[str]) -> list[tuple[str, bytes]]:
        out = []
        for h in hashes:
            if h in self.index:
                _, body, _, scope = self.log[self.index[h] - 1]
                if scope == "federation":
                    out.append((h, body))
        return out

    async def reconcile_items(self) -> tuple[str, int, list[tuple[int, bytes]]]:
        items = sorted((ms, bytes.fromhex(h)) for h, _, ms, scope in self.log if scope == "federation")
        return self.epoch, len(self.log), items

    async def ingest(
        self, peer_id: str, records: list[Verified], invalid: list[Invalid], cursor: Cursor | None
    ) -> list[Outcome]:
        counts = self.counters.setdefault(peer_id, {})
        outcomes = []
        for v in records:
            if not self.add(v, origin=peer_id):
                outcomes.append(Outcome(v.hash, "duplicate"))
            else:
                targets = _targets(v)
                missing = [t for t in targets if t not in self.index]
                for t in missing:
                    self.wants.setdefault(t, _Want(peer_id))
                outcomes.append(Outcome(v.hash, "pending_link" if missing else "saved"))
        outcomes += [Outcome(bad.hash, "invalid", bad.reason) for bad in invalid]
        for o in outcomes:
            counts[o.outcome] = counts.get(o.outcome, 0) + 1
        if cursor is not None:
            self.cursors[peer_id] = cursor
        return outcomes

    async def peers(self) -> list[PeerConfig]:
        return list(self.peer_list)

    async def cursor(self, peer_id: str) -> Cursor | None:
        return self.cursors.get(peer_id)

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
        self.errors[peer_id] = error
        if health is not None:
            self.health[peer_id] = msgspec.structs.replace(health)

    async def wanted(self, peer_id: str, now_ms: int, limit: int) -> list[str]:
        return [
            h
            for h, w in self.wants.items()
            if w.peer == peer_id and w.next_ms <= now_ms and w.attempts < MAX_WANT_ATTEMPTS
        ][:limit]

    async def want_failed(self, peer_id: str, hashes: list[str], now_ms: int) -> None:
        for h in hashes:
            w = self.wants.get(h)
            if w is not None:
                w.attempts += 1
                w.next_ms = now_ms + min(600_000, 1000 * 2**w.attempts)

    def digest(self) -> tuple[int, str]:
        hashes = sorted(h for h, _, _, scope in self.log if scope == "federation")
        return len(hashes), hashlib.sha256("".join(h + "\n" for h in hashes).encode()).hexdigest()


def _targets(v: Verified) -> list[str]:
    """Record hashes a record links to (entry links; a link record's source and target)."""
    if v.record.get("kind") == "entry":
        return [link["target"] for link in v.record.get("links", [])]
    if v.record.get("kind") == "link":
        return [v.record["source"], v.record["target"]]
    return []
