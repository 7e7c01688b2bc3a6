"""Benchmark results: one row per figure (ours, the baseline measured in the same run, their ratio, the method)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Row:
    """One measured figure.

    `ratio` is always ours / baseline. `target` states which way is good (">= 0.5" for a throughput
    fraction, "<= 2" for a latency multiple); `met` is None when there is no target.
    """

    bench: str
    metric: str
    ours: str
    baseline: str = "—"
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    method: str = ""


@dataclass
class Report:
    """Rows collected over a run, printed as one Markdown table per benchmark."""

    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def table(self, bench: str | None = None) -> str:
        """The rows (of one benchmark, or all) as a Markdown table."""
        rows = [r for r in self.rows if bench is None or r.bench == bench]
        lines = [
            "| benchmark | metric | ours | baseline (same run) | ratio | target | method |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            ratio = "—" if r.ratio is None or not math.isfinite(r.ratio) else f"{r.ratio:.2f}"
            target = r.target
            if r.met is not None:
                target = f"{target} {'met' if r.met else 'MISSED'}"
            lines.append(f"| {r.bench} | {r.metric} | {r.ours} | {r.baseline} | {ratio} | {target} | {r.method} |")
        return "\n".join(lines)


def rate(value: float, unit: str = "/s") -> str:
    """A throughput, rounded to three significant figures."""
    if value >= 100:
        return f"{value:,.0f}{unit}"
    return f"{value:.3g}{unit}"


def ms(seconds: float) -> str:
    """A duration in milliseconds (or microseconds below 0.1 ms)."""
    if seconds < 0.0001:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1000:.2f} ms"


def mib(nbytes: float) -> str:
    """A size in MiB."""
    return f"{nbytes / 1048576:.1f} MiB"


def percentile(samples: list[float], p: float) -> float:
    """The p-th percentile (0..100) by nearest rank; NaN for no samples."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def ratio(ours: float, baseline: float) -> float:
    """ours / baseline, NaN when the baseline is zero."""
    return ours / baseline if baseline else math.nan
