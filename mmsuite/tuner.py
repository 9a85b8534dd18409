"""Measuring candidate plans on the GPU: ``mmsuite tune``'s search, the measurements the cost
model is fitted to (``--fit-model``), and the judgement of the dispatcher on fresh shapes.

Every candidate is timed by the suite's own timer (the spin kernel ahead of the
events, the whole plan per sample: main kernel and reduction or fix-up) on one
set of device buffers per problem (:class:`PlanTimer`), after its output was
checked against a float64 reference computed once on the GPU. A candidate is
forced by argument: the planner is called with it as its override.

``tune`` (:func:`tune_problem`) for one problem:

1. the model ranks every candidate of the manifest; the best ``limit`` of them,
   the model's own choice first, are verified and timed once each;
2. the ``confirm`` fastest and the model's choice are re-timed interleaved, in
   rounds (one sample of each per round, in turn), so that drifts of the clock
   or of a neighbour hit all alike;
3. the fastest becomes the problem's entry in the device's tuning file only when
   it beats the model's choice beyond the noise (:func:`beats`): the median of
   its per-round ratios to the model's choice is below 1 - ``margin`` and it was
   faster in at least 80% of the rounds. Otherwise the entry is removed, and the
   model decides the problem.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from . import catalogue
from .backends import RunOptions, get_backend
from .backends.cuda import CudaBackend, launch_of
from .cuda_dispatch import model
from .cuda_dispatch.costs import STARTING, Parameters
from .cuda_dispatch.families.splitk import SPLITK
from .cuda_dispatch.family import Candidate
from .cuda_dispatch.planners import Decision, decide, plan_of
from .cuda_dispatch.tuning_file import (
    entry_of,
    model_path,
    shape_key,
    store_model,
    store_tuning,
    tuning_path,
)
from .cuda_dispatch.variants import candidates
from .launch import CudaPlan, DeviceFacts
from .layout import plan_call
from .measure import Sampling, sample_session
from .problem import Problem
from .verify import FP32_TINY, tolerance

if TYPE_CHECKING:
    from .backends.cuda_session import CudaSession

DEFAULT_CANDIDATES = 16
DEFAULT_CONFIRM = 3
DEFAULT_ROUNDS = 15
DEFAULT_MARGIN = 0.005  # the least gain an entry must show beyond the noise
TUNED_KERNEL = "cuda.22_adaptive"
#: Sessions a timer keeps prepared: the model's choice and the finalists re-timed in rounds.
KEPT_SESSIONS = DEFAULT_CONFIRM + 1


class TuneError(ValueError):
    """Bad input to ``mmsuite tune``: reported in one line, exit status 2."""


def _cuda_backend(options: RunOptions | None = None) -> CudaBackend:
    """The registry's CUDA adapter, whose sessions the search prepares with its plans."""
    backend = get_backend(CudaBackend.name, options)
    if not isinstance(backend, CudaBackend):
        raise TypeError(f"the cuda backend is a {type(backend).__name__}, not a CudaBackend")
    return backend


class PlanTimer:
    """One problem's inputs on the GPU, on which any candidate plan is verified and timed:
    each plan in a session of rung 22 that the adapter prepares with it (``plan=``).

    ``sampling`` is the suite's stopping rule for :meth:`time`; C is reset before every
    sample, as the engine does.
    """

    def __init__(self, problem: Problem, options: RunOptions | None = None,
                 backend: CudaBackend | None = None) -> None:
        self.problem = problem
        self.options = options or RunOptions()
        self.kernel = catalogue.get(TUNED_KERNEL)
        self.backend = backend or _cuda_backend(self.options)
        reason = self.backend.probe()
        if reason:
            raise TuneError(f"{TUNED_KERNEL} cannot run here: {reason}")
        self.inputs = problem.inputs()
        self.call = plan_call(problem, self.inputs, self.kernel.layout)
        self.device: DeviceFacts = self.backend.device_facts
        self._sessions: dict[tuple, CudaSession] = {}  # by plan, the last used last
        self.keep = KEPT_SESSIONS
        self.use_plan(self.backend.plan(self.kernel, self.call))
        self._reference: Any = None  # the float64 product and its error scale, once computed
        self._cublas: CudaSession | None = None

    @property
    def dims(self) -> tuple[int, int, int, int]:
        """The column-major sizes the rungs see (row-major problems swap M and N)."""
        return self.call.m, self.call.n, self.call.k, self.call.batch

    # ----------------------------------------------------------- plans
    def decision(self, override: Candidate[Any] | None = None, **choice: Any) -> Decision:
        m, n, k, batch = self.dims
        return decide(m, n, k, batch, self.device, override, **choice)

    def select(self, decision: Decision) -> None:
        """Launch ``decision``'s plan from now on (unchecked: :meth:`use` checks it)."""
        m, n, k, batch = self.dims
        self.use_plan(plan_of(decision, m, n, k, batch, self.device))

    def use(self, decision: Decision) -> float:
        """Launch ``decision``'s plan from now on; returns its componentwise error against
        float64 (``mmsuite.verify``; RuntimeError when it fails verification)."""
        self.select(decision)
        return self.check(decision.candidate.label)

    def use_plan(self, plan: CudaPlan) -> None:
        """Launch ``plan`` from now on, in a session prepared with it; the last
        ``keep`` stay prepared (rounds of re-timing switch among them)."""
        key = (plan.steps, plan.workspace)
        session = self._sessions.pop(key, None)
        if session is None:
            session = self.backend.prepare(self.kernel, self.call, plan=plan)
        else:  # the same launches, decided anew (forced, say): the record says how
            session.info.update(dict(plan.info))
        self._sessions[key] = session
        while len(self._sessions) > self.keep:
            self._sessions.pop(next(iter(self._sessions))).close()
        self.session = session

    def check(self, label: str) -> float:
        """Run the current plan once and compare C with the float64 reference on the GPU,
        componentwise, as ``mmsuite.verify`` does."""
        import cupy as cp  # the adapter has imported it: its sessions hold CuPy arrays

        session = self.session
        session.reset_c()
        session.launch()
        session.synchronize()
        m, n, k, batch = self.dims
        if self._reference is None:  # every session holds the same inputs
            with session.stream:
                a = session.a.astype(cp.float64).reshape(batch, k, m).transpose(0, 2, 1)
                b = session.b.astype(cp.float64).reshape(batch, n, k).transpose(0, 2, 1)
                ref = cp.matmul(a, b) * self.call.alpha
                scale = cp.matmul(cp.abs(a), cp.abs(b)) * abs(self.call.alpha)
                if session.c0 is not None:  # beta != 0
                    c0 = session.c0.astype(cp.float64).reshape(batch, n, m).transpose(0, 2, 1)
                    ref += self.call.beta * c0
                    scale += abs(self.call.beta) * cp.abs(c0)
                    del c0
                self._reference = (ref, scale + FP32_TINY)
                del a, b, scale
        with session.stream:
            c = session.c.reshape(batch, n, m).transpose(0, 2, 1).astype(cp.float64)
            ref, scale = self._reference
            worst = float(cp.nan_to_num(cp.abs(c - ref) / scale, nan=cp.inf).max())
            del c
        if not worst <= tolerance(k):
            raise RuntimeError(f"{label} failed verification on {self.problem.shape_label}: "
                               f"componentwise error {worst:.3g} (tolerance "
                               f"{tolerance(k):.3g})")
        return worst

    def time(self, sampling: Sampling) -> list[float]:
        """Samples (ms) of the current plan by the suite's timer and stopping rule."""
        return sample_session(self.session, sampling).kernel_ms

    def sample(self) -> float:
        """One sample (ms) of the current plan, after one untimed launch."""
        return sample_session(self.session, Sampling.fixed(1), warmup=1).kernel_ms[0]

    def cublas(self, sampling: Sampling) -> list[float]:
        """Samples (ms) of cuBLAS on the same problem (its own, row-major buffers)."""
        if self._cublas is None:
            kernel = catalogue.get("cuda.cublas")
            self._cublas = self.backend.prepare(kernel,
                                                plan_call(self.problem, self.inputs, "row"))
        return sample_session(self._cublas, sampling).kernel_ms

    def close(self) -> None:
        self._reference = None
        if self._cublas is not None:
            self._cublas.close()
        while self._sessions:
            self._sessions.popitem()[1].close()

    def __enter__(self) -> PlanTimer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def interleaved(timer: PlanTimer, decisions: Sequence[Decision],
                rounds: int = DEFAULT_ROUNDS) -> list[list[float]]:
    """Samples (ms) of each decision's plan, one per round in turn, the order rotating."""
    samples: list[list[float]] = [[] for _ in decisions]
    timer.keep = max(timer.keep, len(decisions))  # each plan prepared once, not per round
    for r in range(rounds):
        for i in range(len(decisions)):
            index = (i + r) % len(decisions)
            timer.select(decisions[index])
            samples[index].append(timer.sample())
    return samples


def beats(samples: list[float], baseline: list[float],
          margin: float = DEFAULT_MARGIN) -> tuple[bool, float, float]:
    """(wins, median ratio, how far its 80th percentile lies above it) of paired per-round
    samples against a baseline. A win needs a median ratio below 1 - ``margin`` and the
    candidate faster in at least 80% of the rounds (the 80th percentile of the ratios
    below 1): a gain that the rounds' noise could flip is no gain."""
    ratios = np.array(samples) / np.array(baseline)
    ratio = float(np.median(ratios))
    upper = float(np.quantile(ratios, 0.8))
    return bool(ratio < 1 - margin and upper < 1.0), ratio, upper - ratio


@dataclass
class CandidateOutcome:
    """One candidate's fate in a search."""

    decision: Decision
    ms: float | None = None
    skipped: str = ""


def tune_problem(problem: Problem, limit: int = DEFAULT_CANDIDATES,
                 confirm: int = DEFAULT_CONFIRM, progress: Callable[[str], None] = print,
                 sampling=None, rounds: int = DEFAULT_ROUNDS,
                 margin: float = DEFAULT_MARGIN) -> dict:
    """Search, re-time and store one problem's entry (module docstring); returns
    {'key', 'entry' (None when the model's choice stays), 'path', 'outcomes', ...}."""
    sampling = sampling or Sampling(min_samples=5, min_seconds=0.05, max_seconds=0.5,
                                    name="tune")
    started = time.perf_counter()
    with PlanTimer(problem) as timer:
        m, n, k, batch = timer.dims
        key = shape_key(m, n, k, batch)
        chosen = timer.decision(use_tuning=False)
        params = model.parameters_for(timer.device.name)
        ranked = model.ranked(candidates(m, n, k, batch, timer.device), m, n, k, batch,
                              timer.device, params)
        picks = [c for _, c in ranked if c != chosen.candidate][:max(0, limit - 1)]
        outcomes = [CandidateOutcome(chosen)] + [CandidateOutcome(timer.decision(c)) for c in picks]
        progress(f"{len(outcomes)} candidates for the kernel's {m}x{n}x{k} (batch {batch}); "
                 f"the model's choice: {chosen.candidate.label}")
        for outcome in outcomes:
            label = outcome.decision.candidate.label
            try:
                timer.use(outcome.decision)
                outcome.ms = statistics.median(timer.time(sampling))
            except RuntimeError as exc:  # failed to launch or verify: skipped, with why
                outcome.skipped = str(exc)
                progress(f"skipped {label}: {exc}")
                continue
            progress(f"{label}: {outcome.ms:.4f} ms")
        timed = sorted((o for o in outcomes if o.ms is not None),
                       key=lambda o: o.ms if o.ms is not None else math.inf)
        if not timed:
            raise RuntimeError(f"every candidate for {key} was skipped: "
                               + "; ".join(o.skipped for o in outcomes))
        if outcomes[0].ms is None:
            raise RuntimeError(f"the model's choice for {key} failed: {outcomes[0].skipped}")
        finalists = [o.decision for o in timed[:max(1, confirm)] if o is not outcomes[0]]
        final = interleaved(timer, [chosen] + finalists, rounds)
    medians = [statistics.median(s) for s in final]
    best = min(range(1, len(final)), key=lambda i: medians[i], default=0)
    wins, ratio, spread = (beats(final[best], final[0], margin) if best else (False, 1.0, 0.0))
    flops = 2.0 * m * n * k * batch
    model_record = {"config": chosen.candidate.config.name, "split": chosen.candidate.split,
                    "family": chosen.candidate.family, "ms": round(medians[0], 5)}
    entry = None
    if wins:
        winner = finalists[best - 1].candidate
        entry = entry_of(
            winner, confirmed_ms=round(medians[best], 5),
            confirmed_tflops=round(flops / medians[best] / 1e9, 2), model=model_record,
            ratio_to_model=round(ratio, 4), ratio_uncertainty=round(spread, 4), rounds=rounds,
            kernel=TUNED_KERNEL, candidates=len(outcomes),
            skipped={o.decision.candidate.label: o.skipped for o in outcomes if o.skipped},
            tuned_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            search_seconds=round(time.perf_counter() - started, 1))
    path = tuning_path(timer.device.name)
    store_tuning(path, timer.device.name, {key: entry})
    return {"key": key, "entry": entry, "path": str(path), "outcomes": outcomes,
            "model": model_record, "ratio": ratio, "uncertainty": spread,
            "best": (finalists[best - 1].candidate.label if best else
                     chosen.candidate.label),
            "best_ms": medians[best], "model_ms": medians[0]}


# ------------------------------------------------------- fitting the model
def log_uniform(rng: np.random.Generator, low: float, high: float) -> int:
    """A whole number drawn log-uniform in [low, high]: each factor of two as likely."""
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def sample_shapes(seed: int, count: int, batched: int = 0, max_flop_log2: float = 37.0,
                  largest: int = 16384) -> list[Problem]:
    """Seeded shapes: M, N, K log-uniform in [1, largest] with M N K <= 2^max_flop_log2
    (drawn again until they fit), then ``batched`` more with batch log-uniform in [2, 64]
    and M N K batch within the same bound; row-major."""
    rng = np.random.default_rng(seed)
    out: list[Problem] = []
    while len(out) < count + batched:
        m, n, k = (log_uniform(rng, 1, largest) for _ in range(3))
        batch = 1
        if len(out) >= count:
            batch = log_uniform(rng, 2, 64)
        if math.log2(m) + math.log2(n) + math.log2(k) + math.log2(batch) <= max_flop_log2:
            out.append(Problem(m, n, k, batch))
    return out


@dataclass
class ShapeTimings:
    """Every timed candidate of one problem, and the rungs' and cuBLAS's figures."""

    problem: Problem
    dims: tuple[int, int, int, int]
    timings: list[model.Timing] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    rungs_ms: dict[str, float] = field(default_factory=dict)


    def as_row(self) -> dict:
        """The timings as a calibration file's row: milliseconds, plans by variant key."""
        return {"timings": [{"key": t.candidate.variant.key, "split": t.candidate.split,
                             "ms": t.seconds * 1e3} for t in self.timings],
                "rungs_ms": dict(self.rungs_ms), "failed": sorted(self.skipped)}


def measure_candidates(problem: Problem, limit: int, sampling,
                       params: Parameters | None = None,
                       rungs: Sequence[str] = (), with_cublas: bool = False,
                       progress: Callable[[str], None] = print) -> ShapeTimings:
    """The best ``limit`` split-K candidates of the model (``params``) and as many stream-K
    and GEMV ones among its best 3 ``limit``, each verified and timed; then each of
    ``rungs`` with its own plan, and cuBLAS."""
    with PlanTimer(problem) as timer:
        m, n, k, batch = timer.dims
        params = params or model.parameters_for(timer.device.name)
        ranked = [c for _, c in model.ranked(candidates(m, n, k, batch, timer.device),
                                             m, n, k, batch, timer.device, params)]
        splitk = [c for c in ranked if c.family == SPLITK.name][:limit]
        others = [c for c in ranked[:3 * limit] if c.family != SPLITK.name][:limit]
        return time_plans(timer, splitk + others, sampling, rungs, with_cublas, progress)


def time_plans(timer: PlanTimer, plans: Sequence[Candidate[Any]], sampling,
               rungs: Sequence[str] = (), with_cublas: bool = False,
               progress: Callable[[str], None] = print) -> ShapeTimings:
    """Each of ``plans`` verified and timed on ``timer``'s problem (one that fails is
    skipped, and said); then each of ``rungs`` with its own plan, and cuBLAS."""
    m, n, k, batch = timer.dims
    out = ShapeTimings(timer.problem, timer.dims)
    for candidate in plans:
        try:
            timer.use(timer.decision(candidate))
            ms = statistics.median(timer.time(sampling))
        except RuntimeError as exc:
            out.skipped[candidate.label] = str(exc)
            progress(f"  skipped {candidate.label}: {exc}")
            continue
        out.timings.append(model.Timing(m, n, k, batch, candidate, ms * 1e-3))
    for kernel_id in rungs:
        launch = launch_of(catalogue.get(kernel_id))
        if launch.planner is None:
            timer.use_plan(launch.plan(timer.call, "col"))
        elif callable(launch.planner):
            timer.use_plan(launch.planner(timer.call, timer.device, None))
        else:
            raise ValueError(f"{kernel_id} is planned by {launch.planner}, "
                             "which the search does not call")
        timer.check(kernel_id)
        out.rungs_ms[kernel_id] = statistics.median(timer.time(sampling))
    if with_cublas:
        out.rungs_ms["cuda.cublas"] = statistics.median(timer.cublas(sampling))
    return out


def fit_and_score(fitting: Sequence[model.Timing], held_out: Sequence[model.Timing],
                  device: DeviceFacts) -> tuple[Parameters, dict]:
    """Parameters fitted on ``fitting`` and the ranking accuracy, before and after, on
    ``held_out``."""
    fitted = model.fit(fitting, device)
    report = {
        "fitting_timings": len(fitting), "held_out_timings": len(held_out),
        "log_error_fitting": {"start": model.log_error(fitting, device, STARTING),
                              "fitted": model.log_error(fitting, device, fitted)},
    }
    if held_out:
        report["held_out"] = {
            "start": model.ranking_accuracy(held_out, device, STARTING).to_dict(),
            "fitted": model.ranking_accuracy(held_out, device, fitted).to_dict(),
            "log_error_start": model.log_error(held_out, device, STARTING),
            "log_error_fitted": model.log_error(held_out, device, fitted)}
    return fitted, report


def timings_of(rows: Sequence[ShapeTimings]) -> list[model.Timing]:
    return [t for row in rows for t in row.timings]


def fit_model(shapes: int, seed: int, limit: int = 8,
              progress: Callable[[str], None] = print, sampling=None) -> dict:
    """``mmsuite tune --fit-model``: time the model's best candidates on ``shapes`` seeded
    shapes (one in five held back), fit, score the fit on the held-back ones, store the
    parameters in the user's model file for this GPU."""
    sampling = sampling or Sampling(min_samples=5, min_seconds=0.0, noise_target=0.01,
                                    max_seconds=0.3, name="fit")
    batched = max(1, shapes // 6)
    problems = sample_shapes(seed, shapes - batched, batched)
    measured: list[ShapeTimings] = []
    device = None
    for index, problem in enumerate(problems, 1):
        row = measure_candidates(problem, limit, sampling, STARTING,
                                 progress=lambda text: progress(f"  {text}"))
        measured.append(row)
        progress(f"[{index}/{len(problems)}] {problem.shape_label}: "
                 f"{len(row.timings)} candidates timed")
    if device is None:
        device = _cuda_backend().device_facts
    held = measured[::5]
    fitting = [row for i, row in enumerate(measured) if i % 5]
    params, report = fit_and_score(timings_of(fitting), timings_of(held), device)
    path = model_path(device.name)
    store_model(path, device.name, params.to_dict(), seed=seed, shapes=len(problems),
                fitted_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                report=report)
    return {"path": str(path), "report": report, "parameters": params}
