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
