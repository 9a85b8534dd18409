"""Verification: every output is checked against a float64 reference.

Pass means: no NaN or Inf anywhere (C is poisoned with NaN before a run when
beta == 0, so an unwritten element fails), and for every matrix of the batch a
relative Frobenius error within a tolerance that grows with K, as fp32
accumulation error does. TF32 (about 3e-4) fails that at any K a benchmark uses:
a kernel of the TF32 precision class (``mmsuite.catalogue.TF32``) is held to a
tolerance of its own, a few units of TF32's rounding (2^-11) above the FP32
one. FP32-accurate tensor-core kernels are held to the FP32 tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .problem import Problem

FP32_EPS = float(np.finfo(np.float32).eps)
#: TF32's unit roundoff: 10 mantissa bits, rounded to nearest.
TF32_UNIT = 2.0**-11
#: Rounding both inputs to TF32 costs about 2 units per product; 8 units leave room for
#: inputs truncated rather than rounded and for wide dynamic range.
TF32_UNITS = 8.0


def tolerance(k: int, precision: str = "fp32") -> float:
    """Relative Frobenius tolerance for a product with inner size k in a precision class
    (``fp32`` and ``fp32-accurate``: the FP32 tolerance; ``tf32``: the TF32 one)."""
    fp32 = 1e-5 + 16.0 * FP32_EPS * math.sqrt(k)
    if precision in ("fp32", "fp32-accurate"):
        return fp32
    if precision == "tf32":
        return fp32 + TF32_UNITS * TF32_UNIT
    raise ValueError(f"unknown precision class {precision!r}")


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


def relative_error(output: np.ndarray, ref: np.ndarray) -> float:
    """The worst matrix's relative Frobenius error (inf where the output is not finite)."""
    if not np.isfinite(output).all():
        return math.inf
    out3 = output.reshape(-1, *ref.shape[-2:]).astype(np.float64)
    ref3 = ref.reshape(-1, *ref.shape[-2:])
    diff = np.linalg.norm((out3 - ref3).reshape(len(ref3), -1), axis=1)
    scale = np.linalg.norm(ref3.reshape(len(ref3), -1), axis=1)
    return float((diff / np.maximum(scale, np.finfo(np.float64).tiny)).max())


def check(output: np.ndarray, ref: np.ndarray, k: int, precision: str = "fp32") -> Verdict:
    """Compare an output with its float64 reference; the worst matrix of the batch decides."""
    tol = tolerance(k, precision)
    if output.shape != ref.shape:
        return Verdict(math.inf, tol, False, f"shape {output.shape} != expected {ref.shape}")
    bad = ~np.isfinite(output)
    if bad.any():
        count = int(bad.sum())
        return Verdict(math.inf, tol, False, f"{count} of {output.size} elements are NaN/Inf "
                       "(unwritten or overflowed)")
    worst = relative_error(output, ref)
    ok = worst <= tol
    reason = "" if ok else f"relative error {worst:.2e} exceeds tolerance {tol:.2e}"
    return Verdict(worst, tol, ok, reason)
