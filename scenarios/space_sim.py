"""N nodes in one process, syncing spaces over the real sync code (issue 38; docs/performance.md, "Spaces in a
federation"): each node is a `sync.memory.MemoryStore` behind a `sync.server.SyncServer`, which serve and take a
space's records by the node's rule (`identity.space_rules.may_receive`). Pulls call the servers directly (no HTTP),
so what is measured is the protocol: the changes feed each round, then one negentropy reconciliation between every
pair of neighbours to prove nothing is left.

    python -m scenarios.space_sim [--nodes 100] [--spaces 10] [--degree 3] [--records 20] [--public 50] [--seed 1]

Topology: each node peers with `degree` random others, and each space's hosts form a ring among themselves (admins
name the hosts, operators peer them: docs/spaces.md), so every space's hosts are connected through hosts. Prints
one JSON object: rounds to converge, whether every record reached exactly its hosting nodes, and the bytes of record
bodies received per delivered record against the optimum (each hosting node receives each record once: 1.0).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import random
import secrets
import sys
from dataclasses import dataclass, field
from typing import Any

import msgspec

from identity import canonical, keys, records
from identity.space_rules import may_receive
from sync import compact
from sync import messages as m
from sync.ids_first import POLICIES, FeedModes, Policy, read_page
from sync.memory import MemoryStore
from sync.negentropy import Negentropy, VectorStorage
from sync.server import SyncServer
from sync.store import Cursor, Verified
from wire.time import format_ms

PAGE = 1000


@dataclass
class Node:
    """One simulated node: its key, store, server and neighbours (indexes)."""

    key: keys.SigningKey
    store: MemoryStore
    server: SyncServer
    feeds: FeedModes
    peers: set[int] = field(default_factory=set)
    compact: bool = True  # reads ids pages compact, fetching by seq (decision 74); False: as the release before


@dataclass
class Result:
    """What one run measured."""

    nodes: int
    spaces: int
    records: int
    rounds: int
    exact: bool  # every record on exactly its hosting nodes (public records: on all)
    deliveries: int  # records stored by a node that did not author them
    body_bytes: int  # bytes of record bodies in every feed page received
    optimum_bytes: int  # each delivered record's body once
    reply_bytes: int  # whole feed replies, envelopes included
    reconcile_need: int  # records the final reconciliation found missing (0: the feed delivered everything)
    reconcile_bytes: int
    refused: int = 0  # records a node refused on receipt (served to a node that does not host their space: a leak)
    space_body_bytes: int = 0  # as body_bytes and optimum_bytes, for the records of spaces only
    space_optimum_bytes: int = 0
    policy: str = "ids"  # how each node reads its peers' feeds (sync/ids_first.py): bodies, ids or adaptive
    # every request and reply body of the feed and of the fetches after ids pages, as JSON (HTTP headers aside)
    wire_bytes: int = 0
    space_wire_bytes: int = 0  # of them, the items, ids and bodies of the records of spaces
    fetches: int = 0  # fetch requests after ids pages
    announced: int = 0  # items of ids pages received (each an id and a size, no body)
    empty_poll_bytes: int = 0  # of wire_bytes, the replies that brought no item (a round's polls of an idle peer)

    @property
    def ratio(self) -> float:
        """Bytes of bodies received per byte of the optimum."""
        return round(self.body_bytes / self.optimum_bytes, 3) if self.optimum_bytes else 1.0

    @property
    def space_ratio(self) -> float:
        """The same, for the records of spaces only."""
        return round(self.space_body_bytes / self.space_optimum_bytes, 3) if self.space_optimum_bytes else 1.0

    @property
    def wire_ratio(self) -> float:
        """Every byte of the feed and its fetches per byte of the optimum: the honest figure."""
        return round(self.wire_bytes / self.optimum_bytes, 3) if self.optimum_bytes else 1.0

    @property
    def space_wire_ratio(self) -> float:
        """The bytes of the items, ids and bodies of the records of spaces per byte of their optimum."""
        return round(self.space_wire_bytes / self.space_optimum_bytes, 3) if self.space_optimum_bytes else 1.0


def _entry(key: keys.SigningKey, content: str, ms: int, space: str | None) -> Verified:
    body: dict[str, Any] = {
        "kind": "entry",
        "schema_version": canonical.SCHEMA_VERSION if space is None else canonical.SPACE_SCHEMA_VERSION,
        "author_id": key.did,
        "created_at": format_ms(ms),
        "entry_type": "finding",
        "performative": "inform",
        "content": content,
        "confidence": 0.5,
        "tags": [],
        "directed_to": [],
        "links": [],
        "metadata": {},
        "truth_state": "fact",
        "authority": "raw",
        "scope": "federation",
        **({} if space is None else {"space": space}),
    }
    record = records.sign(body, key)
    return Verified(records.compute_hash(record), canonical.canonical_bytes(record), record, None)


def build(
    n: int,
    spaces: int,
    degree: int,
    per_space: int,
    public: int,
    seed: int,
    policy: Policy = "ids",
    compact_ids: bool = True,
) -> tuple[list[Node], list[Any]]:
    """The nodes, their topology, hosts and records (each stored on its author's node). Returns the nodes and, per
    record, (Verified, space or None). `compact_ids`: nodes read ids pages compact (decision 74); False: as the
    release before (`ids=1`, fetch by version)."""
    rng = random.Random(seed)
    node_keys = [keys.SigningKey.from_seed(rng.randbytes(32)) for _ in range(n)]
    hosts: dict[str, frozenset[str]] = {}
    hosted_by: dict[str, list[int]] = {}
    for _ in range(spaces):
        space = rng.randbytes(32).hex()
        members = rng.sample(range(n), rng.randint(3, max(3, n // 5)))
        hosted_by[space] = members
        hosts[space] = frozenset(node_keys[i].did for i in members)
    nodes = []
    for key in node_keys:
        store = MemoryStore(node_id=key.did, epoch=secrets.token_hex(16), hosts=dict(hosts))
        server = SyncServer(store)  # its puller notes what each peer listed; its server lists none of it back
        nodes.append(Node(key, store, server, FeedModes(policy, listed=server.listed), compact=compact_ids))
    for i in range(n):  # a random graph
        for j in rng.sample([x for x in range(n) if x != i], min(degree, n - 1)):
            nodes[i].peers.add(j)
            nodes[j].peers.add(i)
    for members in hosted_by.values():  # each space's hosts peered in a ring
        for a, b in zip(members, [*members[1:], members[0]], strict=True):
            nodes[a].peers.add(b)
            nodes[b].peers.add(a)
    made: list[Any] = []
    ms = 1_700_000_000_000
    for space, members in sorted(hosted_by.items()):
        for r in range(per_space):
            author = rng.choice(members)
            ms += 1
            made.append((_entry(nodes[author].key, f"{space[:8]} note {r}", ms, space), space, author))
    for r in range(public):
        author = rng.randrange(n)
        ms += 1
        made.append((_entry(nodes[author].key, f"public note {r}", ms, None), None, author))
    for v, _space, author in made:
        nodes[author].store.add(v)
    return nodes, made


async def _pull(me: Node, peer: Node, result: Result, space_of: dict[str, str | None]) -> int:
    """One page of `peer`'s feed read by `me` as the puller reads it (`sync.ids_first.read_page`: ids first or by
    bodies, as `me.feeds` says), stored with its cursor; returns the records newly stored. Every request and reply
    body is counted, as JSON on the wire (HTTP headers and signatures aside)."""
    cursor = me.store.cursors.get(peer.key.did)
    since, epoch = (cursor.seq, cursor.epoch) if cursor else (0, None)

    def count(raw: int, version: str | None = None) -> None:
        result.wire_bytes += raw
        if version is not None and space_of.get(version) is not None:
            result.space_wire_bytes += raw

    async def ask(ids: int) -> m.ChangesReply:
        query = m.ChangesQuery(v=m.PROTOCOL_VERSION, since=since, epoch=epoch, limit=PAGE, ids=ids)
        # the query as the puller sends it: with the cursor's epoch once it has one (counted since decision 74)
        named = f"&epoch={epoch}" if epoch else ""
        count(len(f"since={since}{named}&limit={PAGE}&wait_ms=0&v={m.PROTOCOL_VERSION}" + f"&ids={ids}" * bool(ids)))
        reply = await peer.server.changes(query, me.key.did)
        raw = msgspec.json.encode(reply)
        result.reply_bytes += len(raw)
        if isinstance(reply, m.IdsPage):
            return _compact_page(reply, peer.key.did, (since, epoch), len(raw), result, space_of)
        items = reply.items if isinstance(reply, m.Changes) else []
        count(envelope := len(raw) - sum(len(msgspec.json.encode(i)) + 1 for i in items))
        result.empty_poll_bytes += 0 if items else envelope
        for item in items:
            count(len(msgspec.json.encode(item)) + 1, item.version)
            result.announced += item.record is msgspec.UNSET
            if item.record is not msgspec.UNSET:
                result.body_bytes += len(item.body())
                result.space_body_bytes += len(item.body()) if space_of.get(item.version) else 0
        return reply

    async def fetch(versions: list[str]) -> m.Records:
        request = m.FetchRequest(v=m.PROTOCOL_VERSION, hashes=versions)
        count(len(msgspec.json.encode(request)) - sum(len(v) + 3 for v in versions))
        for v in versions:
            count(len(v) + 3, v)
        reply = await peer.server.fetch(request, me.key.did)
        count(len(msgspec.json.encode(reply)) - sum(len(msgspec.json.encode(i)) + 1 for i in reply.items))
        for got in reply.items:
            count(len(msgspec.json.encode(got)) + 1, got.version)
            result.body_bytes += len(bytes(got.record))
            result.space_body_bytes += len(bytes(got.record)) if space_of.get(got.version) else 0
        result.fetches += 1
        return reply

    async def bodies(seqs: list[int]) -> list[bytes]:
        request = m.BodiesRequest(v=m.PROTOCOL_VERSION, seqs=compact.pack_seqs(seqs))
        count(len(msgspec.json.encode(request)))  # a few bytes a record: not split by space
        reply = await peer.server.bodies(request, me.key.did)
        count(len(msgspec.json.encode(reply)) - sum(len(r) + 1 for r in reply.records))
        for record in reply.records:
            version = hashlib.sha256(bytes(record)).hexdigest()
            count(len(record) + 1, version)
            result.body_bytes += len(record)
            result.space_body_bytes += len(record) if space_of.get(version) else 0
        result.fetches += 1
        return [bytes(r) for r in reply.records]

    page = await read_page(me.feeds, me.store, peer.key.did, ask, fetch, bodies if me.compact else None)
    assert isinstance(page, m.Changes)
    verified = [_verified(item) for item in page.items]
    outcomes = await me.store.ingest(peer.key.did, verified, [], Cursor(page.epoch, page.next))
    saved = sum(1 for o in outcomes if o.outcome == "saved")
    result.deliveries += saved
    result.refused += sum(1 for o in outcomes if o.outcome == "invalid")
    return saved


def _compact_page(
    reply: m.IdsPage,
    node_id: str,
    cursor: tuple[int, str | None],
    size: int,
    result: Result,
    space_of: dict[str, str | None],
) -> m.ChangesReply:
    """A compact ids page counted (all of it; a space's share of the packed base64 by each item's binary length)
    and read as the puller's client reads it (`sync.compact.expand`)."""
    since, epoch = cursor
    page = compact.expand(reply, node_id, since, PAGE, epoch)
    result.wire_bytes += size
    result.empty_poll_bytes += 0 if page.items else size
    binary, previous = [], since
    for item in page.items:
        one = compact.pack_items(previous, [(item.seq, item.version, int(item.size or 0))])
        binary.append(len(base64.b64decode(one)))
        previous = item.seq
    total = sum(binary) or 1
    for item, n in zip(page.items, binary, strict=True):
        result.space_wire_bytes += len(reply.items) * n // total if space_of.get(item.version) is not None else 0
    result.announced += len(page.items)
    return page


def _verified(item: m.ChangeItem) -> Verified:
    """A page's item as verified (an item fetched by seq names no address: it is computed, as verifying does)."""
    record = json.loads(item.body())
    return Verified(item.hash or records.compute_hash(record), item.body(), record, None)


async def _reconcile(me: Node, peer: Node, result: Result) -> None:
    """One negentropy reconciliation of `me` (initiator) with `peer`, over what they serve each other."""
    _e, _h, items = await me.store.reconcile_items(m.PROTOCOL_VERSION, peer.key.did)
    neg = Negentropy(VectorStorage(items))
    message: bytes | None = neg.initiate()
    have: list[bytes] = []
    need: list[bytes] = []
    while message is not None:
        result.reconcile_bytes += len(message)
        reply = await peer.server.reconcile(m.ReconcileRequest(v=m.PROTOCOL_VERSION, message=message.hex()), me.key.did)
        if reply.message is None:
            break
        result.reconcile_bytes += len(reply.message) // 2
        message = neg.reconcile(bytes.fromhex(reply.message), have, need)
    result.reconcile_need += len(need)


async def simulate(
    n: int = 100,
    spaces: int = 10,
    degree: int = 3,
    per_space: int = 20,
    public: int = 50,
    seed: int = 1,
    policy: Policy = "ids",
    compact_ids: bool = True,
) -> Result:
    """Run the federation until a round delivers nothing, then reconcile every pair of neighbours once."""
    nodes, made = build(n, spaces, degree, per_space, public, seed, policy, compact_ids)
    space_of = {v.version: s for v, s, _a in made}
    space_of |= {v[: compact.PREFIX_HEX]: s for v, s in list(space_of.items())}  # as a compact page announces them
    result = Result(n, spaces, len(made), 0, False, 0, 0, 0, 0, 0, 0, policy=policy)
    while True:
        result.rounds += 1
        delivered = 0
        for me in nodes:
            for j in sorted(me.peers):
                delivered += await _pull(me, nodes[j], result, space_of)
        if not delivered:
            break
    for i, me in enumerate(nodes):
        for j in sorted(me.peers):
            if i < j:
                await _reconcile(me, nodes[j], result)
    size = {v.version: len(v.body) for v, _s, _a in made}
    result.exact = True
    for node in nodes:
        held = {e[1] for e in node.store.log if e is not None}
        for v, space, _author in made:
            hosts = node.store.hosts.get(space, frozenset()) if space is not None else frozenset()
            should = may_receive(node.key.did, space, hosts)
            if (v.version in held) != should:
                result.exact = False
    once = {v.version: size[v.version] * (len(nodes) - 1 if s is None else len(nodes[0].store.hosts[s]) - 1)
            for v, s, _a in made}  # fmt: skip
    result.optimum_bytes = sum(once.values())
    result.space_optimum_bytes = sum(once[v.version] for v, s, _a in made if s is not None)
    return result


def main(argv: list[str] | None = None) -> int:
    """Run one simulation and print its result as JSON; exit 1 when a record is not exactly on its hosts."""
    parser = argparse.ArgumentParser(prog="python -m scenarios.space_sim", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--spaces", type=int, default=10)
    parser.add_argument("--degree", type=int, default=3)
    parser.add_argument("--records", type=int, default=20, help="records per space")
    parser.add_argument("--public", type=int, default=50, help="public records")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--policy", choices=POLICIES, default="ids", help="how feeds are read (decision 70)")
    parser.add_argument("--json-ids", action="store_true", help="ids pages as JSON, fetch by version (before 74)")
    args = parser.parse_args(argv)
    result = asyncio.run(
        simulate(
            args.nodes, args.spaces, args.degree, args.records, args.public, args.seed, args.policy, not args.json_ids
        )
    )
    ratios = {"ratio": result.ratio, "space_ratio": result.space_ratio}
    out = {**vars(result), **ratios, "wire_ratio": result.wire_ratio, "space_wire_ratio": result.space_wire_ratio}
    print(json.dumps(out))
    return 0 if result.exact and result.reconcile_need == 0 and result.refused == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
