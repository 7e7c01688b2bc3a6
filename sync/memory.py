"""An in-memory SyncStore: the reference for what the protocol needs from storage, and a test double."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from dataclasses import dataclass, field

import msgspec

from identity import records
from identity.space_rules import may_receive
from sync import compat
from sync.messages import PROTOCOL_VERSION, PeerHealth
from sync.store import TOO_NEW, Cursor, CursorVersion, Invalid, Outcome, Page, PeerConfig, Verified
from wire.time import parse_ms

MAX_WANT_ATTEMPTS = 8


@dataclass
class _Want:
    peer: str
    attempts: int = 0
    next_ms: int = 0


@dataclass
class MemoryStore:
    """Records, cursors, peers and counters held in dictionaries. Follows the node's rule for versions
    (node/store/equivocation.py): at most two statements per address (versions equal but for `signing_key` and
    `signature` are one: `identity.records.statement_of`), the two whose best version has the smallest
    (scope != federation, version), with every version of them; an evicted version's seq stays empty."""

    node_id: str
    epoch: str = field(default_factory=lambda: secrets.token_hex(16))
    # (address, version, body, created_ms, scope), or None where an evicted version was
    log: list[tuple[str, str, bytes, int, str] | None] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)  # version -> seq
    addresses: dict[str, list[str]] = field(default_factory=dict)  # address -> versions held
    rejected: set[str] = field(default_factory=set)  # versions refused or evicted
    rejected_at: dict[str, str] = field(default_factory=dict)  # rejected version -> its address
    statements: dict[str, str] = field(default_factory=dict)  # version held -> its statement
    rotating: set[str] = field(default_factory=set)  # authors of key events or of records naming a signing_key
    peer_list: list[PeerConfig] = field(default_factory=list)
    cursors: dict[str, Cursor] = field(default_factory=dict)
    cursor_versions: dict[str, CursorVersion] = field(default_factory=dict)
    sync_versions: dict[str, int] = field(default_factory=dict)
    health: dict[str, PeerHealth] = field(default_factory=dict)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    wants: dict[str, _Want] = field(default_factory=dict)
    errors: dict[str, str | None] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    # space -> its hosting nodes (`identity.space_rules.hosting`), as the node's `space_hosts` projection holds them
    hosts: dict[str, frozenset[str]] = field(default_factory=dict)

    def add(self, v: Verified, scope: str = "federation", origin: str = "local") -> bool:
        """Append a verified version once, if the rule keeps it; True if new."""
        return self.put(v, scope, origin) == "saved"

    def put(self, v: Verified, scope: str = "federation", origin: str = "local") -> str:
        """Append a verified version: `saved`, `duplicate`, or `overflow` (two better versions are held)."""
        version = v.version
        if version in self.index:
            return "duplicate"
        held = self.addresses.get(v.hash, [])
        statement = records.statement_of(v.record) if v.record.get("kind") == "entry" else version
        groups: dict[str, list[str]] = {}
        for x in [*held, version]:
            groups.setdefault(statement if x == version else self.statements[x], []).append(x)
        ranked = sorted(groups, key=lambda s: min((self._scope(x, scope) != "federation", x) for x in groups[s]))
        keep = [x for s in ranked[:2] for x in groups[s]]
        if version not in keep:
            self._reject(version, v.hash)
            return "overflow"
        dropped = [x for x in held if x not in keep]
        if "signing_key" in v.record or v.record.get("kind") == "key_event":
            self.rotating.add(str(v.record["author_id"]))
        rotating = v.record["author_id"] in self.rotating  # the node's test: the author has key events
        if dropped and rotating and statement not in {self.statements[x] for x in held}:
            # the statement may have ranked lower when versions of it were refused: forget them (node's rule)
            for x in [x for x, a in self.rejected_at.items() if a == v.hash]:
                self.rejected.discard(x)
                del self.rejected_at[x]
        for x in dropped:
            self.log[self.index.pop(x) - 1] = None
            self.statements.pop(x, None)
            self._reject(x, v.hash)
        ms = parse_ms(v.record["created_at"])
        self.log.append((v.hash, version, v.body, ms, scope))
        self.origins[version] = origin
        self.index[version] = len(self.log)
        self.addresses[v.hash] = keep
        self.statements[version] = statement
        self.wants.pop(v.hash, None)
        self.changed.set()
        return "saved"

    def _reject(self, version: str, address: str) -> None:
        self.rejected.add(version)
        self.rejected_at[version] = address

    def _scope(self, version: str, new_scope: str) -> str:
        seq = self.index.get(version)
        entry = self.log[seq - 1] if seq else None
        return entry[4] if entry is not None else new_scope

    def _live(self) -> list[tuple[int, str, str, bytes, int, str]]:
        return [(seq, *e) for seq, e in enumerate(self.log, start=1) if e is not None]

    def served(self, peer_id: str | None, address: str, body: bytes) -> bool:
        """Whether the record is served to `peer_id` (None: public only): public, or of a space this store's node
        and the peer both host (`identity.space_rules.may_receive`, the node's rule)."""
        space = _space_of(address, body)
        hosts = self.hosts.get(space, frozenset()) if space is not None else frozenset()
        if space is None:
            return True
        if peer_id is not None and _names(body, peer_id):  # a hosting record naming the peer: as the node serves
            return True
        return peer_id is not None and may_receive(self.node_id, space, hosts) and may_receive(peer_id, space, hosts)

    async def position(self) -> tuple[str, int]:
        return self.epoch, len(self.log)

    async def changes(
        self, since: int, limit: int, exclude_origin: str | None = None, v: int = PROTOCOL_VERSION
    ) -> Page:
        scanned = [
            (seq, h, version, body)
            for seq, h, version, body, _ms, scope in self._live()
            if seq > since
            and scope == "federation"
            and self.origins.get(version) != exclude_origin
            and self.served(exclude_origin, h, body)
        ][:limit]
        more = len(scanned) == limit and scanned[-1][0] < len(self.log)
        items = [item for item in scanned if compat.servable(v, item[2], item[3])]
        return Page(self.epoch, len(self.log), scanned[-1][0] if more else len(self.log), more, items)

    async def wait_for_change(self, since: int, timeout: float) -> None:
        while not any(e is not None and e[4] == "federation" for e in self.log[since:]):
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), timeout)
            except TimeoutError:
                return

    async def fetch(
        self, ids: list[str], v: int = PROTOCOL_VERSION, peer_id: str | None = None
    ) -> list[tuple[str, str, bytes]]:
        wanted = set(ids)
        return [
            (h, version, body)
            for _seq, h, version, body, _ms, scope in self._live()
            if scope == "federation"
            and (h in wanted or version in wanted)
            and compat.servable(v, version, body)
            and self.served(peer_id, h, body)
        ]

    async def reconcile_items(
        self, v: int = PROTOCOL_VERSION, peer_id: str | None = None
    ) -> tuple[str, int, list[tuple[int, bytes]]]:
        items = sorted(
            (ms, bytes.fromhex(version))
            for _seq, h, version, body, ms, scope in self._live()
            if scope == "federation" and compat.servable(v, version, body) and self.served(peer_id, h, body)
        )
        return self.epoch, len(self.log), items

    async def set_items(
        self, v: int = PROTOCOL_VERSION, space: str | None = None
    ) -> tuple[str, int, list[tuple[int, bytes]]]:
        items = sorted(
            (ms, bytes.fromhex(version))
            for _seq, h, version, body, ms, scope in self._live()
            if scope == "federation" and compat.servable(v, version, body) and _space_of(h, body) == space
        )
        return self.epoch, len(self.log), items

    async def hosting_items(self, v: int, space: str, peer_id: str) -> list[tuple[int, bytes]]:
        return sorted(
            (ms, bytes.fromhex(version))
            for _seq, h, version, body, ms, scope in self._live()
            if scope == "federation"
            and compat.servable(v, version, body)
            and _space_of(h, body) == space
            and _names(body, peer_id)
        )

    async def reconcile_spaces(self, peer_id: str, offered: frozenset[str]) -> list[str]:
        return sorted(offered | await self.served_spaces(peer_id))  # no operator's filter here

    async def served_spaces(self, peer_id: str | None) -> frozenset[str]:
        if peer_id is None:
            return frozenset()
        return frozenset(
            s
            for s, hosts in self.hosts.items()
            if may_receive(self.node_id, s, hosts) and may_receive(peer_id, s, hosts)
        )

    async def refused(self, versions: list[str]) -> set[str]:
        return self.rejected.intersection(versions) | self.index.keys() & set(versions)

    async def refused_prefixes(self, prefixes: list[str]) -> set[str]:
        if not prefixes:
            return set()
        width = len(prefixes[0])
        known = {v[:width] for v in self.rejected | self.index.keys()}
        return {p for p in prefixes if p in known}

    async def reconcile_wanted(self) -> set[str]:
        return set()  # nothing here waits, so nothing is dropped

    async def ingest(
        self,
        peer_id: str,
        records: list[Verified],
        invalid: list[Invalid],
        cursor: Cursor | None,
        too_new_from: int | None = None,
    ) -> list[Outcome]:
        counts = self.counters.setdefault(peer_id, {})
        outcomes = []
        for v in records:
            space = _space_of(v.hash, v.body)
            if space is not None and not may_receive(self.node_id, space, self.hosts.get(space, frozenset())):
                invalid = [*invalid, Invalid(v.hash, "not_hosted", "this node does not host the space")]
                continue  # the node's rule (node/federation/space_gate.py): a space's records only on its hosts
            word = self.put(v, origin=peer_id)
            if word != "saved":
                outcomes.append(Outcome(v.hash, "duplicate" if word == "duplicate" else "overflow"))
            else:
                targets = _targets(v)
                missing = [t for t in targets if t not in self.addresses]
                for t in missing:
                    self.wants.setdefault(t, _Want(peer_id))
                outcomes.append(Outcome(v.hash, "pending_link" if missing else "saved"))
        outcomes += [
            Outcome(bad.hash, "too_new") if bad.reason == TOO_NEW else Outcome(bad.hash, "invalid", bad.reason)
            for bad in invalid
        ]
        for o in outcomes:
            counts[o.outcome] = counts.get(o.outcome, 0) + 1
        if cursor is not None:
            held = self.cursors.get(peer_id)
            kept = self.cursor_versions.get(peer_id, CursorVersion()).too_new_from
            if held is None or held.epoch != cursor.epoch:
                kept = None
            lowest = min((p for p in (kept, too_new_from) if p is not None), default=None)
            self.cursors[peer_id] = cursor
            self.cursor_versions[peer_id] = CursorVersion(PROTOCOL_VERSION, lowest)
        return outcomes

    async def peers(self) -> list[PeerConfig]:
        return list(self.peer_list)

    async def cursor(self, peer_id: str) -> Cursor | None:
        return self.cursors.get(peer_id)

    async def cursor_version(self, peer_id: str) -> CursorVersion | None:
        if peer_id not in self.cursors:
            return None
        return self.cursor_versions.get(peer_id, CursorVersion())

    async def upgrade_cursor(self, peer_id: str) -> None:
        cursor = self.cursors.get(peer_id)
        if cursor is None:
            return
        too_new_from = self.cursor_versions.get(peer_id, CursorVersion()).too_new_from
        if too_new_from is not None:
            self.cursors[peer_id] = Cursor(cursor.epoch, max(0, min(cursor.seq, too_new_from - 1)))
        self.cursor_versions[peer_id] = CursorVersion(PROTOCOL_VERSION, None)

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
        if sync_version is not None:
            self.sync_versions[peer_id] = sync_version
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

    def digest(self, v: int = PROTOCOL_VERSION, space: str | None = None) -> tuple[int, str]:
        """The public federation's digest, or one space's (as on the node)."""
        hashes = sorted(
            version
            for _seq, h, version, body, _ms, scope in self._live()
            if scope == "federation" and compat.servable(v, version, body) and _space_of(h, body) == space
        )
        return len(hashes), hashlib.sha256("".join(h + "\n" for h in hashes).encode()).hexdigest()


def _space_of(address: str, body: bytes) -> str | None:
    """The space of a stored record (a space's creation: its own address; None: public), as the node's log column."""
    record = msgspec.json.decode(body)
    if not isinstance(record, dict):
        return None
    if record.get("kind") == "space":
        return address
    space = record.get("space")
    return space if isinstance(space, str) else None


def _names(body: bytes, node_id: str) -> bool:
    """Whether a stored record is a hosting record naming `node_id`."""
    record = msgspec.json.decode(body)
    return isinstance(record, dict) and record.get("kind") == "space_host" and record.get("node") == node_id


def _targets(v: Verified) -> list[str]:
    """Record hashes a record links to (entry links; a link record's source and target)."""
    if v.record.get("kind") == "entry":
        return [link["target"] for link in v.record.get("links", [])]
    if v.record.get("kind") == "link":
        return [v.record["source"], v.record["target"]]
    return []
