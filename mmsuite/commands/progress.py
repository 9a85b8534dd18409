"""The progress of ``mmsuite run`` on stderr.

On a terminal: rich's bar, naming the kernel running now, counting the jobs that
run (unavailable and resumed rows are not work) and estimating the time left. In
a log or a pipe: one line per finished row, as it finishes.
"""

from __future__ import annotations

import sys
import threading

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ..catalogue import Kernel
from ..problem import Problem
from ..sweep import SweepRow


def _label(kernel: Kernel, problem: Problem) -> str:
    return f"{kernel.id} @ {problem.shape_label}"


class RunProgress:
    """``plan``, ``start`` and ``finish`` are the sweep's ``on_plan``, ``on_start`` and
    ``on_row``; they may be called from the device threads."""

    def __init__(self, rows: int, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, markup=False)
        self.rows, self.finished_rows = rows, 0
        self._running: dict[tuple[str, Problem], str] = {}
        self._lock = threading.Lock()
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                             console=self.console, transient=True) \
            if self.console.is_terminal else None
        self._task: TaskID | None = None  # the bar's one task, once the bar has started

    def __enter__(self) -> RunProgress:
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task("starting", total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def plan(self, jobs: int) -> None:
        """The number of jobs that will run: the bar's length."""
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, total=jobs)

    def start(self, kernel: Kernel, problem: Problem) -> None:
        with self._lock:
            self._running[(kernel.id, problem)] = _label(kernel, problem)
            self._describe()

    def finish(self, row: SweepRow) -> None:
        with self._lock:
            self.finished_rows += 1
            ran = self._running.pop((row.kernel.id, row.problem), None) is not None
            if self._bar is not None:
                if ran and self._task is not None:  # an unavailable or resumed row: no work
                    self._bar.update(self._task, advance=1)
                self._describe()
                return
        # Logs get one line per row, as it finishes.
        median = (row.to_record().get("kernel_ms") or {}).get("median")
        timing = f" {median:.3f} ms" if isinstance(median, float) else ""
        print(f"[{self.finished_rows}/{self.rows}] {_label(row.kernel, row.problem)}: "
              f"{row.status}{timing}", file=sys.stderr, flush=True)

    def _describe(self) -> None:
        if self._bar is None or self._task is None:
            return
        running = list(self._running.values())
        text = f"running {running[-1]}" if running else "starting"
        if len(running) > 1:
            text += f" (+{len(running) - 1} more)"
        self._bar.update(self._task, description=text)
