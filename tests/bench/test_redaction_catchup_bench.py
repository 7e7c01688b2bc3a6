"""The redaction-catchup benchmark at a tiny size (scenarios/bench/redaction_catchup.py): its nodes really hold the
pending redactions, its timer really sees both screens of every batch, and its baseline really skips the check.
Never asserts a time."""

from __future__ import annotations

import asyncio
from pathlib import Path

from node.redaction import store as redaction_store
from scenarios.bench import redaction_catchup, sync
from scenarios.bench.context import Context, Sizes


def test_the_timer_sees_the_check_and_the_baseline_skips_it(tmp_path: Path) -> None:
    ctx = Context(sizes=Sizes.quick(), workdir=tmp_path, quick=True)
    fresh, fresh_id = sync.fresh_node(ctx, "fresh")
    redactions = redaction_catchup.pending_redactions(5)
    assert asyncio.run(redaction_catchup._hold(fresh, redactions)) == 5
    real = redaction_store.any_named
    timer = redaction_catchup.CheckTimer()
    with sync.served_source(ctx, sync.records_for(30), "source", [fresh_id]) as source:
        took = redaction_catchup._catch_up(fresh, source, 30, timer)
    assert redaction_store.any_named is real  # put back
    assert took > 0 and timer.calls >= 2 and timer.seconds > 0  # both screens of at least one batch
    skipped = redaction_catchup.CheckTimer()
    with redaction_catchup.timed_check(skipped, skip=True):
        assert redaction_store.any_named(None, [redactions[0].record["target"]]) is False  # type: ignore[arg-type]
    assert skipped.calls == 1


def test_the_benchmark_reports_each_figure(tmp_path: Path) -> None:
    ctx = Context(sizes=Sizes.quick(), workdir=tmp_path, quick=True)
    redaction_catchup.run(ctx)
    rows = [r for r in ctx.report.rows if r.bench == "redaction-catchup"]
    assert len(rows) == 3 and all(r.ratio is not None and r.ratio > 0 for r in rows)
    assert [r.met is not None for r in rows] == [True, True, False]
