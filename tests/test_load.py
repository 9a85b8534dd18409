"""Others' share of the CPU in a window, and the warning above a distorted run's table."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mmsuite import load

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_own_work_does_not_count_as_others() -> None:
    window = load.LoadWindow.start()
    end = time.monotonic() + 0.5
    while time.monotonic() < end:  # this process busy: none of it is another's
        pass
    share = window.finish()["others_share"]
    assert share is not None and share < 0.5


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
