"""Spaces in sync (issue 38): what serving a space only to its hosts costs the changes feed, a catch-up and a
reconciliation, each against the public federation of the same size, in one run.

A source data folder holds 10 spaces of `m` entries each (the same words and authors as `scenarios/bench/spaces.py`'s
spread, each space's entries by its own 10 member writers), created and joined over REST on a `bbs serve`, the posts
appended to its log with the projections (stored federated, tagged with their space, as a node stores a peer's). The
pullers are named hosts of the first space only. A public source holds the same entries, all public.

1. **Changes feed filtered vs unfiltered.** A peer hosting 1 of the 10 spaces pages the spaced source's feed to its
   head (it is served that space's records: a tenth); the baseline pages the public source's feed of the same log
   (everything served). Seconds each, alternated, medians; ratio filtered / unfiltered (the filter must not cost more
   than serving everything).
2. **Catch-up of a space vs public.** A fresh node (the production puller: verify, the space gate, store, cursor)
   catches up the first space from the spaced source; the baseline catches up `m` public entries from a source of
   them. Records per second; ratio space / public.
3. **Reconciliation of one space among 10 vs one public set.** A store holding what the spaced source serves it but
   `d` of the first space's posts reconciles with it (negentropy over HTTP, the responder's set filtered for it);
   the baseline holds the `m` public entries but `d`. Seconds, round trips and bytes; ratio of seconds.

    python -m scenarios.bench spaces-sync [--quick]      # BBS_BENCH_SPACES_SYNC_RECORDS: entries per space
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from identity import keys
from identity.schema import EntryRecord
from identity.schema_v3 import struct_for
from node.features import LOG
from node.ops.datadir import DataDir
from node.store import db, projections
from scenarios.bench import corpus, spaces, sync
from scenarios.bench.context import Context
from scenarios.bench.harness import Server, bearer
from scenarios.bench.report import Row, rate
from sync import messages as m
from sync.client import PeerClient
from sync.memory import MemoryStore
from sync.puller import Puller
from sync.store import PeerConfig, Verified

BENCH = "spaces-sync"
FEED_ROUNDS = 3  # alternated rounds of each side's feed paging
DIFF = 10  # records the reconciling store lacks


def _call(url: str, method: str, path: str, api_key: str, body: Any) -> Any:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), method=method,
        headers={**bearer(api_key), "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read())


def _load_federated(data: Path, items: list[tuple[dict[str, Any], str]]) -> None:
    """Append signed entries to a data folder's log, stored federated (a space's too, as a host stores them)."""

    def job(conn: sqlite3.Connection) -> None:
        incoming = [
            projections.Incoming(r, h, msgspec.convert(r, struct_for(r) or EntryRecord), "federation") for r, h in items
        ]
        projections.append_many(conn, incoming, origin="local", now_ms=int(time.time() * 1000))

    db.write_sync(DataDir(data).db_path, job, log=LOG)


Spaced = tuple[Path, str, str, list[tuple[dict[str, Any], str]]]  # folder, admin token, first space, entries


def build_spaced(ctx: Context, signers: list[keys.SigningKey], per_space: int, hosts: list[str]) -> Spaced:
    """The spaced source (its first space hosted by `hosts` too), its admin token, its first space's id, and the
    entries it holds (`per_space` in each of the 10 spaces, each space's by its own writers among `signers`)."""
    source, token = corpus.fresh_data_dir(ctx.workdir, "spaces-sync-spaced")
    (_, owner), = corpus.register_agents(source, 1, keep_key=True, prefix="owner")  # fmt: skip
    ids: list[str | None] = []
    with Server(source) as server:
        for n in range(spaces.SPACES):
            space = str(_call(server.url, "POST", "/v1/spaces", owner, {"name": f"space {n}"})["space_id"])
            ids.append(space)
            for did in hosts if n == 0 else []:
                _call(server.url, "POST", f"/v1/spaces/{space}/hosts", owner, {"node": did, "role": "host"})
            for signer in signers[n * spaces.AUTHORS_PER_SPACE : (n + 1) * spaces.AUTHORS_PER_SPACE]:
                body = {"agent_id": signer.did, "role": "writer"}
                _call(server.url, "POST", f"/v1/spaces/{space}/members", owner, body)
    count = per_space * spaces.SPACES
    spaced = list(spaces.spread_entries(signers, count, ids))  # the 10 spaces only: no public slot
    _load_federated(source, spaced)
    first = ids[0]
    assert first is not None
    return source, token, first, spaced


def served_records(data: Path, space: str) -> list[Verified]:
    """What `data`'s node serves a host of `space` alone: its public federated records and the space's."""
    sql = "SELECT hash, body FROM records WHERE scope = 'federation' AND (space IS NULL OR space = ?) ORDER BY seq"
    with sqlite3.connect(f"file:{DataDir(data).db_path}?mode=ro", uri=True) as conn:
        rows = conn.execute(sql, (space,)).fetchall()
    return [Verified(str(h), bytes(b), json.loads(bytes(b)), None) for h, b in rows]


async def page_feed(source: PeerConfig, key: keys.SigningKey) -> tuple[float, int]:
    """Seconds to page `source`'s changes feed from 0 to its head as `key`'s node, and the items served."""
    async with aiohttp.ClientSession() as session:
        client = PeerClient(session, key, source.node_id, source.url)
        start, since, items = time.perf_counter(), 0, 0
        while True:
            page = await client.changes(since, None, m.MAX_CHANGES_LIMIT, 0)
            assert isinstance(page, m.Changes), page
            items += len(page.items)
            if not page.more or page.next == since:
                return time.perf_counter() - start, items
            since = page.next


async def reconcile(
    held: list[Verified], source: PeerConfig, key: keys.SigningKey, hosts: dict[str, frozenset[str]]
) -> tuple[float, int, int, int]:
    """A store holding `held` reconciles with `source`: (seconds, round trips, bytes both ways, records needed)."""
    store = MemoryStore(node_id=key.did, hosts=hosts)
    for v in held:
        store.add(v)
    async with aiohttp.ClientSession() as session:
        start = time.perf_counter()
        report = await Puller(store, key, session).reconcile(source)
        took = time.perf_counter() - start
    return took, report.rounds, report.bytes_sent + report.bytes_received, report.need


def without(records: list[Verified], posts: set[str], d: int) -> list[Verified]:
    """`records` but `d` of those whose address is in `posts`, chosen at random."""
    dropped = set(random.Random(d).sample(sorted(posts), d))
    return [v for v in records if v.hash not in dropped]


def run(ctx: Context) -> None:
    """The three ratios, as rows of the report."""
    per_space = int(os.environ.get("BBS_BENCH_SPACES_SYNC_RECORDS", "30" if ctx.quick else "2000"))
    feeder, reconciler = keys.SigningKey.generate(), keys.SigningKey.generate()
    fresh, fresh_id = sync.fresh_node(ctx, "spaces-sync-fresh")
    fresh_pub, fresh_pub_id = sync.fresh_node(ctx, "spaces-sync-fresh-public")
    pullers = [feeder.did, reconciler.did, fresh_id, fresh_pub_id]
    signers = [keys.SigningKey.generate() for _ in range(spaces.SPACES * spaces.AUTHORS_PER_SPACE)]
    spaced, token, space, entries = build_spaced(ctx, signers, per_space, [feeder.did, reconciler.did, fresh_id])
    public_all = list(spaces.spread_entries(signers, len(entries), [None] * spaces.SPACES))  # the same, public
    space_posts = {h for r, h in entries if r.get("space") == space}
    public_one = public_all[: len(space_posts)]
    with (
        sync.served_source(ctx, public_all, "spaces-sync-public", pullers) as pub_all,
        sync.served_folder(spaced, token, pullers) as spc,
    ):
        feed: dict[str, list[float]] = {"filtered": [], "public": []}
        served: dict[str, int] = {}
        for _ in range(FEED_ROUNDS):
            for side, source in (("filtered", spc), ("public", pub_all)):
                took, served[side] = asyncio.run(page_feed(source, feeder))
                feed[side].append(took)
        hosts = {space: frozenset({reconciler.did, spc.node_id})}
        mine = served_records(spaced, space)
        ours = asyncio.run(reconcile(without(mine, space_posts, DIFF), spc, reconciler, hosts))
        space_s, _traffic, _idle = sync.catch_up(fresh, spc, len(space_posts), space)
    with sync.served_source(ctx, public_one, "spaces-sync-public-one", pullers) as pub_one:
        held = served_records(ctx.workdir / "spaces-sync-public-one", "")
        base = asyncio.run(reconcile(without(held, {h for _r, h in public_one}, DIFF), pub_one, reconciler, {}))
        public_s, _traffic, _idle = sync.catch_up(fresh_pub, pub_one, len(public_one))
    f_ours, f_base = statistics.median(feed["filtered"]), statistics.median(feed["public"])
    n_space = len(space_posts)
    ctx.report.add(
        Row(
            BENCH,
            f"changes feed of {len(entries):,} records to a host of 1 of {spaces.SPACES} spaces vs unfiltered",
            f"{f_ours * 1000:,.0f} ms ({served['filtered']:,} served)",
            f"{f_base * 1000:,.0f} ms ({served['public']:,} served)",
            f_ours / f_base,
            "<= 1",
            f_ours / f_base <= 1,
            f"the peer pages the feed from 0 to head (pages of {m.MAX_CHANGES_LIMIT}, signed requests, no ingest); "
            f"baseline: the same entries all public; medians of {FEED_ROUNDS} alternated rounds",
        )
    )
    ctx.report.add(
        Row(
            BENCH,
            f"catch-up of a space's {n_space:,} entries vs {n_space:,} public: records/s",
            rate(n_space / space_s),
            rate(n_space / public_s),
            public_s / space_s,
            method="a fresh node's production puller (verify, the space gate, its kept resolution, store, cursor); "
            "the space's source holds 9 other spaces it is not served",
        )
    )
    ctx.report.add(
        Row(
            BENCH,
            f"reconcile one space among {spaces.SPACES} vs one public set ({n_space:,} entries, {DIFF} missing)",
            f"{ours[0] * 1000:,.0f} ms, {ours[1]} round trips, {ours[2]:,} B",
            f"{base[0] * 1000:,.0f} ms, {base[1]} round trips, {base[2]:,} B",
            ours[0] / base[0],
            method="negentropy over HTTP with the source as responder (its set filtered for the peer), then fetch; "
            f"needed {ours[3]} and {base[3]}",
        )
    )
