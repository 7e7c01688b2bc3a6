"""The named checks of a drill (scenarios/theft.py, spaces.py, space_fed.py, redaction.py): each check's outcome, the
rule that a check failing once stays failed, the part of a drill's world that keeps them, the table a drill prints,
and its report."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


@dataclass
class Check:
    """One check's outcome."""

    ok: bool
    detail: str


def record(results: dict[str, Check], names: Mapping[str, str], name: str, ok: bool, detail: str) -> None:
    """Record one run of check `name` (one of `names`) in `results`: the first failure wins; the details of runs
    that held are joined."""
    assert name in names, name
    prior = results.get(name)
    if prior is not None and not prior.ok:
        return
    if prior is not None and ok:
        detail = f"{prior.detail}; {detail}"
    results[name] = Check(ok, detail)


@dataclass
class Drill:
    """What every drill's world holds: the outcomes of its named checks (`NAMES`, set by the subclass) and the clock
    its log lines count from. A drill's `World` subclasses it; these fields are keyword-only, so the subclass's own
    fields come first in its constructor."""

    NAMES: ClassVar[Mapping[str, str]] = {}
    results: dict[str, Check] = field(default_factory=dict, kw_only=True)
    t0: float = field(default_factory=time.monotonic, kw_only=True)

    def log(self, what: str) -> None:
        """Print `what` with the seconds since the drill started."""
        print(f"[{time.monotonic() - self.t0:6.1f}s] {what}", flush=True)

    def check(self, name: str, ok: bool, detail: str) -> None:
        """Record a run of check `name` (the first failure of a check that runs several times wins) and log it."""
        record(self.results, self.NAMES, name, ok, detail)
        self.log(f"check {name}: {'held' if ok else 'FAILED'}: {detail}")

    def outcomes(self) -> dict[str, Check]:
        """Every named check's outcome in `NAMES`' order; a check the drill never reached failed."""
        return {name: self.results.get(name, Check(False, "not reached")) for name in self.NAMES}


def table(results: dict[str, Check]) -> str:
    """The checks as a Markdown table, in `results`' order."""
    lines = ["| check | result | detail |", "|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {'held' if r.ok else 'FAILED'} | {r.detail} |")
    return "\n".join(lines)


@dataclass
class Report:
    """Each check's outcome (in the drill's order), the table as printed, and the wall time."""

    results: dict[str, Check]
    wall_s: float
    text: str

    @property
    def failed(self) -> list[str]:
        return [name for name, r in self.results.items() if not r.ok]


def verdict(report: Report, drill: str) -> int:
    """Print the drill's table and its verdict; the exit status: 1 when a check failed, else 0."""
    print(report.text)
    if report.failed:
        print(f"{drill}: FAILED ({', '.join(report.failed)})", file=sys.stderr)
        return 1
    print(f"{drill}: OK")
    return 0


def drill_main(doc: str | None, name: str, run: Callable[[Path], Coroutine[Any, Any, Report]]) -> int:
    """A drill's command line: `--keep DIR` to keep its data folders and logs; runs `run` in a temporary folder
    and returns `verdict`'s exit status."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", type=Path, help="keep the data folders and logs in this (new) folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix=f"bbs-{name.split()[0]}-") as tmp:
        try:
            report = asyncio.run(run(Path(tmp)))
        finally:
            if args.keep:
                shutil.copytree(tmp, args.keep)
    return verdict(report, name)
