"""Device time for the CUDA adapter without the host's dispatch, and NVML's view of the GPU.

``SpinTimer`` (NVBench's blocking-kernel idea, bounded):

    stream: [spin kernel] [event spun] [event start] [launches ...] [event stop]

``start()`` enqueues a kernel that spins on the GPU's nanosecond timer for
``spin_ns``, then the ``spun`` and ``start`` events; the engine enqueues the
launches; ``stop()`` enqueues the stop event and, right then, asks whether the
``spun`` event has completed. If it has not, the GPU was still spinning when the
host had enqueued the whole sample, so the launches ran back to back behind the
start event and the events bracket device work alone. If it has, the host's
dispatch may sit between the events: ``elapsed_ms()`` returns None (the engine
takes the sample again) and the spin doubles, up to ``MAX_SPIN_NS``; past that
the sample is kept and counted in ``uncovered``. The spin is bounded so that a
profiler that serialises launches (Nsight Compute) never hangs on it.

What the events add: about a microsecond per sample that the kernels' own
durations do not hold (the GPU starting the first grid after the start event,
the stop event after the last). ``floor_ms`` says so, and the engine then
times kernels shorter than 0.2 ms as several launches back to back per sample
(``mmsuite.measure``), like a CUDA-graph replay. cupy.matmul's dispatch has
needed spins of up to 800 us on an H100 host; the spin grows until it covers
the enqueue of a whole sample.

Checked on an H100 SXM against Nsight Compute's ``gpu__time_duration.sum`` (the
kernels of a call, summed) and a CUDA-graph replay of 20 calls (cuBLAS captured
through libcublas itself: CuPy refuses cuBLAS calls during capture): cuBLAS and
rung 22 at 1024^3, 4096^3 and batch 100 x 1000^3 within 1% of ncu and 3% of the
graph. At 512^3 the two references disagree with each other, and the batched
figure lies between them: cuBLAS 14.6 us against 16.1 (ncu) and 12.6 (graph),
rung 22 15.3 against 16.3 (ncu) and 13.6 (graph, in an earlier check of the same
kernels). ncu adds about a microsecond
to each kernel (an empty kernel reads 1.95 us in ncu and replays at 1.01 us a
launch in a graph), and a graph starts a call's second kernel sooner than a
stream does.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from ..sources import read_source
from .base import Timer

SPIN_SOURCE = "cuda/timing_spin.cu"
FIRST_SPIN_NS = 50_000
MAX_SPIN_NS = 20_000_000

_spin_kernel: Any = None


def spin_kernel(cp: Any) -> Any:
    """The compiled spin kernel (once per process)."""
    global _spin_kernel
    if _spin_kernel is None:
        kernel = cp.RawKernel(read_source(SPIN_SOURCE), "mm_timing_spin")
        kernel.compile()  # now, not inside the first sample's enqueue
        _spin_kernel = kernel
    return _spin_kernel


class SpinTimer(Timer):
    """CUDA events behind a bounded spin kernel on one stream (module docstring)."""

    floor_ms = 0.001  # an event pair's own microsecond

    def __init__(self, cp: Any, stream: Any, spin_ns: int = FIRST_SPIN_NS) -> None:
        self._cp, self._stream = cp, stream
        self._spin = spin_kernel(cp)
        self.spin_ns = spin_ns
        self._spun, self._start, self._stop = (cp.cuda.Event() for _ in range(3))
        self._covered = False
        self._kept_uncovered = False
        self.retakes = 0  # samples taken again with a longer spin
        self.uncovered = 0  # samples kept although the spin ended before the enqueue did

    def start(self) -> None:
        with self._stream:
            self._spin((1,), (1,), (np.uint64(self.spin_ns),))
        self._spun.record(self._stream)
        self._start.record(self._stream)

    def stop(self) -> None:
        self._stop.record(self._stream)
        self._covered = not self._spun.done

    def elapsed_ms(self) -> float | None:
        self._stop.synchronize()
        ms = self._cp.cuda.get_elapsed_time(self._start, self._stop)
        self._kept_uncovered = False
        if self._covered:
            return ms
        if self.spin_ns < MAX_SPIN_NS:
            self.spin_ns = min(2 * self.spin_ns, MAX_SPIN_NS)
            self.retakes += 1
            return None
        self.uncovered += 1
        self._kept_uncovered = True
        return ms

    def disturbed(self) -> bool:
        return self._kept_uncovered

    def report(self) -> dict:
        return {"spin_us": self.spin_ns / 1e3, "retakes": self.retakes,
                "uncovered": self.uncovered}


class EventPair:
    """Device time of the copies enqueued between ``begin()`` and ``end()`` (transfers)."""

    def __init__(self, cp: Any, stream: Any) -> None:
        self._cp, self._stream = cp, stream
        self._a, self._b = cp.cuda.Event(), cp.cuda.Event()

    def begin(self) -> None:
        self._a.record(self._stream)

    def end(self) -> float:
        self._b.record(self._stream)
        self._b.synchronize()
        return self._cp.cuda.get_elapsed_time(self._a, self._b)


# ----------------------------------------------------------------------- NVML
_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clock",
}
#: The clock-event reasons that hold the SM clock below what the kernel would run at:
#: power and thermal limits and hardware slowdowns. The others (idle, application clocks
#: set, sync boost, display) describe a setting, not a measurement spoiled.
THROTTLING = ("sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")
#: NVML's violation counters (nvmlPerfPolicyType_t): nanoseconds spent held by each limit
#: since the driver loaded, so that a limit hit between two reads is still seen.
_POLICIES = {"power": 0, "thermal": 1}


@functools.cache
def _nvml_handle(pci_bus_id: str) -> Any:
    import pynvml

    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)


def gpu_state(pci_bus_id: str) -> dict:
    """SM clock (MHz), active clock-event reasons (``throttle_reasons``), the power and
    thermal violation counters (ns) and other processes computing on the GPU, or why NVML
    cannot say. Read at both ends of a sample window (``info["gpu"]``'s before and after):
    :func:`throttled` tells from the two whether the window was throttled."""
    try:
        import pynvml

        handle = _nvml_handle(pci_bus_id)
        query = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        mask = int(query(handle))
        state = {
            "sm_clock_mhz": int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            "throttle_reasons": [name for bit, name in _REASONS.items() if mask & bit],
            "temperature_c": int(pynvml.nvmlDeviceGetTemperature(
                handle, pynvml.NVML_TEMPERATURE_GPU)),
            # Other processes computing on this GPU share its SMs with the timed kernel.
            "other_processes": sum(p.pid != os.getpid() for p in
                                   pynvml.nvmlDeviceGetComputeRunningProcesses(handle)),
        }
    except Exception as exc:  # optional: no nvidia-ml-py, or no NVML on the host
        return {"nvml": f"{type(exc).__name__}: {exc}"}
    violations = {}
    for name, policy in _POLICIES.items():
        try:
            violations[name] = int(pynvml.nvmlDeviceGetViolationStatus(handle, policy)
                                   .violationTime)
        except Exception:  # not every GPU keeps every counter
            pass
    if violations:
        state["violation_ns"] = violations
    return state


def throttled(window: object) -> list[str] | None:
    """What throttled the GPU during one sample window (``{"before": state, "after":
    state}`` of :func:`gpu_state`): the throttling reasons active at either end, and
    ``power`` or ``thermal`` where that violation counter grew in between. Empty for a
    window that ran unthrottled; None where NVML could not say."""
    if not isinstance(window, dict):
        return None
    ends = [window.get(end) for end in ("before", "after")]
    read = [e for e in ends if isinstance(e, dict) and "throttle_reasons" in e]
    if not read:
        return None
    found = {str(r) for e in read for r in e.get("throttle_reasons") or ()
             if r in THROTTLING}
    if len(read) == 2:
        before, after = (e.get("violation_ns") or {} for e in read)
        found |= {f"{name} limit" for name in _POLICIES
                  if isinstance(before.get(name), int) and isinstance(after.get(name), int)
                  and after[name] > before[name]}
    return sorted(found)
