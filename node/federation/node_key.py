"""The node key's rotation (`bbs node rotate-key`, `POST /v1/node/key`) and the keys the node signs with.

The node's id stays its first key's did:key (`node.key`, which the database's node id is checked against at every
start); a rotation is a `rotate` key event with the node's did as `author_id`, signed by the current node key and
vouching for every record of the node the log holds signed by it (lease grants, notices), with its vouch pages,
exactly as a node-kept agent's rotation (node/agents/key_events.py): it travels by sync as any key event. The
node's signing keys after a rotation live in `node_meta` (so every backup taken after the rotation has them): the
newest, and the one before it while some peer has not pulled the rotation (`NodeSigner`, sync/auth.py, chooses per
peer: a peer that accepted a request signed by the newest key holds the rotation). Once every peer does, the key
before is dropped from `node_meta` and never signs again. Before the rotation commits the key fence
(node/store/key_fence.py) records the key rotated out: a database restored from before the rotation then signs
nothing (`node_key_rotated_out`; docs/decisions.md record 60).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable

from identity import keys
from node.agents.key_events import put_back_unless_committed, rotation_records, submit_txn
from node.errors import Conflict
from node.federation import store
from node.store.authority import versions_signed_by
from node.store.conn import Conn
from node.store.db import Database
from node.store.sealing import Sealing
from sync.auth import NodeKeyRotatedOut, NodeSigner
from sync.store import Verified
from wire.api import NodeKeyState, RotatedNodeKey

log = logging.getLogger("bbs.node")


def parse_state(raw: str | None) -> tuple[list[keys.SigningKey], list[str], set[str]]:
    """(signing keys newest last, the key events installing them, peers holding the newest) from `node_meta`."""
    if raw is None:
        return [], [], set()
    data = json.loads(raw)
    found = [keys.SigningKey.from_seed(keys.b64u_decode(seed)) for seed in data["keys"]]
    return found, [str(e) for e in data["events"]], {str(p) for p in data["holders"]}


def dump_state(signing_keys: list[keys.SigningKey], events: list[str], holders: set[str]) -> str:
    """The `node_meta` value of the node's signing keys (seeds: the database holds node-kept seeds already)."""
    return json.dumps(
        {"keys": [keys.b64u(k.seed) for k in signing_keys], "events": events, "holders": sorted(holders)},
        sort_keys=True,
    )


def rotate_node_key_txn(
    conn: Conn, sealing: Sealing, node_id: str, current: keys.SigningKey, new: keys.SigningKey, now_ms: int
) -> tuple[Verified, int, list[str]]:
    """Store a `rotate` event of the node signed by `current` installing `new` (see the module's docstring) and the
    node's new signing-key state: (the event, records vouched for, the events installing the node's keys)."""
    authority = sealing.authority
    authority.ensure_txn(conn)
    history = authority.history(node_id)
    if history.state.key != current.did:
        raise Conflict(
            "the node key this node signs with is no longer its current key (another key event replaced it)",
            code="key_not_current",
        )
    versions = versions_signed_by(conn, node_id, current.did)
    prior = history.chain[-1] if history.chain else None
    event, pages = rotation_records(node_id, current, new, len(history.chain) + 1, prior, versions)
    submit_txn(conn, authority, event, pages, now_ms)
    _, events, _ = parse_state(store.node_keys_meta(conn))
    events = [*events, event.hash]
    store.set_node_keys_txn(conn, dump_state([current, new], events, set()))
    return event, len(versions), events


class NodeKeys:
    """The keys this node signs with (`signer`), loaded from `node_meta` and the key fence, and their rotation."""

    def __init__(self, db: Database, sealing: Sealing, first: keys.SigningKey, now_ms: Callable[[], int]) -> None:
        self.db, self.sealing, self.now_ms = db, sealing, now_ms
        self.signer = NodeSigner(first.did, [first], on_holder=self._holder)
        self.events: list[str] = []

    @property
    def node_id(self) -> str:
        """The node's id: its first key's did:key."""
        return self.signer.node_id

    def load(self, conn: Conn) -> None:
        """Read the node's signing keys from `node_meta` and block signing when the key fence names the newest one
        as rotated out (a database restored from before a rotation); first forget the fence's rotations that never
        committed in this database (`KeyFence.settle`)."""
        self._settle_fence(conn)
        found, self.events, holders = parse_state(store.node_keys_meta(conn))
        if found:
            self.signer.keys, self.signer.holders = found, holders
        self.signer.blocked = self.sealing.key_fence.refusal(self.node_id, self.signer.keys[-1].did)
        if self.signer.blocked is not None:
            log.error("node key: %s", self.signer.blocked)

    def settle_txn(self, conn: Conn) -> None:
        """`KeyFence.settle` while serving (`settle`): the fence's entries whose commit was never known (a wait
        cancelled, a connection lost at COMMIT, a mark that could not be written) are marked or, a minute on and
        their event not held, forgotten; the node key's block is decided again when one was."""
        if self._settle_fence(conn):
            self.signer.blocked = self.sealing.key_fence.refusal(self.node_id, self.signer.keys[-1].did)

    def _settle_fence(self, conn: Conn) -> bool:
        """`KeyFence.settle` against this database; whether it forgot an entry."""
        held = functools.partial(store.holds_key_event, conn)
        return bool(self.sealing.key_fence.settle(store.store_epoch(conn), held, self.now_ms()))

    async def settle(self) -> None:
        """`settle_txn` on a reader, when the key fence has an entry not known committed (nothing otherwise)."""
        if self.sealing.key_fence.unsettled():
            await self.db.read(self.settle_txn)

    def reload_txn(self, conn: Conn) -> None:
        """Take the node's signing keys from `node_meta` again, in a write transaction: another process of the node
        stored a key event (it may have rotated the node key; record 90). The key fence's verdict is this folder's,
        as at `load`."""
        found, events, holders = parse_state(store.node_keys_meta(conn))
        if found and [k.did for k in found] != [k.did for k in self.signer.keys]:
            log.info("node key: another process of this node rotated it; signing with %s", found[-1].did)
            self.signer.keys, self.signer.holders, self.events = found, holders, events
            self.signer.blocked = self.sealing.key_fence.refusal(self.node_id, self.signer.keys[-1].did)

    def state(self) -> NodeKeyState:
        """What `bbs peers` and `GET /v1/node/key` show: the key signing now, the one before, who holds the newest."""
        signer = self.signer
        return NodeKeyState(
            node_id=self.node_id,
            signing_key=signer.keys[-1].did,
            previous_key=signer.keys[-2].did if len(signer.keys) > 1 else None,
            events=list(self.events),
            peers_holding=sorted(signer.holders),
            blocked=signer.blocked,
        )

    async def rotate(self) -> RotatedNodeKey:
        """Rotate the node key (`rotate_node_key_txn`); requests to peers holding the rotation are signed with the
        new key from now on, the others with the key before until they have pulled it."""
        try:
            current = self.signer.current
        except NodeKeyRotatedOut as exc:
            raise Conflict(exc.detail, code="node_key_rotated_out") from None
        new = keys.SigningKey.generate()
        fence = self.sealing.key_fence
        fenced: list[dict[str, str]] = []

        def job(conn: Conn) -> tuple[Verified, int, list[str]]:
            event, vouched, events = rotate_node_key_txn(conn, self.sealing, self.node_id, current, new, self.now_ms())
            epoch = store.store_epoch(conn)
            fenced.append(fence.record(self.node_id, current.did, new.did, event.hash, epoch, self.now_ms()))  # last
            return event, vouched, events

        try:
            event, vouched, events = await self.db.write(job)
        except BaseException as exc:
            self.sealing.authority.invalidate()
            await put_back_unless_committed(self.db, fence, fenced, exc)
            raise
        self.signer.keys, self.signer.holders, self.events = [current, new], set(), events
        log.info("node key of %s rotated to %s by key event %s", self.node_id, new.did, event.hash)
        # last: if the mark's wait is cancelled, this process already signs with the new key (and `_holder`
        # writes the new key's state back, never the old)
        await asyncio.to_thread(fence.committed, fenced[0])
        return RotatedNodeKey(
            node_id=self.node_id, signing_key=new.did, previous_key=current.did, event=event.hash, vouched=vouched
        )

    async def _holder(self, peer: str) -> None:
        """A peer accepted the newest key: remember it; once every peer has, the key before is dropped.

        Decided in the write job against the state as stored: another process of the node (or a rotation here
        meanwhile) may have rotated the key, whose state is then kept as it is (the holders of a key no longer the
        newest count for nothing); holders another process recorded for the same keys are kept too, but for the
        peers this process saw refuse the newest key since. What this process holds changes once the write
        committed."""
        signer = self.signer
        peers = await self.db.read(store.peer_node_ids)
        dids = [k.did for k in signer.keys]

        def job(conn: Conn) -> tuple[list[keys.SigningKey], set[str]] | None:
            found, _, stored_holders = parse_state(store.node_keys_meta(conn))
            if found and [k.did for k in found] != dids:
                return None  # rotated (or dropped) since: reload_txn takes the stored state in
            holders = signer.holders | (stored_holders - signer.lacking)
            kept = signer.keys[-1:] if peers <= holders and len(signer.keys) > 1 else list(signer.keys)
            store.set_node_keys_txn(conn, dump_state(kept, self.events, holders))
            return kept, holders

        decided = await self.db.write(job)
        if decided is None or [k.did for k in signer.keys] != dids:
            return
        kept, holders = decided
        signer.holders |= holders - signer.lacking
        if len(kept) < len(signer.keys):
            log.info("every peer holds node key %s: the key before signs no more", kept[-1].did)
            signer.keys = kept
