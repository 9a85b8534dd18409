"""Others' share of the CPU in a window, and the warning above a distorted run's table."""

from __future__ import annotations

import runpy
import subprocess
import sys
import time

import pytest

from mmsuite import identity, load

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_others_share_is_the_machine_busy_time_less_this_process(monkeypatch) -> None:
    machine = iter([(1000, 4000), (1100, 4200)])  # busy, total ticks since boot
    own = iter([500, 560])  # this process's ticks
    monkeypatch.setattr(load, "_machine_ticks", lambda: next(machine))
    monkeypatch.setattr(load, "_own_ticks", lambda: next(own))
    window = load.LoadWindow.start()
    # 100 busy ticks of 200, 60 of them this process's own: others used 40 of 200.
    assert window.finish()["others_share"] == pytest.approx(0.2)


def test_without_proc_the_share_is_unknown(monkeypatch) -> None:
    monkeypatch.setattr(load, "_machine_ticks", lambda: None)
    assert load.LoadWindow.start().finish()["others_share"] is None


def test_a_busy_neighbour_shows_as_others_share() -> None:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        window = load.LoadWindow.start()
        time.sleep(1.0)
        result = window.finish()
    finally:
        spinner.kill()
        spinner.wait()
    # One core of the machine's spun by another process (a share of 1/cores), give or take
    # whatever else runs here.
    assert result["others_share"] >= 0.8 / result["cores"]


def test_distortion_warning_names_the_worst_host_row() -> None:
    rows = [{"kernel": "cpu.a", "backend": "cpu", "host_load": {"others_share": 0.02}},
            {"kernel": "cpu.b", "backend": "cpu", "host_load": {"others_share": 0.48}},
            {"kernel": "cuda.c", "backend": "cuda", "host_load": {"others_share": 0.9}}]
    warning = load.distortion_warning(rows)
    assert warning is not None and "48%" in warning and "cpu.b" in warning
    assert load.distortion_warning(rows[:1]) is None
    assert load.distortion_warning([{"kernel": "old", "backend": "cpu"}]) is None


@pytest.mark.parametrize("module", [load, identity])
def test_the_continuous_worker_can_load_it_by_path(module) -> None:
    """The worker of another revision's build runs the driver's copy of these files by
    path, outside any package: a relative import at module level would break it."""
    namespace = runpy.run_path(module.__file__)
    assert "LoadWindow" in namespace or "code_identity" in namespace


# ------------------------------------------------------------------ contention
def _row(kernel: str = "cpu.omp_tiled", backend: str = "cpu", share: float | None = None,
         other_processes: int | None = None) -> dict:
    row: dict = {"kernel": kernel, "backend": backend, "status": "ok", "info": {}}
    if share is not None:
        row["host_load"] = {"others_share": share, "cores": 2, "seconds": 1.0}
    if other_processes is not None:
        row["info"]["gpu"] = {"before": {"other_processes": 0},
                              "after": {"other_processes": other_processes}}
    return row


def test_a_host_row_is_contended_above_the_distorting_share() -> None:
    assert load.contended(_row(share=load.DISTORTING_SHARE + 0.01))
    assert not load.contended(_row(share=load.DISTORTING_SHARE))
    assert not load.contended(_row())  # an older file without the share: no claim


def test_a_gpu_row_is_contended_when_another_process_computed_on_its_device() -> None:
    busy = _row("cuda.01_naive", "cuda", share=0.9, other_processes=1)
    assert load.contended(busy) and load.device_neighbours(busy) == 1
    # The host's load does not reach a kernel timed on the GPU by its own clock.
    assert not load.contended(_row("cuda.01_naive", "cuda", share=0.9, other_processes=0))


def test_contention_footnote_counts_the_marked_rows_and_gives_the_shares() -> None:
    rows = [_row(share=0.46), _row("cpu.omp_packed", share=0.76), _row("cpu.blas", share=0.02)]
    note = load.contention_footnote(rows)
    assert note is not None and note.startswith("* 2 of 3 rows were measured while other "
                                                "processes took 46%-76% of the CPU")
    assert "`mmsuite continuous`" in note
    assert load.contention_footnote([_row(share=0.01)]) is None


def test_contention_footnote_gives_gpu_rows_their_own_reason() -> None:
    """A GPU row is marked for the other processes on its device: the host's share of the
    CPU beside it (here 6%) is no reason and is not quoted as one."""
    rows = [_row("cuda.cublas", "cuda", share=0.06, other_processes=1),
            _row("cuda.22_adaptive", "cuda", share=0.06, other_processes=1)]
    note = load.contention_footnote(rows)
    assert note is not None and note.startswith(
        "* 2 of 2 rows were measured while other processes computed on the GPU:")
    both = load.contention_footnote(rows + [_row(share=0.5)])
    assert both is not None and "took 50% of the CPU (above 10%) or other processes " \
        "computed on the GPU" in both


def test_busy_cores_warning_when_fewer_cores_are_free_than_threads() -> None:
    line = load.busy_cores_warning(threads=2, cores=2, free=1.0, share=0.5)
    assert line is not None and "about 1.0 of its 2 cores are free for 2 threads" in line
    assert "`mmsuite continuous`" in line
    assert load.busy_cores_warning(threads=2, cores=2, free=1.94, share=0.03) is None
    assert load.busy_cores_warning(threads=1, cores=2, free=1.0, share=0.5) is None
