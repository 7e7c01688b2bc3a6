"""The refuse-after-redaction check's cost on a catch-up (issue 39: "within 5% of catch-up without it").

Every batch a node ingests from a peer meets the check twice (`node/redaction/effects.py`: `screen_txn` before the
waiting area, `screen_appended` before the append), each a call of `node.redaction.store.any_named`. Three fresh
nodes catch up with the same `bbs serve` source holding N signed entries:

- **none**: the node holds no redaction (the common case), the check timed;
- **held**: the node first stores R redactions whose targets it has not seen (they refuse those bodies if they come),
  the check timed: its share of the catch-up is the figure the issue bounds;
- **without**: the same R redactions held, the check replaced by "nothing named" (what the catch-up costs without
  it; safe here since no target is in the source), the baseline of the ratio.

The check's share is measured inside one catch-up (stable); the ratio of two catch-ups is shown beside it (it moves
with the machine's noise). Run alone: `python -m scenarios.bench redaction-catchup`
(`BBS_BENCH_REDACTION_CATCHUP_RECORDS`, default 20,000; `BBS_BENCH_REDACTION_CATCHUP_HELD`, default 1,000).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from identity import canonical, keys, records
from node.redaction import store as redaction_store
from node.service import Node
from node.store.conn import Conn
from scenarios.bench import sync
from scenarios.bench.context import Context
from scenarios.bench.report import Row, ratio
from sync.store import PeerConfig, Verified
from sync.verify import verify_record
from wire.time import format_ms

BENCH = "redaction-catchup"
TARGET = 0.05


class CheckTimer:
    """Seconds spent in the check (`any_named`) while installed, and the calls made."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0


@contextmanager
def timed_check(timer: CheckTimer, *, skip: bool = False) -> Iterator[None]:
    """Replace `node.redaction.store.any_named` (both screens call it through the module) by a timed one, or by one
    answering "nothing named" (`skip`) for the baseline; restored on exit."""
    real = redaction_store.any_named

    def timed(conn: Conn, addresses: Iterable[str]) -> bool:
        started = time.perf_counter()
        try:
            return False if skip else real(conn, addresses)
        finally:
            timer.seconds += time.perf_counter() - started
            timer.calls += 1

    setattr(redaction_store, "any_named", timed)  # noqa: B010 (the bench swaps a module attribute on purpose)
    try:
        yield
    finally:
        setattr(redaction_store, "any_named", real)  # noqa: B010


def pending_redactions(count: int) -> list[Verified]:
    """`count` signed redactions, each naming an address nobody holds (so each stays pending, refusing its target)."""
    signers = [keys.SigningKey.generate() for _ in range(8)]
    out: list[Verified] = []
    now = int(time.time() * 1000)
    for i in range(count):
        signer = signers[i % len(signers)]
        target = hashlib.sha256(f"unseen-{i}".encode()).hexdigest()
        body = {
            "kind": "redaction",
            "schema_version": canonical.SCHEMA_VERSION,
            "author_id": signer.did,
            "created_at": format_ms(now - i),
            "target": target,
        }
        verified = verify_record(canonical.canonical_bytes(records.sign(body, signer)), None)
        assert isinstance(verified, Verified), verified
        out.append(verified)
    return out


async def _hold(data: Path, redactions: list[Verified]) -> int:
    node = Node(data)
    node.open()
    try:
        for start in range(0, len(redactions), 500):
            await node.sync.ingest("bench", redactions[start : start + 500], [], None)
        return await node.db.read(lambda conn: int(conn.execute("SELECT count(*) FROM redactions").fetchone()[0]))
    finally:
        node.close()


def _catch_up(data: Path, source: PeerConfig, n: int, timer: CheckTimer, *, skip: bool = False) -> float:
    with timed_check(timer, skip=skip):
        took, _traffic, _idle = sync.catch_up(data, source, n)
    return took


def run(ctx: Context) -> None:
    """The check's share of a catch-up, with no redaction held and with R held, and the catch-up without it."""
    n = int(os.environ.get("BBS_BENCH_REDACTION_CATCHUP_RECORDS", "200" if ctx.quick else "20000"))
    held = int(os.environ.get("BBS_BENCH_REDACTION_CATCHUP_HELD", "20" if ctx.quick else "1000"))
    entries = sync.records_for(n)
    redactions = pending_redactions(held)
    names = ("none", "held", "without")
    fresh = {name: sync.fresh_node(ctx, f"redaction-catchup-{name}") for name in names}
    for name in ("held", "without"):
        stored = asyncio.run(_hold(fresh[name][0], redactions))
        assert stored == held, f"{stored} of {held} redactions stored"
    timers = {name: CheckTimer() for name in names}
    took: dict[str, float] = {}
    pullers = [node_id for _, node_id in fresh.values()]
    with sync.served_source(ctx, entries, "redaction-catchup-source", pullers) as src:
        for name in names:
            took[name] = _catch_up(fresh[name][0], src, n, timers[name], skip=name == "without")
            print(f"  {name}: {took[name]:.2f}s, check {timers[name].seconds:.3f}s in {timers[name].calls} calls")
    for name in ("none", "held"):
        share = timers[name].seconds / took[name]
        holding = "no" if name == "none" else f"{held:,}"
        ctx.report.add(
            Row(
                BENCH,
                f"refuse-after-redaction check's share of a catch-up of {n:,} entries ({holding} redactions held)",
                f"{timers[name].seconds:.3f} s",
                f"{took[name]:.2f} s",
                share,
                f"<= {TARGET}",
                share <= TARGET,
                f"time inside store.any_named ({timers[name].calls} calls: both screens, every batch) over the whole"
                " catch-up from a `bbs serve` source, same run",
            )
        )
    ctx.report.add(
        Row(
            BENCH,
            f"catch-up of {n:,} entries with {held:,} redactions held, check on vs replaced by 'nothing named'",
            f"{took['held']:.2f} s",
            f"{took['without']:.2f} s",
            ratio(took["held"], took["without"]),
            method="two catch-ups of the same source into two fresh nodes holding the same redactions; their ratio"
            " moves with the machine's noise (the share above is measured inside one catch-up)",
        )
    )
