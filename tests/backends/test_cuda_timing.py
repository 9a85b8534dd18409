"""NVML's view of a GPU sample window, with a fake NVML: the clock-event reasons and the
violation counters read, and what counts as throttled."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from mmsuite.backends import cuda_timing
from mmsuite.backends.cuda_timing import gpu_state, throttled


class FakeNvml:
    """The calls gpu_state makes, answering with settable figures."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, mask: int, violations: dict[int, int] | None = None) -> None:
        self.mask, self.violations = mask, violations or {}

    def nvmlInit(self) -> None: ...

    def nvmlDeviceGetHandleByPciBusId(self, bus: str) -> str:
        return bus

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        return self.mask

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        return 1755

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        return 71

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list:
        return [SimpleNamespace(pid=1)]

    def nvmlDeviceGetViolationStatus(self, handle: str, policy: int) -> SimpleNamespace:
        if policy not in self.violations:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return SimpleNamespace(violationTime=self.violations[policy], referenceTime=0)


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch):
    def install(mask: int, violations: dict[int, int] | None = None) -> FakeNvml:
        fake = FakeNvml(mask, violations)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        cuda_timing._nvml_handle.cache_clear()
        return fake

    yield install
    cuda_timing._nvml_handle.cache_clear()


def test_the_state_names_the_reasons_the_clock_and_the_violation_counters(nvml) -> None:
    nvml(0x4 | 0x1, {0: 5_000, 1: 0})  # power cap and idle; both counters kept
    state = gpu_state("0000:01:00.0")
    assert state["throttle_reasons"] == ["gpu_idle", "sw_power_cap"]
    assert state["sm_clock_mhz"] == 1755 and state["temperature_c"] == 71
    assert state["violation_ns"] == {"power": 5_000, "thermal": 0}
    assert state["other_processes"] == 1


def test_a_gpu_without_violation_counters_still_gives_its_reasons(nvml) -> None:
    nvml(0x20)
    state = gpu_state("0000:01:00.0")
    assert state["throttle_reasons"] == ["sw_thermal"] and "violation_ns" not in state


def test_without_nvml_the_state_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    cuda_timing._nvml_handle.cache_clear()
    assert gpu_state("0000:01:00.0")["nvml"].startswith("ModuleNotFoundError: import of pynvml")
    assert throttled({"before": {"nvml": "ImportError"}, "after": {"nvml": "x"}}) is None


def test_a_window_is_throttled_by_the_reasons_at_either_end(nvml) -> None:
    nvml(0)
    quiet = gpu_state("bus")
    nvml(0x4)
    capped = gpu_state("bus")
    assert throttled({"before": quiet, "after": quiet}) == []
    assert throttled({"before": quiet, "after": capped}) == ["sw_power_cap"]
    assert throttled({"before": capped}) == ["sw_power_cap"]  # one end read


def test_settings_are_not_throttling(nvml) -> None:
    nvml(0x1 | 0x2 | 0x10 | 0x100)  # idle, application clocks, sync boost, display clock
    state = gpu_state("bus")
    assert throttled({"before": state, "after": state}) == []


def test_a_limit_hit_between_the_two_reads_shows_in_its_counter(nvml) -> None:
    nvml(0, {0: 1_000, 1: 7})
    before = gpu_state("bus")
    nvml(0, {0: 9_000, 1: 7})  # held by the power limit in between, thermal untouched
    after = gpu_state("bus")
    assert throttled({"before": before, "after": after}) == ["power limit"]
