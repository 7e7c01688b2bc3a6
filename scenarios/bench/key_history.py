"""Key-history benchmarks (issue 36): what a key history costs a peer catching up, and what waiting costs.

- Catch-up with a key history: a fresh node pulls N entries of one author whose key history has three steps (three
  `rotate` events, each signed by the key it retires, vouching for every record of that key, with its vouch pages;
  the first one also sets a recovery key) from a real `bbs serve`, over the signed changes feed (the production
  puller). The baseline is the same puller pulling N entries of one author with a single key, from a source built
  the same way, in the same run. Target: the history's catch-up takes at most 5% longer.
- Waiting for a rotation: records signed by rotated-in keys (several authors, within the waiting area's per-author
  cap) reach a node before the key events that install them: they wait and are re-checked when the events are
  stored. Measured: the time until all are stored, against the same records arriving after their key events.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from identity import canonical, key_files, key_history, keys, records, vouching
from node.federation import store as sync_store
from node.ops.datadir import DataDir
from node.service import Node
from node.store import db
from scenarios.bench import corpus, index_lag
from scenarios.bench import sync as sync_bench
from scenarios.bench.context import Context
from scenarios.bench.harness import Server
from scenarios.bench.report import Row, ratio
from sync.puller import Puller
from sync.store import PeerConfig, Verified
from sync.verify import verify_record

BENCH = "key-history"
BATCH = 500  # records per local ingest call (the changes feed's pages are 1,000)
STEPS = 3  # rotations in the history author's chain
TARGET = 1.05  # the history's catch-up time / the single key's


def version_of(record: dict[str, Any], address: str) -> str:
    """The record's version (docs/format-v3.md 6.2): an entry's is the hash of its signed bytes, else its address."""
    return canonical.sha256_hex(canonical.canonical_bytes(record)) if record["kind"] == "entry" else address


def signed_by(body: dict[str, Any], signer: keys.SigningKey) -> dict[str, Any]:
    """`body` signed by `signer`, naming it in `signing_key` when it is not the author's first key."""
    if signer.did != body["author_id"]:
        body = {**body, "signing_key": signer.did}
    return records.sign(body, signer)


def rotation(
    author: str,
    signer: keys.SigningKey,
    new: keys.SigningKey,
    versions: list[str],
    *,
    seq: int,
    prior: str | None,
    created_at: str,
    recovery: keys.SigningKey | None = None,
) -> tuple[tuple[dict[str, Any], str], list[tuple[dict[str, Any], str]]]:
    """A `rotate` event of `author` signed by `signer` installing `new`, vouching for `versions`, and its pages."""
    ordered = vouching.sorted_versions(versions)
    body: dict[str, Any] = {
        "kind": "key_event",
        "schema_version": "v1",
        "author_id": author,
        "created_at": created_at,
        "event": "rotate",
        "seq": seq,
        "key": new.did,
        "vouches": [vouching.vouch(signer.did, ordered).as_json()],
    }
    if prior is not None:
        body["prior"] = prior
    if recovery is not None:
        body["recovery"] = recovery.did
    event = signed_by(body, signer)
    address = records.compute_hash(event)
    pages = []
    for i in range(vouching.page_count(len(ordered))):
        members, proof = vouching.page(ordered, i)
        page = {
            "kind": "vouch_page",
            "schema_version": "v1",
            "author_id": author,
            "created_at": created_at,
            "event": address,
            "subject": signer.did,
            "page": i,
            "versions": members,
            "proof": proof,
        }
        signed_page = signed_by(page, signer)
        pages.append((signed_page, records.compute_hash(signed_page)))
    return (event, address), pages


def entries(
    author: str, signer: keys.SigningKey, count: int, start: int, gen: corpus.TextGen
) -> list[tuple[dict[str, Any], str]]:
    """`count` entries of `author` signed by `signer`, numbered from `start` (distinct timestamps)."""
    out = []
    for i in range(start, start + count):
        body = corpus.entry_body(author, corpus.created_at_for(i), gen.content(i), gen.tags(), [])
        record = signed_by(body, signer)
        out.append((record, records.compute_hash(record)))
    return out


def single_key_corpus(n: int) -> list[tuple[dict[str, Any], str]]:
    """N entries of one author with one key (today's identities)."""
    key = keys.SigningKey.generate()
    return entries(key.did, key, n, 0, corpus.TextGen(29))


def history_corpus(n: int, steps: int = STEPS) -> tuple[list[tuple[dict[str, Any], str]], int]:
    """N entries of one author whose chain has `steps` rotations, in the order a home node's log holds them: the
    first key's records, the rotation vouching for them and its pages, the next key's records, ...; and how many
    of the records are key events and pages."""
    chain = [keys.SigningKey.generate() for _ in range(steps + 1)]
    recovery = keys.SigningKey.generate()
    author = chain[0].did
    gen = corpus.TextGen(29)
    out: list[tuple[dict[str, Any], str]] = []
    authority = 0
    prior: str | None = None
    per_key = [n // (steps + 1) + (1 if i < n % (steps + 1) else 0) for i in range(steps + 1)]
    start = 0
    for i, key in enumerate(chain):
        segment = entries(author, key, per_key[i], start, gen)
        start += per_key[i]
        out += segment
        if i == steps:
            break
        (event, address), pages = rotation(
            author,
            key,
            chain[i + 1],
            [version_of(r, h) for r, h in segment],
            seq=i + 1,
            prior=prior,
            created_at=corpus.created_at_for(start),
            recovery=recovery if i == 0 else None,
        )
        out += [(event, address), *pages]
        authority += 1 + len(pages)
        prior = address
    return out, authority


def events_first(items: list[tuple[dict[str, Any], str]]) -> list[tuple[dict[str, Any], str]]:
    """The same records with the key events and pages first: every record of a rotated-out key then arrives after
    the rotation that vouches for it and is decided by its vouch page (the worst order for the writer)."""
    return [x for x in items if x[0]["kind"] != "entry"] + [x for x in items if x[0]["kind"] == "entry"]


def verified(items: list[tuple[dict[str, Any], str]]) -> list[Verified]:
    """The records as the verify workers pass them on."""
    out = []
    for record, address in items:
        checked = verify_record(canonical.canonical_bytes(record), address)
        assert isinstance(checked, Verified), checked
        out.append(checked)
    return out


async def ingest_all(data: Path, batches: list[list[Verified]]) -> tuple[float, int]:
    """Ingest pre-verified batches into the node at `data` as from one peer; (seconds, records the digest counts)."""
    node = Node(data)
    node.open()
    try:
        start = time.perf_counter()
        for batch in batches:
            await node.sync.ingest("file", batch, [], None)
        took = time.perf_counter() - start
        return took, (await node.sync.digest()).count
    finally:
        node.close()


def in_batches(items: list[Verified], size: int = BATCH) -> list[list[Verified]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def build_source(ctx: Context, items: list[tuple[dict[str, Any], str]], name: str) -> tuple[Path, str]:
    """A data folder holding `items`, stored by the node's sync ingest (the path that decides key events and
    pages); its admin token."""
    source, token = corpus.fresh_data_dir(ctx.workdir, name)
    _, count = asyncio.run(ingest_all(source, in_batches(verified(items))))
    assert count == len(items), f"{name}: stored {count} of {len(items)}"
    return source, token


@contextmanager
def served(source: Path, token: str, puller: str) -> Iterator[tuple[PeerConfig, Server]]:
    """`bbs serve` on `source`, accepting pulls by `puller`."""
    now = int(time.time() * 1000)
    db.write_sync(DataDir(source).db_path, lambda c: sync_store.add_peer_txn(c, "http://127.0.0.1:9", puller, now))
    with Server(source, extra_env={"BBS_SYNC": "off"}) as server:
        index_lag.Sampler(server.url, token).settle(timeout=300.0)  # the puller must not share the cores with it
        yield PeerConfig(key_files.load_key(DataDir(source).key_path).did, server.url), server


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process has used (Linux /proc; 0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> dict[int, float]:
    """CPU seconds of each live child of this process (the verify worker processes)."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            out[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


@dataclass
class Pull:
    """One catch-up: wall seconds, and CPU seconds of the puller (its process and verify workers) and the server."""

    wall: float
    cpu: float


async def _pull(data: Path, source: PeerConfig, server_pid: int, n: int) -> Pull:
    node = Node(data)
    node.open()
    try:
        async with aiohttp.ClientSession() as session:
            puller = Puller(node.sync, node.key, session)
            before = (time.perf_counter(), time.process_time(), children_cpu(), cpu_seconds(server_pid))
            while (await puller.catch_up(source)).more:
                pass
            wall = time.perf_counter() - before[0]
            workers = children_cpu()
            cpu = time.process_time() - before[1] + cpu_seconds(server_pid) - before[3]
            cpu += sum(t - before[2].get(pid, 0.0) for pid, t in workers.items())
            count = (await node.sync.digest()).count
            assert count >= n, f"caught up {count} of {n}"
            return Pull(wall, cpu)
    finally:
        node.close()


def catch_up_once(ctx: Context, source: tuple[Path, str], n: int, name: str) -> Pull:
    """A fresh node pulls the `n` records of a source (served for it) over the signed changes feed."""
    fresh, fresh_id = sync_bench.fresh_node(ctx, f"{name}-fresh")
    with served(*source, fresh_id) as (peer, server):
        now = int(time.time() * 1000)
        db.write_sync(DataDir(fresh).db_path, lambda c: sync_store.add_peer_txn(c, peer.url, peer.node_id, now))
        assert server.proc is not None
        return asyncio.run(_pull(fresh, peer, server.proc.pid, n))


@dataclass
class Waiting:
    """The waiting workload: per author, a rotation (signed by the first key) and records by the new key."""

    events: list[Verified]
    records: list[Verified]


def waiting_workload(authors: int, per_author: int) -> Waiting:
    """`authors` identities rotating once (vouching for nothing: the first key signed nothing), each with
    `per_author` entries signed by its new key."""
    gen = corpus.TextGen(31)
    events: list[tuple[dict[str, Any], str]] = []
    posts: list[tuple[dict[str, Any], str]] = []
    for a in range(authors):
        first, new = keys.SigningKey.generate(), keys.SigningKey.generate()
        created = corpus.created_at_for(a * per_author)
        (event, address), pages = rotation(first.did, first, new, [], seq=1, prior=None, created_at=created)
        assert pages == [] and key_history.signer_of(event) == first.did
        events.append((event, address))
        posts += entries(first.did, new, per_author, a * per_author, gen)
    return Waiting(verified(events), verified(posts))


def run(ctx: Context) -> None:
    """The catch-up ratio (history vs single key) and the waiting cost, as rows of the report."""
    n = int(os.environ.get("BBS_BENCH_KEYHIST_RECORDS", "400" if ctx.quick else "100000"))
    rounds = int(os.environ.get("BBS_BENCH_KEYHIST_ROUNDS", "1" if ctx.quick else "3"))
    history, extra = history_corpus(n)
    corpora = {"single": single_key_corpus(n), "history": history, "events-first": events_first(history)}
    sources = {name: build_source(ctx, items, f"kh-{name}-source") for name, items in corpora.items()}
    load = os.getloadavg()[0]
    pulls: dict[str, list[Pull]] = {name: [] for name in corpora}
    for r in range(rounds):  # rotate which goes first, so a slow stretch of the machine hits each
        names = list(corpora)[r % len(corpora) :] + list(corpora)[: r % len(corpora)]
        for which in names:
            pulls[which].append(catch_up_once(ctx, sources[which], len(corpora[which]), f"kh-{which}-{r}"))
            load = max(load, os.getloadavg()[0])
    single_cpu = statistics.median(p.cpu for p in pulls["single"])
    single_wall = statistics.median(p.wall for p in pulls["single"])
    for which, what in (
        ("history", "in the home node's log order (each key's records before the rotation that vouches for them)"),
        ("events-first", "with the key events and pages first (each rotated-out key's record decided by its page)"),
    ):
        cpu = statistics.median(p.cpu for p in pulls[which])
        wall = statistics.median(p.wall for p in pulls[which])
        slower = ratio(cpu, single_cpu)
        ctx.report.add(
            Row(
                BENCH,
                f"catch-up of {n:,} entries by a {STEPS}-step key history {what} vs a single key: CPU seconds",
                f"{cpu:.2f} s CPU, {wall:.2f} s wall",
                f"{single_cpu:.2f} s CPU, {single_wall:.2f} s wall",
                slower,
                f"<= {TARGET}",
                slower <= TARGET,
                f"fresh node pulls from a `bbs serve` (production puller); CPU of the puller's process, its verify"
                f" workers and the server (wall time moves with the machine's load: wall ratio"
                f" {ratio(wall, single_wall):.2f}); history: {STEPS} rotations with vouches and {extra - STEPS} vouch"
                f" pages ({extra} records more); median of {rounds} runs each, order rotated (CPU: {which}"
                f" {_list([p.cpu for p in pulls[which]])}, single {_list([p.cpu for p in pulls['single']])}; wall:"
                f" {which} {_list([p.wall for p in pulls[which]])}, single"
                f" {_list([p.wall for p in pulls['single']])}); load average up to {load:.2f}",
            )
        )
    authors, per_author = (4, 20) if ctx.quick else (40, 200)  # 8,000 records: within the per-peer cap (10,000)
    work = waiting_workload(authors, per_author)
    total = len(work.events) + len(work.records)
    after_dir, _ = corpus.fresh_data_dir(ctx.workdir, "kh-after")
    before_dir, _ = corpus.fresh_data_dir(ctx.workdir, "kh-before")
    load = os.getloadavg()[0]
    after_s, after_n = asyncio.run(ingest_all(after_dir, [work.events, *in_batches(work.records)]))
    before_s, before_n = asyncio.run(ingest_all(before_dir, [*in_batches(work.records), work.events]))
    load = max(load, os.getloadavg()[0])
    assert after_n == total and before_n == total, (after_n, before_n, total)
    cost = ratio(before_s, after_s)
    ctx.report.add(
        Row(
            BENCH,
            f"{len(work.records):,} records of {authors} rotated authors arriving before their key events: seconds"
            " until all are stored",
            f"{before_s:.2f} s",
            f"{after_s:.2f} s (arriving after)",
            cost,
            method=f"the node's sync ingest in-process, batches of {BATCH}, pre-verified; before: every record"
            " waits, then one batch of the key events re-checks them (1,000 per transaction, the rest in the"
            f" writer's next jobs); load average up to {load:.2f}",
        )
    )


def _list(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)
