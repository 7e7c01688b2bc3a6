"""The space gate's cost per batch against the size of a space's structure (issue 38; node/federation/space_gate.py,
docs/performance.md "Spaces in sync").

For each count of membership records (`BBS_BENCH_SPACE_GATE_MEMBERS`, default 10,1000,2000), a fresh node's store
takes from a peer a space's creation, the hosting record naming it and that many owner-signed member records, then
`BATCHES` batches of `PER_BATCH` posts by 10 of the writers, each through the production ingest transaction
(`node.federation.store.ingest_txn`: the key gate, the space gate, store, projections) with one writer's `Authority`
kept between batches, as a node keeps it. The figure is the CPU seconds of the process per batch (median): the
machine is shared, and CPU time moves less with its load than wall time. Ratio: the largest space's batch / the
smallest's; the gate is meant to make it about 1 (a batch costs what its posts cost).

    python -m scenarios.bench space-gate [--quick]
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from identity import canonical, keys, records
from node.features import LOG
from node.federation.store import add_peer_txn, ingest_txn
from node.ops.datadir import DataDir
from node.spaces.service import nonce
from node.store import db
from node.store.authority import Authority
from scenarios.bench import corpus, sync
from scenarios.bench.context import Context
from scenarios.bench.report import Row
from sync.store import Verified
from sync.verify import verify_record

BENCH = "space-gate"
BATCHES = 5
PER_BATCH = 1000
WRITERS = 10


def _signed(key: keys.SigningKey, **body: Any) -> dict[str, Any]:
    unsigned = {"schema_version": canonical.SCHEMA_VERSION, "author_id": key.did,
                "created_at": canonical.now_created_at(), **body}  # fmt: skip
    return records.sign(unsigned, key)


def _verified(items: list[dict[str, Any]]) -> list[Verified]:
    out = []
    for record in items:
        checked = verify_record(canonical.canonical_bytes(record), records.compute_hash(record))
        assert isinstance(checked, Verified), checked
        out.append(checked)
    return out


def batch_cpu(ctx: Context, members: int, batches: int = BATCHES, per_batch: int = PER_BATCH) -> list[float]:
    """CPU seconds of each batch of posts ingested into a fresh node hosting a space of `members` member records
    (each batch asserted stored whole)."""
    data, node_id = sync.fresh_node(ctx, f"space-gate-{members}")
    path: Path = DataDir(data).db_path
    owner, peer = keys.SigningKey.generate(), keys.SigningKey.generate().did
    now = int(time.time() * 1000)
    db.write_sync(path, lambda c: add_peer_txn(c, "http://127.0.0.1:9", peer, now), log=LOG)
    made = _signed(owner, kind="space", name=f"gate {members}", description="", nonce=nonce())
    space = records.compute_hash(made)
    writers = [keys.SigningKey.generate() for _ in range(WRITERS)]
    dids = [w.did for w in writers] + [keys.SigningKey.generate().did for _ in range(max(0, members - WRITERS))]
    structure = [made, _signed(owner, kind="space_host", space=space, node=node_id, role="host", seq=1)]
    structure += [_signed(owner, kind="space_member", space=space, member=d, role="writer", seq=1) for d in dids]
    authority = Authority()

    def ingest(batch: list[Verified]) -> None:
        outcomes = db.write_sync(path, lambda c: ingest_txn(c, peer, batch, [], None, now, authority), log=LOG)
        assert all(o.outcome == "saved" for o in outcomes), [o for o in outcomes if o.outcome != "saved"][:3]

    for i in range(0, len(structure), PER_BATCH):
        ingest(_verified(structure[i : i + PER_BATCH]))
    base = datetime.now(UTC) - timedelta(days=3)
    took: list[float] = []
    for b in range(batches):
        posts = []
        for j in range(per_batch):
            writer = writers[j % WRITERS]
            body = corpus.entry_body(
                writer.did, corpus.created_at_for(b * per_batch + j, base), f"post {b} {j}", [], []
            )
            posts.append(
                records.sign({**body, "schema_version": canonical.SPACE_SCHEMA_VERSION, "space": space}, writer)
            )
        batch = _verified(posts)
        start = time.process_time()
        ingest(batch)
        took.append(time.process_time() - start)
    return took


def run(ctx: Context) -> None:
    """CPU per batch of posts for each space size, and the ratio largest / smallest."""
    default = "10,30" if ctx.quick else "10,1000,2000"
    sizes = [int(n) for n in os.environ.get("BBS_BENCH_SPACE_GATE_MEMBERS", default).split(",")]
    per_batch = 50 if ctx.quick else PER_BATCH
    medians = {n: statistics.median(batch_cpu(ctx, n, per_batch=per_batch)) for n in sizes}
    small, large = min(sizes), max(sizes)
    for n in sizes:
        metric = f"CPU per batch of {per_batch:,} posts of a space of {n:,} member records"
        method = f"median of {BATCHES} batches, production ingest"
        ctx.report.add(Row(BENCH, metric, f"{medians[n] * 1000:,.0f} ms", method=method))
    ratio = medians[large] / medians[small]
    ctx.report.add(
        Row(
            BENCH,
            f"a batch's CPU, space of {large:,} member records vs {small:,}",
            f"{medians[large] * 1000:,.0f} ms",
            f"{medians[small] * 1000:,.0f} ms",
            ratio,
            "<= 1.5",
            ratio <= 1.5,
            "the gate decides posts against the space's kept resolution (node/spaces/judged.py)",
        )
    )
