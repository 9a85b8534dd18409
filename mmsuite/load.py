"""What else the machine was doing while mmsuite measured.

The 1-minute load average says little on a small machine: one busy neighbour plus
the run is exactly cores + 1, and it lags by a minute. This module reads, for a window
of time, how much CPU time every process but this one used (``/proc/stat`` minus
``/proc/self/stat``), as a share of the machine's capacity. A share recorded with each
result lets ``compare`` tell two runs taken under different load apart, and ``run``
warn when its own figures were distorted.

``continuous`` loads this file by path into the worker of another revision's build, so
at module level it imports nothing of mmsuite (tests/test_load.py checks that).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

#: Others' share of the machine's CPU above which CPU timings are distorted: on two
#: cores, one busy neighbour is 0.5, a quiet machine reads 0.00-0.03.
DISTORTING_SHARE = 0.10
#: Two windows whose others' shares differ by more than this were not taken alike.
CHANGED_SHARE = 0.10


def _machine_ticks() -> tuple[int, int] | None:
    """Busy and total CPU ticks of the whole machine since boot."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    values = [int(v) for v in fields[:8]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def _own_ticks() -> int | None:
    """CPU ticks of this process (all threads) and its waited-for children."""
    try:
        text = Path("/proc/self/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the name may hold spaces
    return sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime


@dataclass
class LoadWindow:
    """Others' CPU use between ``start`` and ``finish``; ``None`` fields where /proc is
    missing (not Linux)."""

    machine: tuple[int, int] | None = None
    own: int | None = None
    started: float = 0.0

    @classmethod
    def start(cls) -> LoadWindow:
        return cls(_machine_ticks(), _own_ticks(), time.monotonic())

    def finish(self) -> dict:
        """``others_share``: the other processes' CPU time over the machine's capacity in
        the window (0 = idle neighbours, 1 = every core busy with others)."""
        end_machine, end_own = _machine_ticks(), _own_ticks()
        record: dict = {"seconds": round(time.monotonic() - self.started, 3),
                        "cores": os.cpu_count() or 1, "others_share": None}
        if self.machine is None or self.own is None or end_machine is None or end_own is None:
            return record
        busy = end_machine[0] - self.machine[0]
        total = end_machine[1] - self.machine[1]
        if total <= 0:
            return record
        others = max(0, busy - (end_own - self.own))
        record["others_share"] = round(others / total, 3)
        return record


def others_share(record: dict) -> float | None:
    """The recorded share of a result record, if it has one."""
    load = record.get("host_load")
    value = load.get("others_share") if isinstance(load, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def distortion_warning(records: list[dict]) -> str | None:
    """One line when other processes took enough of the CPU during host rows to distort
    them; None on a quiet run."""
    from .backend_table import runs_on_host  # here: the module itself is loaded by path

    worst = max(((share, r) for r in records if (share := others_share(r)) is not None
                 and runs_on_host(r)), key=lambda pair: pair[0], default=None)
    if worst is None or worst[0] <= DISTORTING_SHARE:
        return None
    share, record = worst
    return (f"other processes used up to {share:.0%} of this machine's CPU while it measured "
            f"({record.get('kernel')}): CPU times are distorted; measure on a quiet machine, "
            f"or compare revisions under the same load with `mmsuite continuous`")


def device_neighbours(record: dict) -> int | None:
    """Other processes computing on a GPU row's device when its samples began or ended
    (NVML's running processes, ``info.gpu``), the more of the two; None where not read."""
    gpu = (record.get("info") or {}).get("gpu")
    if not isinstance(gpu, dict):
        return None
    read = [state.get("other_processes") for state in (gpu.get("before"), gpu.get("after"))
            if isinstance(state, dict)]
    counts = [c for c in read if isinstance(c, int)]
    return max(counts) if counts else None


def contended(record: dict) -> bool:
    """Whether others took enough of the machine during a row's samples that its time is
    not the kernel's: above ``DISTORTING_SHARE`` of the CPU for a row timed on the host, any
    other process on the GPU for a row timed on one."""
    from .backend_table import runs_on_host  # here: the module itself is loaded by path

    if runs_on_host(record):
        share = others_share(record)
        return share is not None and share > DISTORTING_SHARE
    return bool(device_neighbours(record))


def contention_footnote(records: list[dict]) -> str | None:
    """The line under a table whose rows ``contended`` marks (``*``), None where none is."""
    marked = [r for r in records if contended(r)]
    if not marked:
        return None
    from .backend_table import runs_on_host  # here: the module itself is loaded by path

    shares = [s for r in marked if runs_on_host(r) and (s := others_share(r)) is not None]
    on_gpu = sum(1 for r in marked if not runs_on_host(r))
    parts = []
    if shares:
        low, high = min(shares), max(shares)
        span = f"{low:.0%}" if round(100 * low) == round(100 * high) else f"{low:.0%}-{high:.0%}"
        parts.append(f"other processes took {span} of the CPU (above {DISTORTING_SHARE:.0%})")
    if on_gpu:
        parts.append("other processes computed on the GPU")
    return (f"* {len(marked)} of {len(records)} rows were measured while "
            + " or ".join(parts) + ": their times are not the kernels' alone, and their "
            "ratios (marked ?) are not facts; measure on a quiet machine, or compare "
            "revisions under the same load with `mmsuite continuous`")


def free_cores(cores: int, seconds: float = 0.25) -> tuple[float, float] | None:
    """About how many of ``cores`` other processes leave free now, and their share of the
    CPU, from a window of ``seconds``; None where /proc cannot say."""
    window = LoadWindow.start()
    time.sleep(seconds)
    share = window.finish()["others_share"]
    return None if share is None else (cores * (1.0 - share), share)


def too_few_free(threads: int, free: float) -> bool:
    """Whether others leave fewer cores ``free`` than ``threads`` need: each launch then
    waits on its slowest thread's time slices."""
    return free < threads * (1.0 - DISTORTING_SHARE)


def busy_cores_warning(threads: int, cores: int, free: float, share: float) -> str | None:
    """One line when fewer cores are free than the ``threads`` a run asks for
    (``too_few_free``); None when enough are free."""
    if not too_few_free(threads, free):
        return None
    return (f"other processes are using {share:.0%} of this machine's CPU: about {free:.1f} "
            f"of its {cores} cores are free for {threads} threads, so threaded rows will "
            "be slowed and marked *; to compare revisions on a busy machine, use "
            "`mmsuite continuous` (both measured in turns under the same load)")
