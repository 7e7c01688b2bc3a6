"""Progress of the long commands (`bbs rebuild`, `bbs restore`, `bbs peers --watch`), written to stderr.

Work reports through a `Report` callable, `report(step, done, total)`, and knows nothing of how it is shown.
`Reporter` shows it: rich progress bars on a terminal, plain lines otherwise (a log, a pipe, CI), at most one a
tenth of the way per step, so a redirected stderr stays short. stdout keeps the command's result alone.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import TaskID

Report = Callable[[str, int, "int | None"], None]  # (step, done so far, total or None when unknown)
PLAIN_STEPS = 10  # plain lines per step: one each tenth of the way


def silent(step: str, done: int, total: int | None) -> None:
    """A Report that shows nothing (the default of the functions that take one)."""


class Reporter:
    """A Report shown on `stream` (stderr by default), as bars on a terminal or plain lines. Use with `with`."""

    def __init__(self, stream: TextIO | None = None, *, bars: bool | None = None) -> None:
        # rich is imported here, by the commands that show progress: the node's modules that take a Report
        # (node/store/projections.py) are loaded by `bbs serve` too, which never shows any.
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.stream = stream if stream is not None else sys.stderr
        console = Console(file=self.stream)
        self.bars = console.is_terminal if bars is None else bars
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}
        self._shown: dict[str, int] = {}  # step -> the last tenth printed as a plain line

    def __enter__(self) -> Reporter:
        if self.bars:
            self._progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.bars:
            self._progress.stop()

    def __call__(self, step: str, done: int, total: int | None) -> None:
        if self.bars:
            task = self._tasks.get(step)
            if task is None:
                task = self._tasks[step] = self._progress.add_task(step, total=total)
            self._progress.update(task, completed=done, total=total)
            return
        self._plain(step, done, total)

    def _plain(self, step: str, done: int, total: int | None) -> None:
        if total is None or total <= 0:
            if step not in self._shown:
                self._shown[step] = 0
                print(f"{step}: {done}", file=self.stream, flush=True)
            return
        tenth = min(done * PLAIN_STEPS // total, PLAIN_STEPS)
        if self._shown.get(step) == tenth:
            return
        self._shown[step] = tenth
        print(f"{step}: {done}/{total} ({done * 100 // total}%)", file=self.stream, flush=True)
