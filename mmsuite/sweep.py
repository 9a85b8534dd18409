"""The sweep runner: many kernels over many problems, one row per pair, never stopping early.

A kernel that is unavailable, fails verification or raises becomes a row with
its reason; the sweep goes on. The float64 reference is computed once per
problem and shared by every kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from .backends import RunOptions, unavailable_reason
from .catalogue import Kernel
from .measure import Measurement, reference_for, run
from .problem import Problem


@dataclass
class Row:
    """One kernel on one problem: status is ok, failed, unavailable or error."""

    kernel: Kernel
    problem: Problem
    status: str
    reason: str = ""
    measurement: Measurement | None = None

    def to_record(self) -> dict:
        if self.measurement is not None:
            return self.measurement.to_record()
        return {"kernel": self.kernel.id, "backend": self.kernel.backend,
                "rung": self.kernel.rung, "parent": self.kernel.parent, "adds": self.kernel.adds,
                "seed": self.kernel.seed, "problem": self.problem.to_dict(),
                "flops": self.problem.flops, "status": self.status, "reason": self.reason}


def _reference_backend(kernels: list[Kernel], options: RunOptions) -> str | None:
    """Compute the float64 reference on a GPU when the sweep uses one that is available."""
    for kernel in kernels:
        if kernel.backend == "cuda" and not unavailable_reason(kernel, options):
            return "cuda"
    return None


def sweep(kernels: Iterable[Kernel], problems: Iterable[Problem], *, repeats: int, warmup: int,
          options: RunOptions, on_row: Callable[[Row], None] | None = None) -> list[Row]:
    """Run every kernel on every problem; ``on_row`` is called after each row (for progress)."""
    kernels, rows = list(kernels), []
    ref_backend = _reference_backend(kernels, options)
    for problem in problems:
        inputs: tuple[np.ndarray, ...] | None = None
        reference: np.ndarray | None = None
        for kernel in kernels:
            reason = unavailable_reason(kernel, options)
            if reason:
                row = Row(kernel, problem, "unavailable", reason)
            else:
                try:
                    if inputs is None:
                        inputs = problem.inputs()
                        reference = reference_for(problem, inputs, options, ref_backend)
                    m = run(kernel.id, problem, repeats=repeats, warmup=warmup, options=options,
                            inputs=inputs, reference=reference)
                    row = Row(kernel, problem, "ok" if m.ok else "failed", m.verdict.reason, m)
                except Exception as exc:  # a broken kernel must not end the sweep
                    row = Row(kernel, problem, "error", f"{type(exc).__name__}: {exc}".strip())
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows
