"""`bbs peer add`, `bbs peers` and `bbs digest`: federation from the command line.

They work on the data folder of an existing node, never creating one (safe beside a running node: SQLite WAL,
one short transaction); a running node's scheduler re-reads the peer table every second, so `peer add` takes
effect without restart.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from sync.messages import PROTOCOL_VERSION, SYNC_VERSIONS

if TYPE_CHECKING:
    from node.ops.progress import Report
    from sync.messages import PeerList, PeerStatus
    from wire.api import RotatedNodeKey

EXIT_ERROR = 1


def cmd_peer_add(args: argparse.Namespace) -> int:
    from node.federation import store as sync_store
    from node.ops.datadir import DataDir, require_node
    from node.store import db
    from node.web.http import convert
    from sync.messages import PeerIn

    require_node(args.data)  # never creates a node: only init and serve do
    spaces = None if args.spaces is None else [s.strip() for s in args.spaces.split(",") if s.strip()]
    peer = convert({"url": args.url, "node_id": args.key, "spaces": spaces}, PeerIn)
    sync_store.check_peer_url(peer.url)
    path = DataDir(args.data).store
    now = int(time.time() * 1000)
    db.write_sync(path, lambda c: sync_store.add_peer_txn(c, peer.url, peer.node_id, now, peer.spaces))
    status = next(
        p
        for p in db.read_sync(path, lambda c: sync_store.peer_statuses(c, int(time.time() * 1000)))
        if p.node_id == peer.node_id
    )
    if args.json:
        print(msgspec.json.encode(status).decode())
    else:
        print(f"peer {status.node_id} at {status.url} added; a running node starts pulling within a second")
    return 0


def _listing(data: Path) -> PeerList:
    from node.federation import store as sync_store
    from node.ops.datadir import DataDir
    from node.store import db

    return db.read_sync(DataDir(data).store, lambda c: sync_store.peer_list(c, int(time.time() * 1000)))


def _node_key_holders(data: Path) -> tuple[str, set[str]] | None:
    """(the newest node key, the peers holding its rotation) while the key before it still signs, else None."""
    from node.federation import node_key
    from node.federation import store as sync_store
    from node.ops.datadir import DataDir
    from node.store import db

    found, _, holders = node_key.parse_state(db.read_sync(DataDir(data).store, sync_store.node_keys_meta))
    return (found[-1].did, holders) if len(found) > 1 else None


def _statuses(data: Path) -> list[PeerStatus]:
    return _listing(data).peers


def caught_up(statuses: list[PeerStatus]) -> bool:
    """True when this node has pulled everything every peer held when last asked."""
    return all(p.lag_records == 0 for p in statuses)


def watch(data: Path, interval: float, report: Report, *, sleep: Callable[[float], None] = time.sleep) -> int:
    """Report each peer's cursor against its head until every peer is caught up; returns the rounds it took.

    Each peer is one step, `report(f"{url}", cursor_seq, remote_head)` (total None until the peer answered)."""
    rounds = 0
    errors: dict[str, str | None] = {}
    while True:
        statuses = _statuses(data)
        rounds += 1
        for p in statuses:
            report(p.url, p.cursor_seq, p.remote_head)
            if p.last_error and errors.get(p.node_id) != p.last_error:
                print(f"{p.url}: {p.last_error}", file=sys.stderr, flush=True)
            errors[p.node_id] = p.last_error
        if caught_up(statuses):
            return rounds
        sleep(interval)


def cmd_peers(args: argparse.Namespace) -> int:
    from node.ops.datadir import require_node
    from sync.auth import clock_advice

    node_id = require_node(args.data)
    if args.watch:
        from node.ops.progress import Reporter

        if not _statuses(args.data):
            print("no peers; add one with: bbs peer add URL --key DID", file=sys.stderr)
            return 0
        with Reporter() as progress:
            watch(args.data, args.interval, progress)
        print("caught up with every peer", file=sys.stderr)
    listing = _listing(args.data)
    statuses = listing.peers
    if args.json:
        print(msgspec.json.encode(listing).decode())
        return 0
    for a in listing.equivocating_authors:
        print(f"equivocating author {a.author_id}: {a.equivocations} addresses with two versions")
    if not statuses:
        print("no peers; add one with: bbs peer add URL --key DID", file=sys.stderr)
        return 0
    rotation = _node_key_holders(args.data)
    for p in statuses:
        c = p.counters
        lag = "?" if p.lag_records is None else f"{p.lag_records} records / {p.lag_seconds}s"
        print(f"{p.node_id}  {p.url}" + (f"  sync protocol v{p.sync_version}" if p.sync_version else ""))
        if p.spaces is not None:  # the operator's filter (docs/sync.md, "Spaces")
            print("  spaces " + (", ".join(p.spaces) if p.spaces else "none (the public federation only)"))
        if rotation is not None:  # docs/operations.md, "Rotate the node key"
            holds = p.node_id in rotation[1]
            print(
                f"  node key {rotation[0]}: "
                + ("held (signed with it)" if holds else "not pulled yet (signed with the key before)")
            )
        print(f"  cursor {p.cursor_epoch or '-'}:{p.cursor_seq}  remote head {p.remote_head}  lag {lag}")
        print(
            f"  saved {c.saved}  duplicate {c.duplicate}  invalid {c.invalid}  pending-link {c.pending_link}"
            + (
                f"  ({', '.join(f'{k} {v}' for k, v in sorted(c.invalid_reasons.items()))})"
                if c.invalid_reasons
                else ""
            )
            + (f"  overflow {c.overflow}" if c.overflow else "")
            + (f"  too-new {c.too_new}" if c.too_new else "")
            + (f" (from feed position {p.too_new_from}: read again by a newer release)" if p.too_new_from else "")
            + (f"  internal {c.internal} (see this node's log)" if c.internal else "")
            + (f"  waiting {c.waiting}" if c.waiting else "")
            + (f"  dropped-waiting {c.dropped_waiting}" if c.dropped_waiting else "")
            + (f"  void {c.void}" if c.void else "")
        )
        print(f"  last ok {p.last_ok_at or '-'}  reconciliations {p.reconciliations}")
        h = p.health
        if h.waiting_for_peer:  # its 403 unknown_peer is the last error: a step of the setup, not a fault
            print(f"  waiting for the peer to add this node (on it: bbs peer add <this node's URL> --key {node_id})")
        if h.failures or h.throttled_polls or h.reconnect_reconciliations or h.resigned_requests:
            print(
                f"  failures {h.failures} ({h.consecutive_failures} in a row, {h.fetch_failures} fetches)"
                f"  throttled polls {h.throttled_polls}  reconciled on reconnect {h.reconnect_reconciliations}"
                f"  re-signed {h.resigned_requests}"
            )
        if h.clock_offset_s is not None:
            advice = clock_advice(h.clock_offset_s)
            print(f"  clock offset {h.clock_offset_s:+.1f} s" + (f": {advice}" if advice else ""))
        if p.last_error and not h.waiting_for_peer:
            print(f"  last error at {p.last_error_at}: {p.last_error}")
    return 0


def cmd_digest(args: argparse.Namespace) -> int:
    import re

    from node.errors import InvalidInput
    from node.federation import store as sync_store
    from node.ops.datadir import DataDir, require_database
    from node.store import db

    node_id = require_database(args.data)  # reads the database only: a restored replica needs no key
    if args.space is not None and not re.fullmatch("[0-9a-f]{64}", args.space):
        raise InvalidInput("--space takes a space id: 64 lowercase hex characters", field="--space")
    path = DataDir(args.data).store
    result = db.read_sync(path, lambda c: sync_store.digest(c, node_id, args.sync_version, args.space))
    if args.json:
        print(msgspec.json.encode(result).decode())
    else:
        print(f"{result.count} {result.sha256}")
    return 0


def cmd_node_rotate_key(args: argparse.Namespace) -> int:
    """Rotate the node key (`POST /v1/node/key`'s work) on a data folder no node serves: a serving node keeps its
    signing keys and key histories in memory, so it must make the change."""
    import asyncio

    from node.ops import datalock
    from node.ops.datadir import CommandError, require_node
    from node.service import Node

    if args.data.is_dir() and datalock.in_use(args.data):
        raise CommandError(
            f"a node serves {args.data}: rotate through it (POST /v1/node/key with the admin token), so it signs"
            " with the new key at once"
        )
    require_node(args.data)
    node = Node(args.data)

    async def run() -> RotatedNodeKey:
        node.open(search_index=False)
        try:
            return await node.node_keys.rotate()
        finally:
            node.close()

    rotated = asyncio.run(run())
    if args.json:
        print(msgspec.json.encode(rotated).decode())
    else:
        print(f"node_id:     {rotated.node_id}  (stays: node.key keeps the node's first key)")
        print(f"signing_key: {rotated.signing_key}  (signs sync requests to every peer holding the rotation)")
        print(f"key_event:   {rotated.event}  (vouches for {rotated.vouched} records of {rotated.previous_key})")
        print("the previous key signs only toward peers that have not pulled the rotation yet: see bbs peers")
    return 0


def add_parsers(sub: argparse._SubParsersAction, data_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register the federation subcommands on the `bbs` parser."""
    node = sub.add_parser("node", help="the node's own identity").add_subparsers(dest="node_command", required=True)
    p = node.add_parser(
        "rotate-key",
        help="give the node a new key (a key event signed by the current one)",
        description="Give the node a new signing key: a key event signed by the current key installs it and vouches"
        " for the records the log holds; the node id stays. Peers holding the rotation accept the new key; the old"
        " one keeps signing only toward peers that have not pulled it (bbs peers shows who has; docs/sync.md,"
        ' "Node key rotation"). Run it on a stopped node; a running one rotates through POST /v1/node/key (admin).',
    )
    data_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_node_rotate_key)

    peer = sub.add_parser("peer", help="manage federation peers").add_subparsers(dest="peer_command", required=True)
    p = peer.add_parser("add", help="add a peer node (takes effect on a running node within a second)")
    p.add_argument("url", help="the peer's base URL, e.g. http://10.0.0.2:8420")
    p.add_argument("--key", required=True, help="the peer's node id (did:key), from its `GET /v1/node`")
    p.add_argument(
        "--spaces",
        metavar="S1,S2",
        help="serve the peer, and take from it, only these spaces' records (of those both nodes host); without it,"
        " every space both host. The public federation is never filtered. Adding the peer again replaces it",
    )
    data_arg(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_peer_add)

    p = sub.add_parser("peers", help="show peers: cursor, lag, last error, per-record outcome counters")
    data_arg(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--watch", action="store_true", help="show each peer's catch-up as it goes; stop when caught up")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between two looks with --watch")
    p.set_defaults(func=cmd_peers)

    p = sub.add_parser("digest", help="count and SHA-256 of the sorted versions of federated records")
    data_arg(p)
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--sync-version",
        type=int,
        choices=SYNC_VERSIONS,
        default=PROTOCOL_VERSION,
        help="2: the digest of the v2-compatible records only, to compare with nodes of sync protocol v2",
    )
    p.add_argument(
        "--space",
        metavar="SPACE_ID",
        help="the digest of one space's records (equal on every node hosting it once in sync); without it, the"
        " public federation's",
    )
    p.set_defaults(func=cmd_digest)
