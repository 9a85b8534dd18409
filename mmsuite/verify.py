"""Verification: every output is checked against a float64 reference.

Pass means: no NaN or Inf anywhere (C is poisoned with NaN before a run when
beta == 0, so an unwritten element fails), and for every matrix of the batch a
relative Frobenius error within a tolerance that grows with K, as fp32
accumulation error does. TF32 (about 3e-4) fails at any K a benchmark uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .problem import Problem

FP32_EPS = float(np.finfo(np.float32).eps)


def tolerance(k: int) -> float:
    """Relative Frobenius tolerance for an fp32 product with inner size k."""
    return 1e-5 + 16.0 * FP32_EPS * math.sqrt(k)


def reference(problem: Problem, inputs: tuple[np.ndarray, ...]) -> np.ndarray:
    """alpha·A·B + beta·C0 in float64, with C's logical shape."""
    a, b, c0 = (x.astype(np.float64) for x in inputs)
    ref = problem.alpha * np.matmul(a, b)
    if problem.beta != 0.0:
        ref += problem.beta * c0
    return ref


@dataclass(frozen=True)
class Verdict:
    max_rel_err: float
    tolerance: float
    ok: bool
    reason: str = ""


def check(output: np.ndarray, ref: np.ndarray, k: int) -> Verdict:
    """Compare an output with its float64 reference; the worst matrix of the batch decides."""
    tol = tolerance(k)
    if output.shape != ref.shape:
        return Verdict(math.inf, tol, False, f"shape {output.shape} != expected {ref.shape}")
    bad = ~np.isfinite(output)
    if bad.any():
        count = int(bad.sum())
        return Verdict(math.inf, tol, False, f"{count} of {output.size} elements are NaN/Inf "
                       "(unwritten or overflowed)")
    out3 = output.reshape(-1, *ref.shape[-2:]).astype(np.float64)
    ref3 = ref.reshape(-1, *ref.shape[-2:])
    diff = np.linalg.norm((out3 - ref3).reshape(len(ref3), -1), axis=1)
    scale = np.linalg.norm(ref3.reshape(len(ref3), -1), axis=1)
    errors = diff / np.maximum(scale, np.finfo(np.float64).tiny)
    worst = float(errors.max())
    ok = worst <= tol
    reason = "" if ok else f"relative error {worst:.2e} exceeds tolerance {tol:.2e}"
    return Verdict(worst, tol, ok, reason)
