"""Energy per GEMM from a device's energy counter (``mmsuite run --energy``).

NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, millijoules
since the driver loaded) moves in steps, so one launch is far below what it
resolves: a window of at least ``WINDOW_S`` seconds of back-to-back launches is
read instead, and the device's idle power, measured once per process over a
quiet window as long, is taken off:

    joules per GEMM = (E_after - E_before - idle_W * window_s) / launches

A device without the counter (an older GPU, a CPU, no NVML) gives an ``Energy``
with only ``reason`` set; tables show ``-`` there.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

WINDOW_S = 1.0
COUNTER = "nvmlDeviceGetTotalEnergyConsumption"

EnergyReader = Callable[[], float]  # joules since some fixed point


@dataclass(frozen=True)
class Energy:
    """Energy of one kernel on one problem, or why there is none (``reason``)."""

    joules: float | None = None  # per GEMM, idle power taken off
    gflop_per_joule: float | None = None
    window_s: float | None = None
    launches: int | None = None
    busy_w: float | None = None  # mean power over the window
    idle_w: float | None = None
    counter: str = COUNTER
    reason: str = ""

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v not in (None, "")}


def nvml_reader(pci_bus_id: str) -> EnergyReader | str:
    """A reader of the GPU's energy counter in joules, or why there is none."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    except Exception as exc:  # no nvidia-ml-py, no NVML, or a GPU without the counter
        return f"no energy counter ({COUNTER}): {type(exc).__name__}: {exc}"
    return lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3


_IDLE_W: dict[str, float] = {}


def idle_watts(key: str, read: EnergyReader, seconds: float = WINDOW_S,
               sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.perf_counter) -> float:
    """The device's power with nothing running, measured once per process and device."""
    if key not in _IDLE_W:
        e0, t0 = read(), clock()
        sleep(seconds)
        e1, t1 = read(), clock()
        _IDLE_W[key] = (e1 - e0) / (t1 - t0)
    return _IDLE_W[key]


def measure(launch: Callable[[], None], synchronize: Callable[[], None], read: EnergyReader,
            launch_s: float, flops: int, idle_w: float, seconds: float = WINDOW_S,
            clock: Callable[[], float] = time.perf_counter) -> Energy:
    """Launch back to back for at least ``seconds`` (``launch_s``: one launch's time) and
    read the counter around the window."""
    launches = max(1, math.ceil(seconds / max(launch_s, 1e-7)))
    synchronize()
    e0, t0 = read(), clock()
    for _ in range(launches):
        launch()
    synchronize()
    e1, t1 = read(), clock()
    window = t1 - t0
    joules = (e1 - e0 - idle_w * window) / launches
    if joules <= 0:
        return Energy(window_s=window, launches=launches, busy_w=(e1 - e0) / window,
                      idle_w=idle_w, reason="the window's energy did not exceed idle power's")
    return Energy(joules, flops / joules / 1e9, window, launches, (e1 - e0) / window, idle_w)
