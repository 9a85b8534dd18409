"""How ``mmsuite continuous`` spends its time and the machine's cores on a shared box.

Time. The selection's time is fixed up front: ``max_seconds`` of rounds for every row,
pooled (:class:`TimePool`). Rows whose code is identical on both sides are settled first, as
``same (identical code)`` after a short check (the rounds of their first look, which
show the ratio), and what they leave of the pool goes to the rows whose code changed:
each of those gets an equal share of what is left when it starts, so that a row decided
early leaves its time to the rows after it. Before, the changed row that came first
had only its own time, and the identical rows after it left theirs unspent.

Cores. Where other processes leave fewer cores free than the row's threads (the load
meter, :func:`mmsuite.load.free_cores`, read when the row starts), each side of a row of
the host's C ladder runs as many threads as there are free cores, at least one. Two
threads on two cores, one of them shared with a busy neighbour, made every launch wait
on the slower thread's time slices: on a 2-core machine with one core spun and other
jobs running, a planted slowdown of ``cpu.omp_tiled`` read 1.27x where one thread read
1.07-1.10x, identical code 0.88-0.98x with twice to four times the spread, and the gate
caught a 12.5% slowdown in 1 of 3 trials on two threads, 6 of 6 on one. The sides then
take turns (``turns``, the default), or run both at once, unpinned, as duet
benchmarking does (Bulej et al., ICPE 2020), in one window of time whose overrunning
samples are left out (``at-once``: as good per second of rounds, but each round longer);
docs/continuous.md has the measurements. What was done is recorded with every row
(:class:`RowPlan`) and shown under the table.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from .load import too_few_free

#: What ``continuous`` does where fewer cores are free than a C row's threads
#: (``--on-busy-machine``): each side on the free cores' threads, in turns (the default)
#: or both sides at once; or as asked, in turns, whatever the load.
BUSY_MODES = ("turns", "at-once", "as-asked")
#: A core counts as free for a thread when others leave at least this much of it.
FREE_CORE = 0.75
#: Samples a window of both sides at once is made long enough for: the one that runs past
#: its end is left out, so it must be a small part of the turn.
WINDOW_SAMPLES = 4
#: Seconds from the driver's reading of the clock to a window's start: both workers must
#: have the message by then.
WINDOW_DELAY = 0.01


@dataclass
class TimePool:
    """Seconds of rounds for a whole selection, fixed when it starts."""

    total: float
    spent: float = 0.0

    @classmethod
    def for_rows(cls, rows: int, max_seconds: float) -> TimePool:
        """Every row's own ``max_seconds``, together."""
        return cls(rows * max_seconds)

    def spend(self, seconds: float) -> None:
        self.spent += seconds

    @property
    def left(self) -> float:
        return max(0.0, self.total - self.spent)

    def share(self, rows_left: int) -> float:
        """The budget of the next row: an equal share of what is left among the
        ``rows_left`` rows still to measure, itself included."""
        return self.left / max(1, rows_left)


@dataclass(frozen=True)
class RowPlan:
    """How a row was measured: its threads, and whether both sides ran at once."""

    threads: int | None  # each side's OpenMP threads (None: the backend's own, all CPUs)
    asked: int | None  # --threads
    cpus: int  # CPUs this process may run on
    free: float | None = None  # cores the others left free when the row began
    others_share: float | None = None  # their share of the CPU then
    together: bool = False  # both sides at once, unpinned, rather than in turns

    @property
    def fitted(self) -> bool:
        """Whether the threads were lowered to the free cores."""
        return self.threads is not None and self.threads != (self.asked or self.cpus)

    def note(self) -> str:
        """``threads 2 → 1 (0.9 of 2 cores free), both sides at once``, or "" where the row
        was measured as asked, in turns."""
        parts = []
        if self.fitted:
            free = "" if self.free is None else f" ({self.free:.1f} of {self.cpus} cores free)"
            parts.append(f"threads {self.asked or self.cpus} → {self.threads}{free}")
        if self.together:
            parts.append("both sides at once")
        return ", ".join(parts)

    def record(self) -> dict:
        return {
            "threads": self.threads,
            "threads_asked": self.asked,
            "cpus": self.cpus,
            "free_cores": None if self.free is None else round(self.free, 2),
            "others_share": self.others_share,
            "mode": "at once" if self.together else "turns",
        }


def window(round_seconds: float, sample_seconds: list[float]) -> tuple[float, float]:
    """When the next window of both sides at once starts (``time.monotonic()``) and how
    long it lasts: ``round_seconds``, or ``WINDOW_SAMPLES`` of the slower side's samples
    (``sample_seconds``: each side's latest, or its checked launch) where that is longer."""
    typical = max(sample_seconds, default=0.0)
    return time.monotonic() + WINDOW_DELAY, max(round_seconds, WINDOW_SAMPLES * typical)


def wanted_threads(threaded: bool, asked: int | None, cpus: int) -> int:
    """The threads a host row runs on as asked: ``--threads`` or every CPU for a threaded
    rung, one for a sequential one."""
    return (asked or cpus) if threaded else 1


def choose(
    threaded: bool,
    asked: int | None,
    cpus: int,
    reading: tuple[float, float] | None,
    mode: str = BUSY_MODES[0],
) -> RowPlan:
    """How to measure a row of the host's C ladder, given the load meter's ``reading``
    (free cores, others' share of the CPU; None where it cannot read): as asked, in turns,
    where enough cores are free (or ``mode`` is "as-asked", or nothing was read); else each
    side on as many threads as there are free cores, at least one, and with "at-once" both
    sides at once."""
    free, share = reading if reading is not None else (None, None)
    wanted = wanted_threads(threaded, asked, cpus)
    busy = free is not None and too_few_free(wanted, free)
    if mode == "as-asked" or not busy or free is None:
        return RowPlan(asked, asked, cpus, free, share)
    threads = min(wanted, max(1, math.floor(free + 1.0 - FREE_CORE)))
    together = mode == "at-once" and cpus >= 2
    return RowPlan(threads if threaded else asked, asked, cpus, free, share, together)
