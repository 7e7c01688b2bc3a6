"""The redaction benchmark at tiny sizes (scenarios/bench/redaction.py): it redacts for real (the secret's terms
leave the index) and prints its rows. Never asserts a time."""

from __future__ import annotations

from pathlib import Path

from scenarios.bench import redaction
from scenarios.bench.context import Context, Sizes


def test_the_benchmark_scrubs_for_real_and_reports_each_figure(tmp_path: Path) -> None:
    ctx = Context(sizes=Sizes.quick(), workdir=tmp_path, quick=True)
    redaction.run(ctx, entries=120)
    rows = [r for r in ctx.report.rows if r.bench == "redaction"]
    assert [r.metric.split(":")[0].split(" ")[0] for r in rows] == [
        "scrub",
        "refuse-after-redaction",
        "secure_delete",
        "secure_delete",
    ]
    assert rows[0].met is True and "document frequency after: 0, index files holding it: 0" in rows[0].method
    assert all(r.ratio is not None and r.ratio > 0 for r in rows)
