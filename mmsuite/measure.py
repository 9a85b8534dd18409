"""Measurement: the one engine that runs, samples, times and verifies a kernel on a problem.

Adapters give primitives (``mmsuite.backends.base``); the loop lives here:

1. prepare a session (compile, allocate, copy in; untimed);
2. transfers, on devices that have them, in their own phase: h2d of A and B and
   d2h of C, with pageable and with pinned host memory;
3. warm-up: ``warmup`` untimed launches, lasting at least the session's floor;
4. samples: reset C, scrub L2 when ``l2 == "cold"``, then the timer brackets
   the launches of the sample alone (a timer may refuse a sample it cannot
   vouch for; it is taken again). A sample is one launch, unless the timer
   carries a fixed cost of its own (``Timer.floor_ms``: a CUDA event pair's
   microsecond) and one launch is so short that the cost would exceed
   ``FLOOR_SHARE`` of it: then, with warm L2 only, a sample is that many
   launches back to back, and its time divided by their number, as NVBench's
   batch time is. A rung of a host backend takes turns with the backend's
   reference library on the same call, so that load hits both alike;
5. the stopping rule (``Sampling``), checked as samples come in: at least
   ``min_samples`` and ``min_seconds``, until the robust noise is below
   ``noise_target`` (``cpu_noise_target`` on a CPU device), or ``max_seconds``
   (once ``verdict_samples`` are in) or ``max_samples`` is reached. A row
   whose noise stayed above the target, or most of whose samples the timer knows
   were disturbed (another process preempted the CPU rung), is ``noisy``;
6. C is copied out and verified against the float64 reference;
7. the accuracy column: the backend's FP32 reference library (cuBLAS FP32,
   OpenBLAS, CLBlast, or OpenBLAS where CLBlast is missing) runs once on the
   same inputs (``LibraryError``, shared by the kernels of a problem), and
   ``err_vs_ref`` is the kernel's componentwise ``err_bound`` over the library's.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from . import catalogue, energy, verify
from .backend_table import BACKENDS, HOST_BACKEND
from .backends import (
    KernelFailed,
    KernelUnavailable,
    RunOptions,
    cuda_timing,
    get_backend,
    unavailable_reason,
)
from .backends.base import Backend, Session, Timer
from .catalogue import Kernel
from .identity import code_identity, plugin_kernel_hash
from .layout import GemmCall, from_storage, plan_call
from .load import LoadWindow
from .problem import Problem
from .stats import VERDICT_SAMPLES, robust_noise

DEFAULT_WARMUP = 1
# A timer may refuse a sample (None) and ask for it again, at most this many times in a row.
MAX_RETAKES = 16
# A timer's fixed cost per sample stays below this share of the sample (step 4 above): the
# default noise target, so that the cost is below what the stopping rule resolves.
FLOOR_SHARE = 0.005
MAX_LAUNCHES_PER_SAMPLE = 64
# How long a host BLAS's idle worker threads keep spinning after a call (OpenBLAS: ~0.1 s).
HOST_THREADS_SETTLE_S = 0.15
# A checked launch at least this long (s) is its own warm-up for KernelSampler.
LONG_LAUNCH_S = 0.5


@dataclass(frozen=True)
class Sampling:
    """The stopping rule, recorded with every result.

    Sampling stops once at least ``min_samples`` samples and ``min_seconds`` of
    wall clock are in and the robust noise is at most ``noise_target``, or as
    soon as ``max_seconds`` (None: no cap) or ``max_samples`` is reached. The
    defaults are NVBench's.

    A GPU timed by its own clock reaches NVBench's 0.5% when nothing else runs on
    it; a CPU kernel's wall clock shares the cores with the operating system and
    the host's other threads, so ``cpu_noise_target`` (None: ``noise_target``)
    gives CPU devices (the C ladder, OpenCL on a CPU) a target of their own, one a
    quiet machine reaches, so that a row marked noisy means a disturbed machine.
    The cap waits for ``verdict_samples``: fewer samples give ``mmsuite compare``
    nothing to decide on, so a slow kernel takes that many and stops.
    """

    min_samples: int = 10
    min_seconds: float = 0.5
    noise_target: float = 0.005
    max_seconds: float | None = 15.0
    max_samples: int | None = None
    name: str = "default"
    # With an interleaved reference: the least time of one turn of samples (sample_session).
    block_seconds: float = 0.2
    cpu_noise_target: float | None = None
    verdict_samples: int = 1

    def __post_init__(self) -> None:
        if self.min_samples < 1:
            raise ValueError(f"min_samples must be >= 1, got {self.min_samples}")
        if self.max_samples is not None and self.max_samples < self.min_samples:
            raise ValueError("max_samples must be >= min_samples")
        if self.min_seconds < 0 or self.noise_target < 0 or (self.cpu_noise_target or 0) < 0:
            raise ValueError("min_seconds and the noise targets must be >= 0")
        if self.verdict_samples < 1:
            raise ValueError(f"verdict_samples must be >= 1, got {self.verdict_samples}")

    def for_device(self, device_kind: str) -> Sampling:
        """The rule for a device of ``device_kind`` ("CPU" or "GPU"): a CPU takes
        ``cpu_noise_target`` as its target where one is set."""
        if device_kind == "CPU" and self.cpu_noise_target is not None:
            return replace(self, noise_target=self.cpu_noise_target)
        return self

    @classmethod
    def fixed(cls, samples: int) -> Sampling:
        """Exactly ``samples`` samples, whatever the noise (the noise is still recorded)."""
        if samples < 1:
            raise ValueError(f"repeats must be >= 1, got {samples}")
        return cls(min_samples=samples, min_seconds=0.0, max_seconds=None, max_samples=samples,
                   name="fixed")

    def stop(self, samples: list[float], seconds: float) -> str:
        """Why sampling stops now ("" while it goes on)."""
        n = len(samples)
        if self.max_samples is not None and n >= self.max_samples:
            return "max_samples"
        if self.max_seconds is not None and seconds >= self.max_seconds \
                and n >= self.verdict_samples:
            return "max_seconds"
        if n >= self.min_samples and seconds >= self.min_seconds:
            noise = robust_noise(samples)
            if noise is not None and noise <= self.noise_target:
                return "noise_target"
        return ""


#: NVBench's rule: 10 samples, 0.5 s, 0.5 % noise, 15 s cap.
DEFAULT_SAMPLING = Sampling()
#: The noise a quiet CPU reaches on the C ladder and PoCL at 512^3 (wall clock, two cores).
CPU_NOISE_TARGET = 0.02
#: The command line's default: NVBench's 0.5% on GPUs, CPU_NOISE_TARGET on CPUs, at least
#: VERDICT_SAMPLES and 0.1 s, at most 0.5 s a kernel unless it needs longer for VERDICT_SAMPLES
#: (a slow rung stops there): the default run takes seconds, not minutes. Turns with the
#: reference of half a second leave a slow rung two or three turns, not five.
CLI_SAMPLING = Sampling(min_samples=VERDICT_SAMPLES, min_seconds=0.1, max_seconds=0.5,
                        cpu_noise_target=CPU_NOISE_TARGET, verdict_samples=VERDICT_SAMPLES,
                        block_seconds=0.5, name="cli")


@dataclass(frozen=True)
class PhaseStats:
    """Timing of one phase (h2d, kernel or d2h) over its samples, in ms."""

    median: float
    min: float
    max: float
    samples: tuple[float, ...] = ()

    @classmethod
    def of(cls, samples: list[float] | tuple[float, ...]) -> PhaseStats:
        if not samples:
            return cls(0.0, 0.0, 0.0, ())
        return cls(statistics.median(samples), min(samples), max(samples), tuple(samples))

    @property
    def spread(self) -> float:
        """(max - min) / median: differences smaller than this are noise."""
        return (self.max - self.min) / self.median if self.median > 0 else 0.0

    @property
    def noise(self) -> float | None:
        """Robust relative noise (1.4826 * MAD / median); None below two samples."""
        return robust_noise(self.samples)

    def to_dict(self) -> dict:
        return {"median": self.median, "min": self.min, "max": self.max,
                "spread": self.spread, "noise": self.noise, "samples": list(self.samples)}


@dataclass
class Sampled:
    """What the engine measured on one session: samples and how sampling ended."""

    kernel_ms: list[float]
    reference_ms: list[float]
    seconds: float
    stopped_by: str
    sampling: Sampling
    disturbed: int = 0  # kernel samples the timer knows were disturbed (preempted CPU)
    reference_disturbed: int = 0
    launches_per_sample: int = 1  # each sample is the mean of this many back-to-back launches

    def _noisy(self, samples: list[float], disturbed: int) -> bool:
        noise = robust_noise(samples)
        above = noise is not None and noise > self.sampling.noise_target
        return above or 2 * disturbed > len(samples)

    @property
    def noisy(self) -> bool:
        """The noise stayed above the target, or most samples were disturbed: a machine
        loaded steadily can give a tight spread around a wrong figure."""
        return self._noisy(self.kernel_ms, self.disturbed)

    @property
    def reference_noisy(self) -> bool:
        """The same for the interleaved reference's samples (what "% ref" divides by)."""
        return bool(self.reference_ms) and self._noisy(self.reference_ms,
                                                       self.reference_disturbed)

    def record(self) -> dict:
        return {**{k: v for k, v in asdict(self.sampling).items()},
                "samples": len(self.kernel_ms), "seconds": self.seconds,
                "stopped_by": self.stopped_by, "disturbed": self.disturbed,
                "reference_disturbed": self.reference_disturbed,
                "launches_per_sample": self.launches_per_sample}


def _sample(session: Session, timer: Timer, cold: bool, launches: int = 1) -> float:
    """One sample: the time of ``launches`` back-to-back launches over their number; taken
    again while the timer cannot vouch for it (``None``). Whether it was disturbed is for
    the caller to ask the timer."""
    for _ in range(MAX_RETAKES):
        session.reset_c()
        if cold:
            session.scrub_l2()
        timer.start()
        for _ in range(launches):
            session.launch()
        timer.stop()
        ms = timer.elapsed_ms()
        if ms is not None:
            return ms / launches
    raise KernelFailed(f"{session.kernel.id}: the timer refused {MAX_RETAKES} samples in a row")


def _launches_per_sample(session: Session, timer: Timer, cold: bool) -> int:
    """1, or enough launches that the timer's fixed cost is at most ``FLOOR_SHARE`` of a
    sample, judged from one launch timed alone (and not kept). Cold L2 scrubs before
    every launch, so its samples stay single launches."""
    if cold or timer.floor_ms <= 0:
        return 1
    one = _sample(session, timer, cold=False)
    if one <= 0:
        return MAX_LAUNCHES_PER_SAMPLE
    return max(1, min(MAX_LAUNCHES_PER_SAMPLE, math.ceil(timer.floor_ms / (FLOOR_SHARE * one))))


def _warm_up(session: Session, warmup: int, clock: Callable[[], float],
             floor_s: float = 0.0) -> None:
    """``warmup`` untimed launches, for at least the session's floor (or ``floor_s`` if
    longer) when there are any."""
    if warmup <= 0:
        return
    start, done = clock(), 0
    floor_s = max(floor_s, session.warmup_floor_s)
    while done < warmup or clock() - start < floor_s:
        session.reset_c()
        session.launch()
        session.synchronize()
        done += 1


class _Stopper:
    """The stopping rule, checked after every sample up to ``min_samples``, then at growing
    intervals (every tenth of the count so far), so that long runs of short kernels do not
    spend their time in the median."""

    def __init__(self, sampling: Sampling) -> None:
        self.sampling, self.next_check = sampling, 1

    def __call__(self, samples: list[float], seconds: float) -> str:
        rule, n = self.sampling, len(samples)
        if n < self.next_check:
            hard_stop = rule.max_samples is not None and n >= rule.max_samples
            over_time = rule.max_seconds is not None and seconds >= rule.max_seconds
            if not (hard_stop or over_time):
                return ""
        self.next_check = n + (max(1, n // 10) if n >= rule.min_samples else 1)
        return rule.stop(samples, seconds)


def sample_session(session: Session, sampling: Sampling, warmup: int = DEFAULT_WARMUP,
                   l2: str = "warm", partner: Session | None = None,
                   clock: Callable[[], float] = time.perf_counter) -> Sampled:
    """Warm up, then take samples of ``session`` until ``sampling`` says stop.

    With a ``partner`` (the reference library on the same call), the session and
    the partner take turns in blocks: samples of the session for at least
    ``sampling.block_seconds`` (or until the rule stops), then as many samples
    of the partner; the partner's are returned as ``reference_ms``. Within a
    block the rule counts the partner's coming turn as lasting as long as the
    block, so that its time cap bounds both. Both so see
    the same load. Turns are blocks, not single samples, because a library's
    idle worker threads keep spinning for a while after a call (OpenBLAS: about
    0.1 s) and would slow the other's next samples: with a warm-up, each turn
    starts with the session's untimed warm-up floor, which outlasts them. The
    rule looks at the session's samples only; ``clock`` (seconds) is the time it
    sees.
    """
    cold = l2 == "cold"
    _warm_up(session, warmup, clock)
    timer = session.timer()
    launches = _launches_per_sample(session, timer, cold)
    partner_launches = 0  # found on the partner's first turn
    stop = _Stopper(sampling)
    samples: list[float] = []
    reference: list[float] = []
    disturbed = reference_disturbed = 0
    start = clock()
    while True:
        block_start, block = clock(), 0
        while True:
            samples.append(_sample(session, timer, cold, launches))
            disturbed += timer.disturbed()
            block += 1
            seconds = clock() - start
            # The partner's turn of as many samples follows this block: the rule sees the
            # time both turns will have taken, so that the cap bounds the pair, not the
            # rung alone (a fast rung took twice its cap).
            ahead = clock() - block_start if partner is not None else 0.0
            stopped_by = stop(samples, seconds + ahead)
            if stopped_by or (partner is not None and clock() - block_start
                              >= sampling.block_seconds):
                break
        if partner is not None:
            _warm_up(partner, warmup, clock)
            partner_timer = partner.timer()
            partner_launches = partner_launches or _launches_per_sample(
                partner, partner_timer, cold)
            for _ in range(block):
                reference.append(_sample(partner, partner_timer, cold, partner_launches))
                reference_disturbed += partner_timer.disturbed()
            seconds = clock() - start
        if stopped_by:
            for batched, count in ((session, launches), (partner, partner_launches)):
                if batched is not None and count > 1:  # C as one call leaves it (beta != 0)
                    batched.reset_c()
                    batched.launch()
            return Sampled(samples, reference, seconds, stopped_by, sampling, disturbed,
                           reference_disturbed, launches)
        if partner is not None:
            _between_turns(session, warmup, clock, samples[-1])


def _between_turns(session: Session, warmup: int, clock: Callable[[], float],
                   last_ms: float) -> None:
    """The session's turn after the partner's: its warm-up floor outlasts the partner's
    spinning threads. A session whose one sample outlasts the floor needs no launch to
    warm its caches (its first milliseconds do), so it waits the floor out idle rather
    than spend a whole launch of a slow rung on it."""
    floor_s = session.warmup_floor_s
    if warmup > 0 and floor_s > 0 and last_ms / 1e3 > floor_s:
        time.sleep(floor_s)
        return
    _warm_up(session, warmup, clock)


def _device_kind(kernel: Kernel, session: Session) -> str:
    """"CPU" for the C ladder and OpenCL on a CPU, else "GPU" (for the noise target)."""
    return "CPU" if BACKENDS[kernel.backend].on_host(session.info.get("device_type")) else "GPU"


def _transfers(session: Session, sampling: Sampling, pinned: bool) -> tuple[list, list]:
    """h2d and d2h samples of one host-memory kind: ``min_samples`` of each, within the cap."""
    session.transfer_ms(pinned)  # untimed first transfer: staging buffers, page faults
    h2d: list[float] = []
    d2h: list[float] = []
    start = time.perf_counter()
    cap = sampling.max_seconds
    while len(h2d) < sampling.min_samples and (
            cap is None or not h2d or time.perf_counter() - start < cap):
        up, down = session.transfer_ms(pinned)
        h2d.append(up)
        d2h.append(down)
    return h2d, d2h


def _rates(nbytes_in: int, nbytes_out: int, h2d: list, d2h: list) -> dict:
    up, down = statistics.median(h2d), statistics.median(d2h)
    return {"h2d_ms": PhaseStats.of(h2d).to_dict(), "d2h_ms": PhaseStats.of(d2h).to_dict(),
            "h2d_gbps": nbytes_in / (up * 1e6) if up > 0 else None,
            "d2h_gbps": nbytes_out / (down * 1e6) if down > 0 else None}


def _load_avg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not on every platform
        return None


@dataclass(frozen=True)
class LibraryError:
    """The FP32 reference library's error on a problem's inputs (the accuracy yardstick)."""

    library: str
    max_rel_err: float
    err_bound: float

    def ratio(self, err_bound: float) -> float:
        """``err_bound`` over the library's; exact results (0) divide by float32's tiny."""
        return err_bound / max(self.err_bound, float(np.finfo(np.float32).tiny))


def library_error(problem: Problem, inputs: tuple[np.ndarray, ...],
                  reference: verify.Reference,
                  options: RunOptions, backend: str) -> LibraryError | None:
    """The backend's FP32 reference library run once on ``inputs`` and checked against the
    float64 ``reference``; OpenBLAS stands in where the backend's own (CLBlast) cannot run.
    None where neither can."""
    for kernel in (catalogue.reference_of(backend), catalogue.reference_of(HOST_BACKEND.name)):
        if kernel is None or unavailable_reason(kernel, options):
            continue
        call = plan_call(problem, inputs, kernel.layout)
        with get_backend(kernel.backend, options).prepare(kernel, call) as session:
            session.reset_c()
            session.launch()
            session.synchronize()
            output = from_storage(np.asarray(session.output(), dtype=np.float32), problem)
        return LibraryError(kernel.id, verify.relative_error(output, reference),
                            verify.componentwise_error(output, reference))
    return None


@dataclass
class Measurement:
    """One kernel on one problem: output, per-phase times and the verification verdict."""

    kernel: Kernel
    problem: Problem
    output: np.ndarray
    h2d_ms: PhaseStats
    kernel_ms: PhaseStats
    d2h_ms: PhaseStats
    verdict: verify.Verdict
    info: dict = field(default_factory=dict)
    sampled: Sampled | None = None
    reference_ms: PhaseStats | None = None
    transfers: dict | None = None
    l2: str = "warm"
    load_avg: dict = field(default_factory=dict)
    host_load: dict = field(default_factory=dict)
    code: dict = field(default_factory=dict)
    library: LibraryError | None = None
    energy: energy.Energy | None = None

    @property
    def err_vs_ref(self) -> float | None:
        """This kernel's err_bound over the FP32 reference library's on the same inputs."""
        return self.library.ratio(self.err_bound) if self.library is not None else None

    @property
    def host_to_host_ms(self) -> float:
        return self.h2d_ms.median + self.kernel_ms.median + self.d2h_ms.median

    @property
    def gflops(self) -> float:
        """Kernel-only GFLOP/s (median time)."""
        return _gflops(self.problem.flops, self.kernel_ms.median)

    @property
    def host_gflops(self) -> float:
        """Host-to-host GFLOP/s: h2d + kernel + d2h."""
        return _gflops(self.problem.flops, self.host_to_host_ms)

    @property
    def max_rel_err(self) -> float:
        return self.verdict.max_rel_err

    @property
    def err_bound(self) -> float:
        """The componentwise error that verification decides on (``mmsuite.verify``)."""
        return self.verdict.err_bound

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    @property
    def noisy(self) -> bool:
        """The kernel time's noise stayed above the sampling's target."""
        return self.sampled.noisy if self.sampled is not None else False

    def to_record(self) -> dict:
        """A JSON-ready record (no output array)."""
        record = {
            "kernel": self.kernel.id, "backend": self.kernel.backend, "rung": self.kernel.rung,
            "parent": self.kernel.parent, "adds": self.kernel.adds, "origin": self.kernel.origin,
            "precision": self.kernel.precision,
            "problem": self.problem.to_dict(), "flops": self.problem.flops,
            "status": "ok" if self.ok else "failed", "reason": self.verdict.reason,
            "h2d_ms": self.h2d_ms.to_dict(), "kernel_ms": self.kernel_ms.to_dict(),
            "d2h_ms": self.d2h_ms.to_dict(), "host_to_host_ms": self.host_to_host_ms,
            "gflops": self.gflops, "host_gflops": self.host_gflops,
            "max_rel_err": self.max_rel_err, "err_bound": self.err_bound,
            "tolerance": self.verdict.tolerance,
            "info": self.info, "noisy": self.noisy, "l2": self.l2, "load_avg": self.load_avg,
            "host_load": self.host_load, "code": self.code, "device": self.info.get("device"),
        }
        throttled = cuda_timing.throttled(self.info.get("gpu"))
        if throttled is not None:  # a GPU row NVML could read
            record["throttled"] = throttled
            # A throttled clock makes a slow kernel of a fast one: marked like a noisy row.
            record["noisy"] = record["noisy"] or bool(throttled)
        if self.energy is not None:
            record["energy"] = self.energy.to_dict()
        if self.library is not None:
            record.update(ref_library=self.library.library,
                          ref_max_rel_err=self.library.max_rel_err,
                          ref_err_bound=self.library.err_bound, err_vs_ref=self.err_vs_ref)
        if self.sampled is not None:
            record["sampling"] = self.sampled.record()
        if self.reference_ms is not None:
            record["reference_ms"] = self.reference_ms.to_dict()
            record["reference_noisy"] = (self.sampled is not None
                                         and self.sampled.reference_noisy)
        if self.transfers is not None:
            record["transfers"] = self.transfers
        return record


def _gflops(flops: int, ms: float) -> float:
    return flops / (ms * 1e6) if ms > 0 else float("nan")


def _partner(kernel: Kernel, options: RunOptions) -> Kernel | None:
    """The reference library a host backend's rung alternates with, when it can run."""
    backend = get_backend(kernel.backend, options)
    if kernel.reference or not backend.interleaves_reference:
        return None
    ref = catalogue.reference_of(kernel.backend)
    if ref is None or unavailable_reason(ref, options):
        return None
    return ref


def run(kernel_id: str, problem: Problem, repeats: int | None = None,
        warmup: int = DEFAULT_WARMUP, options: RunOptions | None = None,
        inputs: tuple[np.ndarray, ...] | None = None,
        reference: verify.Reference | None = None, sampling: Sampling | None = None,
        library: LibraryError | None = None) -> Measurement:
    """Run, time and verify one kernel.

    ``repeats`` asks for exactly that many samples (``Sampling.fixed``);
    ``sampling`` gives a stopping rule instead; with neither, NVBench's rule
    (``DEFAULT_SAMPLING``) applies. ``warmup`` untimed launches come first.

    Raises KeyError for an unknown id (naming close matches) and
    KernelUnavailable, carrying the reason, for a kernel that cannot run here.
    A sweep may pass ``inputs`` (``problem.inputs()``) and their float64
    ``reference`` so that many kernels share them, and the reference library's
    ``library`` error on them (``library_error``); a reference alone is refused.
    """
    kernel = catalogue.get(kernel_id)
    if repeats is not None and sampling is not None:
        raise ValueError("give repeats or sampling, not both")
    if repeats is not None:
        sampling = Sampling.fixed(repeats)
    sampling = sampling or DEFAULT_SAMPLING
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if reference is not None and inputs is None:
        raise ValueError("a precomputed reference needs the inputs it was computed from")
    options = options or RunOptions()
    backend = _runnable_backend(kernel, options)
    if inputs is None:
        inputs = problem.inputs()
    call = plan_call(problem, inputs, kernel.layout)
    load_before, window = _load_avg(), LoadWindow.start()
    parts = _run_session(backend, kernel, problem, inputs, call, sampling, warmup, options)
    load_avg, host_load = {"before": load_before, "after": _load_avg()}, window.finish()
    if reference is None:
        reference = reference_for(problem, inputs, options, kernel.backend)
    output, verdict = _checked(parts.pop("output"), problem, inputs, options, kernel,
                               reference)
    if library is None:
        library = library_error(problem, inputs, reference, options, kernel.backend)
    code = code_identity(BACKENDS[kernel.backend].code, kernel.source, kernel.reference,
                         plugin_kernel_hash(kernel, backend.build_flags(kernel))
                         if kernel.plugin else None,
                         dispatch=parts["info"].get("dispatch"))
    return Measurement(kernel, problem, output, verdict=verdict, l2=options.l2,
                       load_avg=load_avg, host_load=host_load, code=code, library=library,
                       **parts)


def _runnable_backend(kernel: Kernel, options: RunOptions) -> Backend:
    """The kernel's backend, or KernelUnavailable carrying why the kernel cannot run here."""
    reason = unavailable_reason(kernel, options)
    if reason:
        raise KernelUnavailable(reason)  # the row names the kernel and its status
    return get_backend(kernel.backend, options)


def _checked(storage: np.ndarray, problem: Problem, inputs: tuple[np.ndarray, ...],
             options: RunOptions, kernel: Kernel,
             reference: verify.Reference | None = None) -> tuple[np.ndarray, verify.Verdict]:
    """C in the problem's layout, and its verdict against the float64 reference, held to
    the tolerance of the kernel's precision class."""
    output = from_storage(np.asarray(storage, dtype=np.float32), problem)
    if reference is None:
        reference = reference_for(problem, inputs, options, kernel.backend)
    return output, verify.check(output, reference, problem.k, kernel.precision)


class VerificationFailed(RuntimeError):
    """A kernel's output disagrees with the float64 reference; the message says how."""


class KernelSampler:
    """One kernel prepared on one problem and verified once, giving one sample per call.

    For harnesses that run their own loop and statistics (the asv suites): the
    samples are the engine's own (C reset outside the timer, the device's timer,
    back-to-back launches for short kernels), without its stopping rule, transfer
    phase or interleaved reference. Raises like ``run``, and VerificationFailed
    when the output is wrong, so that no time is ever taken of a wrong kernel.
    """

    def __init__(self, kernel_id: str, problem: Problem, options: RunOptions | None = None,
                 warmup: int = DEFAULT_WARMUP) -> None:
        kernel = catalogue.get(kernel_id)
        options = options or RunOptions()
        backend = _runnable_backend(kernel, options)
        inputs = problem.inputs()
        self.session = backend.prepare(kernel, plan_call(problem, inputs, kernel.layout))
        self._cold = options.l2 == "cold"
        self._transferred = False
        try:
            self.session.reset_c()
            started = time.perf_counter()
            self.session.launch()
            self.session.synchronize()
            # Wall time of the checked launch, a first guess of a sample's cost (compiles
            # and uploads happened in prepare), for callers that budget their samples.
            self.launch_seconds = time.perf_counter() - started
            _, verdict = _checked(self.session.output(), problem, inputs, options, kernel)
            self.verdict = verdict  # how far from float64, for a harness's record
            if not verdict.ok:
                raise VerificationFailed(
                    f"{kernel.id} failed verification on {problem.shape_label}: {verdict.reason}")
            self.timer = self.session.timer()
            if self.launch_seconds >= LONG_LAUNCH_S:
                # The checked launch warmed everything a sample needs, and no timer's fixed
                # cost shows beside it: more launches here would only cost (5 s each for a
                # naive OpenMP rung at 1024^3 on a busy 2-core machine). The reference's
                # BLAS threads are left to go idle (below).
                time.sleep(HOST_THREADS_SETTLE_S)
                self.launches_per_sample = 1
            else:
                # After the reference: OpenBLAS's threads, which computed it on the host,
                # spin for about 0.1 s and halved PoCL's speed in the first samples on two
                # cores.
                _warm_up(self.session, max(warmup, 1), time.perf_counter,
                         floor_s=HOST_THREADS_SETTLE_S)
                self.launches_per_sample = _launches_per_sample(self.session, self.timer,
                                                                self._cold)
        except BaseException:
            self.session.close()
            raise

    @property
    def info(self) -> dict:
        """The session's facts (device, grid, ...), as a result record holds them."""
        return self.session.info

    def kernel_ms(self) -> float:
        """One sample of kernel-only time, ms."""
        return _sample(self.session, self.timer, self._cold, self.launches_per_sample)

    def transfer_ms(self, pinned: bool = False) -> tuple[float, float]:
        """One h2d of A and B and one d2h of C, ms (zeros where the device has none)."""
        if not self._transferred:  # untimed first transfer: staging buffers, page faults
            self.session.transfer_ms(pinned)
            self._transferred = True
        return self.session.transfer_ms(pinned)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> KernelSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _run_session(backend: Backend, kernel: Kernel, problem: Problem,
                 inputs: tuple[np.ndarray, ...], call: GemmCall, sampling: Sampling,
                 warmup: int, options: RunOptions) -> dict:
    partner_kernel = _partner(kernel, options)
    h2d: list = []
    d2h: list = []
    transfers: dict[str, dict] | None = None
    with backend.prepare(kernel, call) as session:
        sampling = sampling.for_device(_device_kind(kernel, session))
        if session.has_transfers:
            nbytes_in, nbytes_out = 4 * (call.a.size + call.b.size), 4 * call.c_size
            transfers = {}
            for pinned in (False, True):
                up, down = _transfers(session, sampling, pinned)
                transfers["pinned" if pinned else "pageable"] = _rates(
                    nbytes_in, nbytes_out, up, down)
                if pinned == options.pinned:
                    h2d, d2h = up, down
        if partner_kernel is not None:
            partner_call = plan_call(problem, inputs, partner_kernel.layout)
            with backend.prepare(partner_kernel, partner_call) as partner:
                sampled = sample_session(session, sampling, warmup, options.l2, partner)
        else:
            sampled = sample_session(session, sampling, warmup, options.l2)
        session.synchronize()
        output = session.output()
        info = dict(session.info)
        spent = _energy(session, statistics.median(sampled.kernel_ms), problem.flops) \
            if options.energy else None
    return {"output": output, "h2d_ms": PhaseStats.of(h2d), "d2h_ms": PhaseStats.of(d2h),
            "kernel_ms": PhaseStats.of(sampled.kernel_ms), "info": info, "sampled": sampled,
            "reference_ms": PhaseStats.of(sampled.reference_ms) if partner_kernel else None,
            "transfers": transfers, "energy": spent}


# Power falls back to idle over a few hundred milliseconds after work stops.
ENERGY_SETTLE_S = 0.5


def _energy(session: Session, kernel_ms: float, flops: int) -> energy.Energy:
    """Energy per launch over a window of back-to-back launches (after C was copied out:
    the window overwrites it), idle power measured once per device and taken off."""
    read = session.energy_reader()
    if isinstance(read, str):
        return energy.Energy(reason=read)
    device = str(session.info.get("device") or session.kernel.backend)
    if device not in energy._IDLE_W:
        time.sleep(ENERGY_SETTLE_S)
    idle = energy.idle_watts(device, read)
    return energy.measure(session.launch, session.synchronize, read, kernel_ms / 1e3, flops,
                          idle)


def reference_for(problem: Problem, inputs: tuple[np.ndarray, ...],
                  options: RunOptions | None = None,
                  backend: str | None = None) -> verify.Reference:
    """The float64 reference and its error scale, on the backend's device when it offers
    one, else on the host."""
    if backend is not None:
        ref = get_backend(backend, options or RunOptions()).reference(problem, inputs)
        if ref is not None:
            return ref
    return verify.reference(problem, inputs)

