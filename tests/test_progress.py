"""`mmsuite run`'s progress: the bar names the kernel running now, counts only the jobs that
run and estimates the time left; logs get one line per finished row."""

from __future__ import annotations

import io

from rich.console import Console

from mmsuite import Problem, catalogue
from mmsuite.commands.progress import RunProgress
from mmsuite.sweep import SweepRow

PROBLEM = Problem(8, 8, 8)


def _row(kernel_id: str, status: str = "ok") -> SweepRow:
    return SweepRow(catalogue.get(kernel_id), PROBLEM, status)


def test_the_bar_names_the_running_kernel_and_counts_only_runnable_jobs() -> None:
    terminal = Console(file=io.StringIO(), force_terminal=True, width=100, markup=False)
    with RunProgress(4, terminal) as progress:
        progress.finish(_row("cuda.01_naive", "unavailable"))  # before the plan: no work
        progress.plan(2)
        task = progress._bar.tasks[0]
        assert (task.total, task.completed) == (2, 0)
        progress.start(catalogue.get("cpu.blas"), PROBLEM)
        assert task.description == "running cpu.blas @ 8x8x8"
        progress._bar.refresh()
        shown = terminal.file.getvalue()
        assert "running cpu.blas @ 8x8x8" in shown and "0/2" in shown and "eta" in shown
        progress.finish(_row("cpu.blas"))
        progress.start(catalogue.get("cpu.seq_naive"), PROBLEM)
        progress.start(catalogue.get("cpu.seq_ikj"), PROBLEM)  # two devices at once
        assert task.description == "running cpu.seq_ikj @ 8x8x8 (+1 more)"
        assert task.completed == 1


def test_a_log_gets_one_line_per_finished_row(capsys) -> None:
    pipe = Console(file=io.StringIO(), force_terminal=False, markup=False)
    with RunProgress(2, pipe) as progress:
        progress.plan(1)
        progress.finish(_row("cuda.01_naive", "unavailable"))
        progress.start(catalogue.get("cpu.blas"), PROBLEM)
        progress.finish(_row("cpu.blas"))
    assert capsys.readouterr().err.splitlines() == [
        "[1/2] cuda.01_naive @ 8x8x8: unavailable", "[2/2] cpu.blas @ 8x8x8: ok"]
    assert pipe.file.getvalue() == ""
