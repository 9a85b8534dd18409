"""Measurement: run one kernel on one problem, time its phases, verify its output."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np

from . import catalogue, verify
from .backends import KernelUnavailable, RunOptions, get_backend, unavailable_reason
from .catalogue import Kernel
from .layout import from_storage, plan_call
from .problem import Problem

DEFAULT_REPEATS = 5
DEFAULT_WARMUP = 1


@dataclass(frozen=True)
class PhaseStats:
    """Timing of one phase (h2d, kernel or d2h) over the timed repeats, in ms."""

    median: float
    min: float
    max: float
    samples: tuple[float, ...] = ()

    @classmethod
    def of(cls, samples: list[float]) -> PhaseStats:
        if not samples:
            return cls(0.0, 0.0, 0.0, ())
        return cls(statistics.median(samples), min(samples), max(samples), tuple(samples))

    @property
    def spread(self) -> float:
        """(max - min) / median: differences smaller than this are noise."""
        return (self.max - self.min) / self.median if self.median > 0 else 0.0

    def to_dict(self) -> dict:
        return {"median": self.median, "min": self.min, "max": self.max,
                "spread": self.spread, "samples": list(self.samples)}


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
    def ok(self) -> bool:
        return self.verdict.ok

    def to_record(self) -> dict:
        """A JSON-ready record (no output array)."""
        return {
            "kernel": self.kernel.id, "backend": self.kernel.backend, "rung": self.kernel.rung,
            "parent": self.kernel.parent, "adds": self.kernel.adds, "seed": self.kernel.seed,
            "problem": self.problem.to_dict(), "flops": self.problem.flops,
            "status": "ok" if self.ok else "failed", "reason": self.verdict.reason,
            "h2d_ms": self.h2d_ms.to_dict(), "kernel_ms": self.kernel_ms.to_dict(),
            "d2h_ms": self.d2h_ms.to_dict(), "host_to_host_ms": self.host_to_host_ms,
            "gflops": self.gflops, "host_gflops": self.host_gflops,
            "max_rel_err": self.max_rel_err, "tolerance": self.verdict.tolerance,
            "info": self.info,
        }


def _gflops(flops: int, ms: float) -> float:
    return flops / (ms * 1e6) if ms > 0 else float("nan")


def run(kernel_id: str, problem: Problem, repeats: int = DEFAULT_REPEATS,
        warmup: int = DEFAULT_WARMUP, options: RunOptions | None = None,
        inputs: tuple[np.ndarray, ...] | None = None,
        reference: np.ndarray | None = None) -> Measurement:
    """Run, time and verify one kernel.

    Raises KeyError for an unknown id (naming close matches) and
    KernelUnavailable, carrying the reason, for a kernel that cannot run here.
    A sweep may pass ``inputs`` (``problem.inputs()``) and their float64
    ``reference`` so that many kernels share them; a reference alone is refused.
    """
    kernel = catalogue.get(kernel_id)
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if reference is not None and inputs is None:
        raise ValueError("a precomputed reference needs the inputs it was computed from")
    options = options or RunOptions()
    reason = unavailable_reason(kernel, options)
    if reason:
        raise KernelUnavailable(f"{kernel.id} is unavailable: {reason}")
    backend = get_backend(kernel.backend, options)
    if inputs is None:
        inputs = problem.inputs()
    call = plan_call(problem, inputs, kernel.layout)
    execution = backend.execute(kernel, call, repeats, warmup)
    output = from_storage(np.asarray(execution.output, dtype=np.float32), problem)
    if reference is None:
        reference = reference_for(problem, inputs, options, kernel.backend)
    verdict = verify.check(output, reference, problem.k)
    return Measurement(kernel, problem, output, PhaseStats.of(execution.h2d_ms),
                       PhaseStats.of(execution.kernel_ms), PhaseStats.of(execution.d2h_ms),
                       verdict, execution.info)


def reference_for(problem: Problem, inputs: tuple[np.ndarray, ...],
                  options: RunOptions | None = None, backend: str | None = None) -> np.ndarray:
    """The float64 reference, on the backend's device when it offers one, else on the host."""
    if backend is not None:
        ref = get_backend(backend, options or RunOptions()).reference(problem, inputs)
        if ref is not None:
            return ref
    return verify.reference(problem, inputs)
