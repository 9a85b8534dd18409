"""Energy per GEMM: a window of launches on the counter, idle power taken off, and a reason
where a device has no counter."""

from __future__ import annotations

import json

import pytest

from mmsuite import energy
from mmsuite.cli import main


class FakeDevice:
    """A counter that gains idle_w every second plus joules_per_launch per launch."""

    def __init__(self, idle_w: float, joules_per_launch: float, launch_s: float) -> None:
        self.now = 0.0
        self.joules = 0.0
        self.idle_w, self.per_launch, self.launch_s = idle_w, joules_per_launch, launch_s
        self.launches = 0

    def clock(self) -> float:
        return self.now

    def read(self) -> float:
        return self.joules

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.joules += self.idle_w * seconds

    def launch(self) -> None:
        self.launches += 1
        self.sleep(self.launch_s)
        self.joules += self.per_launch


def test_window_lasts_a_second_and_idle_power_is_taken_off() -> None:
    device = FakeDevice(idle_w=70.0, joules_per_launch=0.5, launch_s=0.002)
    idle = energy.idle_watts("fake", device.read, sleep=device.sleep, clock=device.clock)
    assert idle == pytest.approx(70.0)
    spent = energy.measure(device.launch, lambda: None, device.read, 0.002, flops=2 * 10**12,
                           idle_w=idle, clock=device.clock)
    assert spent.launches == device.launches == 500 and spent.window_s >= energy.WINDOW_S
    assert spent.joules == pytest.approx(0.5)
    assert spent.gflop_per_joule == pytest.approx(2000 / 0.5)
    assert spent.busy_w == pytest.approx(70.0 + 0.5 / 0.002)
    assert spent.idle_w == 70.0 and spent.counter == energy.COUNTER


def test_a_window_below_idle_power_gives_a_reason_not_a_figure() -> None:
    device = FakeDevice(idle_w=70.0, joules_per_launch=0.0, launch_s=0.01)
    spent = energy.measure(device.launch, lambda: None, device.read, 0.01, flops=1,
                           idle_w=80.0, clock=device.clock)
    assert spent.joules is None and "idle" in spent.reason


def test_cpu_rows_say_why_they_have_no_energy(tmp_path, capsys) -> None:
    path = tmp_path / "energy.json"
    assert main(["run", "--kernel", "cpu.blas", "--shape", "16x16x16", "--repeats", "2",
                 "--energy", "--json", str(path)]) == 0
    document = json.loads(path.read_text())
    (row,) = document["results"]
    assert "no energy counter" in row["energy"]["reason"] and "joules" not in row["energy"]
    assert document["settings"]["energy"] is True
    assert "GFLOP/J" in capsys.readouterr().out
