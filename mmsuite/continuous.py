"""``mmsuite continuous BASE HEAD``: did HEAD make a kernel slower than BASE, measured
side by side?

Two runs taken minutes apart see different neighbours, and no statistic on two sample
sets can tell that from a change of the code. So both revisions are measured in the
same window: each is built once (:mod:`mmsuite.builds`), each gets a worker process
(:mod:`mmsuite.continuous_worker`) that prepares and verifies the kernel, and then the
two take turns: in every round each side takes ``round_seconds`` of samples, in an
order drawn at random per round, so that drift and a neighbour's bursts hit both sides
alike. A round's time is the median of its samples; the verdict comes from the
per-round ratios HEAD / BASE (:func:`mmsuite.stats.paired_ratio`: a Hodges-Lehmann
estimate and the exact signed-rank interval; each of a row's at most ten looks at it
uses a tenth of the error ``1 - confidence``, so that stopping at the first decision
keeps the verdict's error within it):

- ``slower`` / ``faster``: the whole interval lies beyond ``1 + threshold`` (below
  ``1 / (1 + threshold)``);
- ``same``: the whole interval lies within them; ``same (identical code)``: both sides
  ran byte-identical code (:mod:`mmsuite.identity`), whatever the times say;
- ``unsure``: the interval straddles a bound after ``max_seconds`` of rounds, with what
  would settle it; ``broken``: the kernel passed in BASE and fails or errs in HEAD.

Rows stop at the first look that decides them; undecided ones take rounds until their
time is spent, as NVBench's stopping criterion does for noise. The selection's time is
fixed up front, ``max_seconds`` for every row, pooled (:mod:`mmsuite.continuous_plan`):
rows of identical code are settled first, with a short check, and the rows whose code
changed share what they leave, each an equal share of what is left when it starts. A
row's budget is fixed when it starts, so that when it stops never depends on its own
rounds beyond its looks.

Where other processes leave fewer cores free than a C row's threads (the load meter,
read as the row starts), each side runs on the free cores' threads, in turns, or with
``--on-busy-machine at-once`` both sides at once, unpinned, in one window of time (see
:mod:`mmsuite.continuous_plan`); what was done is recorded with the row. A row left on
one host thread is timed by the time that thread ran, not by the wall clock, which
also holds the time slices it waited for (:func:`on_cpu_times`).

A worker process carried a bias of its own that no number of its rounds averaged away:
two processes of identical code, measured in turns, differed by up to ±11% for minutes
on a 2-core machine with a busy neighbour. Most of it was where the heap put the
operands (the CPU backend now places them on huge-page boundaries), but a row is still
decided only on rounds from at least ``min_worker_pairs`` pairs of worker processes: a
look that leaves it undecided with fewer opens a fresh pair. And a row is ``slower`` or
``faster`` only where each pair's own rounds point the same way (once it has a few): a
pair's bias can carry the pooled interval past the threshold, but not turn the other
pair's rounds. The workers' OpenMP threads are bound one to a CPU (unless the
environment says otherwise), which halved the rounds' spread there.

Duet mode (``Settings.duet``, after Bulej et al., ICPE 2020) measures both sides at
once, each pinned to a CPU of its own, where a row runs on one thread (a sequential CPU
rung, or any CPU rung with ``--threads 1``) and the driver may use two CPUs: whatever
the neighbours do then hits both sides in the same instant, and a round takes one turn's
time instead of two. Which side gets which CPU is drawn afresh every round, as the order
is otherwise, so that a CPU that is busier than the other favours neither side.

A row whose verdict would need more rounds than its budget holds (judged from the
kernel's checked launch when opened, then from its rounds) stops at once as ``unsure``,
saying what ``--max-time`` would decide it, rather than spending the budget for nothing.
"""

from __future__ import annotations

import functools
import math
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import continuous_plan, host, load, verdicts
from .backend_table import BACKENDS, HOST_BACKEND
from .backends import cuda_timing
from .builds import Build
from .catalogue import Kernel
from .continuous_plan import RowPlan, TimePool
from .load import DISTORTING_SHARE
from .problem import Problem
from .side_worker import BuildDamaged, SideWorker, WorkerLost
from .stats import PairedRatio, min_paired_rounds, paired_ratio
from .verdicts import DEFAULT_THRESHOLD, VerdictRow
from .workers import default_timeout

SIDES = ("base", "head")
#: How many times a row's interval may be looked at before its verdict is final.
MAX_LOOKS = 10
ORDERS = ("random", "abba")
#: Rounds taken before a row's pace may show it cannot be decided within its budget.
HOPELESS_AFTER_ROUNDS = 3
#: Rounds a worker pair needs before its own ratio must point the way of a slower or faster
#: call.
AGREEING_PAIR_ROUNDS = 8
#: Where a row is timed by CPU time, a mean share of the wall time on the CPU below this
#: says the clock mattered (the kernel was preempted), and the row says so.
PREEMPTED_SHARE = 0.95


@dataclass(frozen=True)
class Settings:
    """How rows are measured and judged."""

    threshold: float = DEFAULT_THRESHOLD  # the smallest change that counts, as a fraction
    confidence: float = 0.99  # of the interval on HEAD / BASE
    round_seconds: float = 0.05  # each side's turn in a round (at least one sample)
    # Per row, both sides' turns together, pooled over the selection (continuous_plan). 8 s
    # keeps a run that must time every row within 2.5x one `mmsuite run` of the selection.
    max_seconds: float = 8.0
    max_rounds: int = 400
    order: str = "random"  # which side goes first in a round: "random" or "abba"
    judge_identical: bool = False  # judge identical code by its times too
    seed: int = 0  # of the random order
    min_worker_pairs: int = 2  # fresh pairs of worker processes a verdict needs rounds from
    duet: bool = False  # single-threaded CPU rows: both sides at once, each on a CPU
    # Where fewer cores are free than a C row's threads: one of continuous_plan.BUSY_MODES
    busy: str = continuous_plan.BUSY_MODES[0]

    @property
    def bounds(self) -> tuple[float, float]:
        """The ratios HEAD / BASE beyond which a change counts: slower above the first,
        faster below the second."""
        return 1.0 + self.threshold, 1.0 / (1.0 + self.threshold)

    @property
    def look_confidence(self) -> float:
        """The confidence of each early look at a row's interval. A row is looked at up
        to ``MAX_LOOKS`` times and stops at the first decision, so each look spends a
        share of the error ``1 - confidence`` (Bonferroni: deciding at every round
        instead made identical code read "slower" in 2 of 72 rows on a heavily loaded
        machine). Half the error goes to the early looks, at geometrically spaced round
        counts, an equal share each; the other half to the last look, when the row's
        time is up (``final_confidence``): the rows still undecided then are the hard
        ones, and get the narrowest interval."""
        return 1.0 - (1.0 - self.confidence) / 2 / (MAX_LOOKS - 1)

    @property
    def final_confidence(self) -> float:
        """The confidence of a row's last look, when its time is up."""
        return 1.0 - (1.0 - self.confidence) / 2

    @property
    def min_rounds(self) -> int:
        """The fewest rounds that bound the interval at ``look_confidence``."""
        return min_paired_rounds(self.look_confidence)

    def rounds_to_verdict(self) -> int:
        """The fewest rounds that can decide a row: the look by which it has rounds from
        ``min_worker_pairs`` pairs of workers (a new pair is opened at each look before)."""
        looks = self.looks()
        return looks[min(self.min_worker_pairs, len(looks)) - 1]

    def looks(self) -> list[int]:
        """The round counts at which a row is judged: the fewest that can decide, then
        half as many again each time, within ``max_rounds``."""
        counts = [self.min_rounds]
        while len(counts) < MAX_LOOKS - 1 and math.ceil(counts[-1] * 1.5) <= self.max_rounds:
            counts.append(math.ceil(counts[-1] * 1.5))
        return counts


@dataclass
class ContinuousSide:
    """What one revision gave for a row."""

    status: str = "pending"  # ok, failed, error, unavailable, missing
    reason: str = ""
    rounds: list[float] = field(default_factory=list)  # median of each turn, ms
    samples: list[list[float]] = field(default_factory=list)
    shares: list[float] = field(default_factory=list)  # others' share of the CPU per turn
    #: per turn, the mean of its samples' CPU time over wall time (continuous_worker)
    on_cpu: list[float] = field(default_factory=list)
    #: What throttled the GPU in each turn NVML could read (backends.cuda_timing.throttled)
    throttles: list[list[str]] = field(default_factory=list)
    code: dict = field(default_factory=dict)
    max_rel_err: float | None = None
    info: dict = field(default_factory=dict)
    launch_s: float | None = None  # the open's checked launch, seconds

    @property
    def median_ms(self) -> float | None:
        return float(np.median(self.rounds)) if self.rounds else None

    @property
    def throttled(self) -> list[str] | None:
        """What throttled the GPU in any of this side's turns; None where no turn said."""
        return sorted(set().union(*self.throttles)) if self.throttles else None


@dataclass
class ContinuousRow:
    """One kernel x problem measured on both sides, and its verdict."""

    kernel: Kernel
    problem: Problem
    base: ContinuousSide = field(default_factory=ContinuousSide)
    head: ContinuousSide = field(default_factory=ContinuousSide)
    estimate: PairedRatio | None = None
    verdict: str = "unsure"
    reason: str = ""
    seconds: float = 0.0
    interrupted: bool = False
    #: the round each pair of worker processes began at, one entry per pair opened
    worker_pair_starts: list[int] = field(default_factory=list)
    needs_seconds: float | None = None  # of rounds, for a verdict, where more than allowed
    budget: float = 0.0  # seconds of rounds allowed, set when the row starts
    rounds_seconds: float = 0.0  # seconds its rounds took
    duet: bool = False  # both sides measured at once, each on a CPU of its own
    #: its threads and mode where it runs on the host's C ladder (continuous_plan.choose)
    measurement: RowPlan | None = None
    settled_first: bool = False  # needed no more than a short check: measured first
    #: "thread" where each sample is the time its one host thread ran (on_cpu_times), else
    #: "wall"
    clock: str = "wall"

    @property
    def identical(self) -> bool:
        base, head = self.base.code.get("hash"), self.head.code.get("hash")
        return base is not None and base == head

    @property
    def label(self) -> str:
        """``cpu.omp_tiled @ 768x768x768``: how the row is named in messages and journals."""
        return f"{self.kernel.id} @ {self.problem.shape_label}"

    @property
    def paired_rounds(self) -> int:
        """The rounds both sides finished."""
        return min(len(self.base.rounds), len(self.head.rounds))

    @property
    def worker_pairs(self) -> int:
        """How many pairs of worker processes its rounds came from: a pair opened but cut
        off (Ctrl-C) before its first round gave none."""
        return sum(1 for start in self.worker_pair_starts if start < self.paired_rounds)

    def worker_pair_ratios(self) -> list[float]:
        """HEAD / BASE from each worker pair's own rounds alone (the median of its
        per-round ratios), for pairs with at least ``AGREEING_PAIR_ROUNDS`` rounds."""
        ends = [*self.worker_pair_starts[1:], self.paired_rounds]
        ratios = []
        for start, end in zip(self.worker_pair_starts, ends):
            if end - start >= AGREEING_PAIR_ROUNDS:
                logs = (np.log(self.head.rounds[start:end]) -
                        np.log(self.base.rounds[start:end]))
                ratios.append(float(np.exp(np.median(logs))))
        return ratios

    @property
    def busy_share(self) -> float | None:
        shares = self.base.shares + self.head.shares
        return float(np.mean(shares)) if shares else None

    @property
    def on_cpu_share(self) -> float | None:
        """The mean share of its samples' wall time that the workers' threads ran."""
        shares = self.base.on_cpu + self.head.on_cpu
        return float(np.mean(shares)) if shares else None

    @property
    def together(self) -> bool:
        """Whether both sides took their turns at once, unpinned."""
        return self.measurement is not None and self.measurement.together

    def how(self) -> str:
        """How the row was measured, in words: ``threads 2 → 1 (0.9 of 2 cores free), both
        sides at once``, ``duet`` (pinned), or "" where in turns, as asked."""
        parts = ["duet, each side on a CPU of its own"] if self.duet else \
            [self.measurement.note()] if self.measurement is not None else []
        share = self.on_cpu_share
        if self.clock == "thread" and share is not None and share < PREEMPTED_SHARE:
            parts.append("CPU time (the kernel waited on others' time slices)")
        return ", ".join(part for part in parts if part)

    def spent(self) -> dict:
        """What the row was given and spent, and how it was measured, for the records."""
        record = {"rounds": self.paired_rounds,
                  "seconds": round(self.seconds, 2),
                  "rounds_seconds": round(self.rounds_seconds, 2),
                  "budget": round(self.budget, 2), "settled_first": self.settled_first,
                  "mode": "duet" if self.duet else "turns", "clock": self.clock,
                  "on_cpu": None if self.on_cpu_share is None else round(self.on_cpu_share, 3)}
        if self.measurement is not None:
            record.update(self.measurement.record())
        return record

    def verdict_row(self) -> VerdictRow:
        ratio = self.estimate.ratio if self.estimate is not None else None
        return VerdictRow(self.kernel.id, self.problem.shape_label, self.verdict, ratio,
                          self.reason, measured=self.spent())


def decide(pair: ContinuousRow, settings: Settings) -> tuple[str, str]:
    """The verdict of a pair and why, from its statuses, code identity and rounds."""
    base, head = pair.base, pair.head
    if base.status == "ok" and head.status in ("failed", "error"):
        return "broken", f"{head.status} in HEAD: {head.reason}"
    if "missing" in (base.status, head.status):
        where = "BASE" if base.status == "missing" else "HEAD"
        return "unsure", f"not in {where}: nothing to compare"
    if base.status != "ok" or head.status != "ok":
        sides = [f"{s.status} in {name}: {s.reason}" for name, s in
                 (("BASE", base), ("HEAD", head)) if s.status != "ok"]
        return "unsure", "; ".join(sides)
    if pair.identical and not settings.judge_identical:
        return "same", "identical code"
    if pair.needs_seconds is not None:
        rounds = pair.estimate.rounds if pair.estimate else 0
        return "unsure", (f"{rounds} rounds: a verdict needs {settings.rounds_to_verdict()} "
                          f"from {settings.min_worker_pairs} worker pairs, about "
                          f"{pair.needs_seconds:.0f} s of rounds at this kernel's speed: "
                          f"raise --max-time to {math.ceil(pair.needs_seconds)}")
    estimate = pair.estimate
    if estimate is None or not estimate.bounded:
        n = estimate.rounds if estimate else 0
        return "unsure", (f"{n} rounds, too few for a {settings.confidence:.0%} interval "
                          f"(needs {settings.min_rounds}): raise --max-time")
    if pair.worker_pairs < settings.min_worker_pairs:
        return "unsure", (f"{estimate.rounds} rounds from {pair.worker_pairs} pair of worker "
                          f"processes; a verdict needs {settings.min_worker_pairs}: raise "
                          "--max-time")
    changed = throttle_change(pair)
    if changed:  # as `compare` treats a load change: the clock, not the code, may differ
        return "unsure", f"{changed}: measure again on a GPU that holds its clock"
    up, down = settings.bounds
    dissent = dissenting_pairs(pair, settings)
    if dissent:
        return "unsure", (f"whole interval beyond ±{settings.threshold:.0%}, but the worker "
                          "pairs' own rounds point both ways "
                          f"({', '.join(f'{r:.2f}' for r in dissent)}): more --max-time, or "
                          "a quieter machine")
    if estimate.low > up:
        return "slower", f"whole interval above +{settings.threshold:.0%}"
    if estimate.high < down:
        return "faster", f"whole interval below -{settings.threshold:.0%}"
    if down <= estimate.low and estimate.high <= up:
        return "same", f"whole interval within ±{settings.threshold:.0%}" + (
            " (identical code)" if pair.identical else "")
    why = (f"interval straddles ±{settings.threshold:.0%} after {estimate.rounds} rounds "
           f"from {pair.worker_pairs} worker pairs")
    share = pair.busy_share
    if share is not None and share > DISTORTING_SHARE:
        return "unsure", (f"{why} on a busy machine (other processes used {share:.0%} of "
                          f"the CPU): more --max-time, or a quieter machine")
    return "unsure", f"{why}: more --max-time, or a quieter machine"


def throttle_change(pair: ContinuousRow) -> str:
    """Where the GPU was throttled in one side's turns by what it was not in the other's,
    what changed ("throttling changed: none in BASE, sw_power_cap in HEAD"); else ""."""
    base, head = pair.base.throttled, pair.head.throttled
    if base is None or head is None or set(base) == set(head):
        return ""
    return (f"throttling changed: {', '.join(base) or 'none'} in BASE, "
            f"{', '.join(head) or 'none'} in HEAD")


def dissenting_pairs(pair: ContinuousRow, settings: Settings) -> list[float]:
    """Where the whole interval lies beyond the threshold, every worker pair's own ratio
    when one of them points the other way (HEAD no slower, for a slower interval); else
    nothing.

    The interval treats rounds as independent, but the rounds of one pair of processes
    share that pair's bias (module docstring), which can carry the pooled interval past
    the threshold on its own; a change of the code moves every pair's rounds its way.
    Only the direction is asked of each pair: under a busy neighbour a pair's own ratio
    for a 10-15% slowdown came as low as 1.02, below the threshold but above 1."""
    estimate = pair.estimate
    if estimate is None or not estimate.bounded:
        return []
    up, down = settings.bounds
    ratios = pair.worker_pair_ratios()
    if estimate.low > up and not all(r > 1.0 for r in ratios):
        return ratios
    if estimate.high < down and not all(r < 1.0 for r in ratios):
        return ratios
    return []


def duet_cpus() -> tuple[int, int] | None:
    """Two CPUs this process may run on, for duet mode; None where there are not two (or
    the system cannot pin a process to a CPU)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return (cpus[0], cpus[1]) if len(cpus) >= 2 else None


def on_cpu_times(samples: list[float], on_cpu: list[float]) -> list[float]:
    """The time a one-thread kernel ran in each sample: its wall time times the share of it
    the worker's thread was on a CPU (at most all of it).

    On a shared core the scheduler hands out time slices of a few ms, and a sample's wall
    time holds the slices the kernel waited for as well as the ones it ran: on a 2-core
    machine with one core spun and a test suite at nice 19 in a session of its own (which
    the kernel's autogroup scheduling gives a whole share, nice or not), 768^3 on one
    thread took 18 or 36 ms a sample as the scheduler placed the worker, and the spread of
    log(HEAD/BASE) between consecutive samples was 0.22; of the time it ran, 0.09."""
    return [ms * min(1.0, share) for ms, share in zip(samples, on_cpu)]


def runs_on_one_thread(kernel: Kernel, threads: int | None) -> bool:
    """Whether a row keeps one host CPU busy: a kernel of the host's backend run with one
    thread, or a sequential rung of the C ladder. A Python plugin's callable (and numpy's
    reference) runs on numpy's BLAS, which takes every CPU unless told one thread, whatever
    the kernel declares."""
    if kernel.backend != HOST_BACKEND.name:
        return False
    on_blas = kernel.function is not None or bool(kernel.reference)
    return threads == 1 or not (kernel.threaded or on_blas)


class Gate:
    """Measures pairs with one worker per side, replaced when it dies."""

    def __init__(self, base: Build, head: Build, options: dict, settings: Settings,
                 logs: Path) -> None:
        self.builds = {"base": base, "head": head}
        self.options, self.settings, self.logs = options, settings, logs
        self.workers: dict[str, SideWorker | None] = {"base": None, "head": None}
        self.rng = random.Random(settings.seed)
        self.duet_cpus = duet_cpus() if settings.duet else None
        self.current: ContinuousRow | None = None  # the row under way in measure_all

    def in_duet(self, kernel: Kernel) -> bool:
        """Whether rows of ``kernel`` are measured in duet here."""
        return self.duet_cpus is not None and runs_on_one_thread(kernel,
                                                                 self.options.get("threads"))

    def _worker(self, side: str) -> SideWorker:
        worker = self.workers[side]
        if worker is None:
            worker = self.workers[side] = SideWorker(self.builds[side],
                                                     self.logs / f"{side}.log")
        return worker

    def _request(self, side: str, message: dict, timeout: float) -> dict:
        self._send(side, message)
        return self._receive(side, timeout)

    def _send(self, side: str, message: dict) -> None:
        try:
            self._worker(side).send(message)
        except WorkerLost:
            self._drop(side)
            raise

    def _receive(self, side: str, timeout: float) -> dict:
        try:
            return self._worker(side).receive(timeout)
        except WorkerLost:
            self._drop(side)
            raise

    def _drop(self, side: str) -> None:
        worker, self.workers[side] = self.workers[side], None
        if worker is not None:
            worker.close()

    def close(self) -> None:
        for side in SIDES:
            self._drop(side)

    def _open_both(self, pair: ContinuousRow, timeout: float) -> None:
        """Open the row on both sides at once: an open is not timed, and verifying the
        kernel against its float64 reference is most of a row's fixed cost."""
        # Both sides read their code's identity the way this mmsuite does (its readers).
        options = self.options
        if pair.measurement is not None:  # the threads chosen for the row, on both sides
            options = {**options, "threads": pair.measurement.threads}
        message = {"op": "open", "kernel": pair.kernel.id, "problem": pair.problem.to_dict(),
                   "options": options, "code": asdict(BACKENDS[pair.kernel.backend].code)}
        pair.worker_pair_starts.append(len(pair.base.rounds))
        self._ask_both(pair, message, timeout, self._order(0), self._opened)

    def _ask_both(self, pair: ContinuousRow, message: dict, timeout: float, order: tuple[str, str],
                  handle: Callable[[ContinuousSide, dict], None],
                  cpus: tuple[int, int] | None = None) -> None:
        """Send ``message`` to both sides, in ``order`` (each pinned to its CPU of ``cpus``
        where given), before awaiting either answer; ``handle`` takes each side's answer. A
        side whose worker is lost becomes an error."""
        sent = []
        for index, side in enumerate(order):
            try:
                if cpus is not None:
                    self._worker(side).pin({cpus[index]})
                self._send(side, message)
                sent.append(side)
            except WorkerLost as exc:
                self._lost(getattr(pair, side), exc)
        for side in sent:
            try:
                handle(getattr(pair, side), self._receive(side, timeout))
            except WorkerLost as exc:
                self._lost(getattr(pair, side), exc)

    @staticmethod
    def _lost(target: ContinuousSide, exc: WorkerLost) -> None:
        target.status, target.reason = "error", str(exc)

    @staticmethod
    def _opened(target: ContinuousSide, answer: dict) -> None:
        if answer["status"] == "damaged":
            raise BuildDamaged(answer.get("reason", "the build is damaged"))
        target.status, target.reason = answer["status"], answer.get("reason", "")
        target.code = answer.get("code") or {}
        target.max_rel_err = answer.get("max_rel_err")
        target.info = answer.get("info") or {}
        target.launch_s = answer.get("launch_s")

    def _round(self, pair: ContinuousRow, timeout: float) -> None:
        """One turn of each side: one after the other, in the round's order, or both at
        once: unpinned on a busy machine, or in duet, the order saying which side gets
        which CPU."""
        order = self._order(len(pair.base.rounds))
        turned = functools.partial(self._turned, pair.clock)
        if pair.together:
            self._ask_both(pair, self._window_message(pair), timeout, order, turned)
            return
        if not pair.duet:
            for side in order:
                self._turn(pair, side, timeout)
            return
        assert self.duet_cpus is not None  # pair.duet is set only where there are two
        self._ask_both(pair, self._turn_message, timeout, order, turned, cpus=self.duet_cpus)

    @property
    def _turn_message(self) -> dict:
        return {"op": "turn", "seconds": self.settings.round_seconds}

    def _window_message(self, pair: ContinuousRow) -> dict:
        """A turn both sides take at once, in one window of time that holds a few samples
        (``continuous_plan.window``); the worker keeps the samples that end within it."""
        last = [float(np.median(s.samples[-1])) / 1e3 for s in (pair.base, pair.head)
                if s.samples]
        launches = [s.launch_s for s in (pair.base, pair.head) if s.launch_s is not None]
        start, seconds = continuous_plan.window(self.settings.round_seconds, last or launches)
        return {"op": "turn", "seconds": seconds, "window": [start, start + seconds]}

    def _unpin(self) -> None:
        """Let both workers run anywhere again, as the next row may not be in duet."""
        anywhere = os.sched_getaffinity(0)
        for worker in self.workers.values():
            if worker is not None:
                worker.pin(anywhere)

    def _turn(self, pair: ContinuousRow, side: str, timeout: float) -> None:
        target: ContinuousSide = getattr(pair, side)
        try:
            answer = self._request(side, self._turn_message, timeout)
        except WorkerLost as exc:
            self._lost(target, exc)
            return
        self._turned(pair.clock, target, answer)

    @staticmethod
    def _turned(clock: str, target: ContinuousSide, answer: dict) -> None:
        """Record a side's turn: its samples, and as its round their median, each sample
        taken by ``clock`` (``on_cpu_times``)."""
        samples, on_cpu = answer["samples"], answer.get("on_cpu")
        target.samples.append(samples)
        if on_cpu is not None and len(on_cpu) == len(samples):
            target.on_cpu.append(float(np.mean(np.minimum(on_cpu, 1.0))))
            if clock == "thread":
                samples = on_cpu_times(samples, on_cpu)
        target.rounds.append(float(np.median(samples)))
        share = (answer.get("host_load") or {}).get("others_share")
        if share is not None:
            target.shares.append(float(share))
        throttle = cuda_timing.throttled(answer.get("gpu"))
        if throttle is not None:
            target.throttles.append(throttle)

    def _order(self, round_index: int) -> tuple[str, str]:
        if self.settings.order == "abba":  # BASE HEAD, HEAD BASE, BASE HEAD, ...
            return SIDES if round_index % 2 == 0 else SIDES[::-1]
        return SIDES if self.rng.random() < 0.5 else SIDES[::-1]

    def measure_all(self, pairs: list[ContinuousRow],
                    pool: TimePool | None = None) -> Iterator[ContinuousRow]:
        """Measure every pair, yielding each once judged: first the rows that need no
        more than a short check (identical code on both sides, or a side that cannot run
        it), then the rows of changed code, each given an equal share of what is left of
        the selection's pooled time when it starts (``pool``: by default every row's
        ``max_seconds``; a resumed gate's holds what its finished rows left)."""
        if pool is None:
            pool = TimePool.for_rows(len(pairs), self.settings.max_seconds)
        changed = []
        for pair in pairs:
            self.current = pair
            if self.settle(pair):
                pool.spend(pair.rounds_seconds)
                yield pair
            else:
                changed.append(pair)
        for index, pair in enumerate(changed):
            self.current = pair
            self.measure(pair, pool.share(len(changed) - index))
            pool.spend(pair.rounds_seconds)
            yield pair
        self.current = None

    def settle(self, pair: ContinuousRow) -> bool:
        """Open a row and, where a short check is all it needs (identical code, or a side
        that cannot run it), measure and judge it now: True. A row of changed code is
        closed again, for ``measure`` with its share of the time: False."""
        return self._measure(pair, None, settle_only=True)

    def measure(self, pair: ContinuousRow, budget: float | None = None) -> ContinuousRow:
        """Open the kernel on both sides, take rounds until decided or out of ``budget``
        seconds of rounds (default ``max_seconds``), judge."""
        self._measure(pair, budget, settle_only=False)
        return pair

    def _measure(self, pair: ContinuousRow, budget: float | None, settle_only: bool) -> bool:
        timeout = default_timeout(pair.problem)
        started = time.monotonic()
        pair.budget = self.settings.max_seconds if budget is None else budget
        measured = False
        try:
            self._plan(pair)
            self._open_both(pair, timeout)
            both = pair.base.status == pair.head.status == "ok"
            if settle_only and both and not self._quick(pair):
                pair.worker_pair_starts.clear()  # opened again when it is measured
                return False
            measured, pair.settled_first = True, settle_only
            if both:  # the budget is for rounds
                pair.needs_seconds = self._unaffordable(pair)
                if pair.needs_seconds is None:
                    self._rounds(pair, timeout, time.monotonic())
            else:
                for side in SIDES:
                    if getattr(pair, side).status == "ok":
                        self._time_alone(pair, side, timeout)
        except BaseException:  # Ctrl-C, SIGTERM: cut short where the signal came
            pair.interrupted = measured = True
            raise
        finally:
            if pair.duet:
                self._unpin()
            for side in SIDES:
                if getattr(pair, side).status == "ok" and self.workers[side] is not None:
                    try:
                        self._request(side, {"op": "close"}, timeout)
                    except WorkerLost:
                        pass
            pair.seconds += time.monotonic() - started
            if measured:
                self._judge(pair, final=True)
        return True

    def _quick(self, pair: ContinuousRow) -> bool:
        """Whether an opened row is decided by its code alone (identical on both sides)."""
        return pair.identical and not self.settings.judge_identical

    def _plan(self, pair: ContinuousRow) -> None:
        """How the row is measured: in pinned duet where asked for (``--duet``); for the
        other rows of the host's C ladder, the load meter's reading decides the threads
        and whether both sides run at once (``continuous_plan.choose``); a row left on one
        host thread is timed by the time that thread ran (``on_cpu_times``)."""
        kernel = pair.kernel
        pair.duet = self.in_duet(kernel)
        pair.measurement = None
        threads = self.options.get("threads")
        if kernel.backend == HOST_BACKEND.name and not pair.duet:
            cpus = host.allowed_cpus()
            reading = load.free_cores(cpus) if self.settings.busy != "as-asked" else None
            pair.measurement = continuous_plan.choose(kernel.threaded, threads, cpus, reading,
                                                      self.settings.busy)
            threads = pair.measurement.threads
        pair.clock = "thread" if runs_on_one_thread(kernel, threads) else "wall"

    def _time_alone(self, pair: ContinuousRow, side: str, timeout: float) -> None:
        """Turns of the one side that opened a row the other could not: its results file
        then holds the row as it ran there (timed, ``ok``), so that ``compare`` of the two
        files finds what the verdict found (a kernel that broke, say). As many turns as
        one look takes, within half the row's budget; no ratio comes of them."""
        started, target = time.monotonic(), getattr(pair, side)
        while target.status == "ok" and len(target.rounds) < self.settings.min_rounds:
            self._turn(pair, side, timeout)
            pair.rounds_seconds = time.monotonic() - started
            if pair.rounds_seconds >= pair.budget / 2:
                return

    def _unaffordable(self, pair: ContinuousRow) -> float | None:
        """The seconds of rounds a verdict would take, where its open shows that they
        exceed the budget; else None. Both sides opened at once, sharing the CPUs, so half
        the faster side's checked launch is taken as a launch's cost: a row is given up
        only when even that optimistic guess cannot fit."""
        settings = self.settings
        if self._quick(pair):
            return None  # decided already: its rounds only show the ratio, within budget
        launches = [s.launch_s for s in (pair.base, pair.head) if s.launch_s is not None]
        if len(launches) < 2:
            return None  # an older revision: judged from its first rounds instead
        turns = 1 if pair.duet or pair.together else 2  # both at once: one turn long
        per_round = turns * max(settings.round_seconds, min(launches) / 2)
        needed = settings.rounds_to_verdict() * per_round
        return needed if needed > pair.budget else None

    @staticmethod
    def _hopeless(rounds: int, spent: float, to_verdict: int, budget: float) -> bool:
        """Whether rounds at the pace so far would reach a verdict (``to_verdict`` rounds)
        only far (2x) beyond the ``budget``: judged after a few rounds, for revisions
        whose open gave no launch time (the first rounds are the slowest, and a row may
        still be decided at the look its time ends with)."""
        if rounds < HOPELESS_AFTER_ROUNDS or rounds >= to_verdict:
            return False
        return to_verdict * spent / rounds > 2 * budget

    def _fresh_workers(self, pair: ContinuousRow, timeout: float) -> float:
        """Replace both sides' workers and open the row on the new ones; the seconds it
        took, which the row's budget for rounds does not pay."""
        started = time.monotonic()
        self.close()
        self._open_both(pair, timeout)
        return time.monotonic() - started

    def _rounds(self, pair: ContinuousRow, timeout: float, started: float) -> None:
        settings = self.settings
        quick = self._quick(pair)
        looks = set(settings.looks())
        to_verdict = settings.rounds_to_verdict()
        while True:
            self._round(pair, timeout)
            if "error" in (pair.base.status, pair.head.status):
                return
            n = len(pair.base.rounds)
            spent = pair.rounds_seconds = time.monotonic() - started
            out_of_time = spent >= pair.budget or n >= settings.max_rounds
            if self._hopeless(n, spent, to_verdict, pair.budget):
                pair.needs_seconds = to_verdict * spent / n
                return
            if n in looks:
                self._judge(pair)
                if quick or pair.verdict != "unsure":
                    return
                # Fresh workers until the rounds come from enough pairs: each process
                # carries a bias of its own (module docstring).
                if not out_of_time and pair.worker_pairs < settings.min_worker_pairs:
                    started += self._fresh_workers(pair, timeout)
                    if pair.base.status != "ok" or pair.head.status != "ok":
                        return
            if out_of_time:
                return  # measure() judges it once more: the last look

    def _judge(self, pair: ContinuousRow, final: bool = False) -> None:
        """Look at a row: an early look, or its last (a verdict an early look gave stands
        there too: the last interval, at a lower confidence, lies within it)."""
        settings = self.settings
        rounds = pair.paired_rounds
        if rounds:
            pair.estimate = paired_ratio(
                pair.base.rounds[:rounds], pair.head.rounds[:rounds],
                settings.final_confidence if final else settings.look_confidence)
        pair.verdict, pair.reason = decide(pair, self.settings)
        if pair.interrupted:  # its rounds end where the signal came, not at a look: no verdict
            pair.verdict, pair.reason = "unsure", (
                f"interrupted after {rounds} rounds: not judged (--resume measures it again)")


def exit_status(pairs: list[ContinuousRow], strict: bool) -> int:
    """The gate's exit status over the pairs' verdicts (``verdicts.exit_status``)."""
    return verdicts.exit_status((p.verdict for p in pairs), strict)


def side_record(pair: ContinuousRow, side: str, build: Build) -> dict:
    """One side of a pair as a results-file record: ``compare`` and ``report`` read it."""
    kernel, problem, measured = pair.kernel, pair.problem, getattr(pair, side)
    status = {"missing": "unavailable"}.get(measured.status, measured.status)
    reason, rounds = measured.reason, measured.rounds
    if status == "ok" and not rounds and pair.needs_seconds is not None:
        status, reason = "unavailable", f"verified, not timed: {pair.reason}"
    elif status == "ok" and not rounds:
        status, reason = "error", "no round finished"
    record: dict = {
        "kernel": kernel.id, "backend": kernel.backend, "rung": kernel.rung,
        "parent": kernel.parent, "adds": kernel.adds, "problem": problem.to_dict(),
        "flops": problem.flops, "status": status, "reason": reason,
        "info": measured.info, "code": measured.code,
        "revision": {"name": build.revision, "commit": build.commit},
    }
    if rounds:
        median = float(np.median(rounds))
        record.update({
            "kernel_ms": {"median": median, "min": min(rounds), "max": max(rounds),
                          "samples": list(rounds)},
            "gflops": problem.flops / (median * 1e6), "max_rel_err": measured.max_rel_err,
            "host_load": {"others_share": float(np.mean(measured.shares))
                          if measured.shares else None},
        })
        if measured.throttled is not None:  # marked like a noisy row where throttled
            record.update(throttled=measured.throttled, noisy=bool(measured.throttled))
    if pair.estimate is not None:
        est = pair.estimate
        record["paired"] = {
            "verdict": pair.verdict, "reason": pair.reason, "ratio": est.ratio,
            "low": est.low if est.bounded else None, "high": est.high if est.bounded else None,
            "p_value": est.p_value, "rounds": est.rounds, "confidence": est.confidence,
            "identical_code": pair.identical, "duet": pair.duet,
            "worker_pair_starts": pair.worker_pair_starts, "measured": pair.spent(),
        }
    return record


def interval_text(pair: ContinuousRow) -> str:
    est = pair.estimate
    if est is None:
        return "-"
    if not est.bounded:
        return f"({est.rounds} rounds)"
    return f"{est.low:.3f}-{est.high:.3f}"


def ratio_text(pair: ContinuousRow) -> str:
    est = pair.estimate
    return "-" if est is None or not math.isfinite(est.ratio) else f"{est.ratio:.3f}"
