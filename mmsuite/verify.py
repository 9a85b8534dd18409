"""Verification: every output is checked against a float64 reference.

The error a kernel is held to is componentwise (Higham, *Accuracy and Stability of
Numerical Algorithms*, §3.5): a sum of K products computed in FP32 satisfies
|C - C64| <= γ_K·(|alpha|·|A|·|B| + |beta|·|C0|) elementwise, γ_K ≈ K·u. So

    err_bound = max over outputs of |C - C64| / (|alpha|·|A|·|B| + |beta|·|C0| + tiny)

and a kernel passes when ``err_bound`` is within ``tolerance(k, precision)``: for FP32,
γ_(K+2) = (K + 2)·u / (1 - (K + 2)·u) (u = 2^-24; the 2 for the alpha and beta steps).
``tiny`` is FP32's smallest normal, 2^-126: gradual underflow adds at most 2^-150 =
u·tiny to each operation, so underflow fits in the same bound, while a flush to zero (an
error of the products' own size) does not. A relative error divides by |C64|, which is near
zero exactly where sums cancel; ``max_rel_err`` (the worst matrix's relative Frobenius
error) stays in the record for continuity but decides nothing.

An output must be finite where the float64 reference is; where IEEE arithmetic makes the
reference NaN (a NaN input, Inf - Inf) the output must be NaN, and where it makes it
±Inf, Inf of the same sign (``special`` inputs). C is poisoned with NaN before a run
when beta == 0 (C0 is not read then, as BLAS has it), so an unwritten element fails.
A reference that itself leaves FP32's range (``huge`` inputs on a long K) cannot be met
in FP32: the row fails and says so. Inputs whose every product and sum is exact in
FP32 (``integers``) are held to the exact answer.

TF32 kernels (``mmsuite.catalogue.TF32``) round each input to 10 mantissa bits first: an
error of a few TF32 units (2^-11) per product, whatever K, on top of FP32's
accumulation. FP32-accurate tensor-core kernels are held to the FP32 tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .problem import INTEGER_MAX, Problem

FP32_UNIT = 2.0**-24
#: FP32's smallest normal: the absolute floor of the componentwise bound (see above).
FP32_TINY = float(np.finfo(np.float32).tiny)
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: TF32's unit roundoff: 10 mantissa bits, rounded to nearest.
TF32_UNIT = 2.0**-11
#: Rounding both inputs to TF32 costs about 2 units per product; 8 units leave room for
#: inputs truncated rather than rounded.
TF32_UNITS = 8.0
#: c in the FP32 tolerance c·γ_(K+2), γ_n = n·u / (1 - n·u). c = 1 is Higham's worst case
#: itself: no order of K + 2 FP32 roundings (any tiling, split-K, FMA or not) exceeds it,
#: so every error above it is a bug. Measured (2-core x86-64, every C, OpenMP, OpenBLAS and
#: PoCL OpenCL kernel, the nine input classes, the odd shapes with and without alpha, beta
#: and a batch): err_bound at most 0.38·(K + 2)·u (at K <= 5, where a few roundings are
#: the whole error), falling to 0.07-0.10 at K = 131-139, as rounding errors that partly
#: cancel do; the integers class exact everywhere. A flush to
#: zero (an error of order 1), a lost term (order 1/K) or TF32's input rounding at small K
#: (2^-10 per product, below K ≈ 700 on uniform inputs) fails it; at larger K, where the
#: worst case passes TF32's error too, the accuracy column (``err_vs_ref``, the error over
#: the FP32 library's) tells them apart.
BOUND_MULTIPLE = 1.0


def tolerance(k: int, precision: str = "fp32") -> float:
    """The largest ``err_bound`` a product with inner size k passes in a precision class
    (``fp32`` and ``fp32-accurate``: FP32's; ``tf32``: FP32's plus TF32's input rounding)."""
    roundings = (k + 2) * FP32_UNIT
    # At K + 2 >= 2^24 the worst case says nothing: every answer of the right scale passes.
    fp32 = BOUND_MULTIPLE * roundings / (1.0 - roundings) if roundings < 0.5 else 1.0
    if precision in ("fp32", "fp32-accurate"):
        return fp32
    if precision == "tf32":
        return fp32 + TF32_UNITS * TF32_UNIT
    raise ValueError(f"unknown precision class {precision!r}")


@dataclass(frozen=True)
class Reference:
    """The float64 answer ``value`` (alpha·A·B + beta·C0, IEEE semantics, C's logical shape),
    the ``scale`` of each output's rounding error (|alpha|·|A|·|B| + |beta|·|C0|), and
    whether every FP32 result on these inputs is ``exact``."""

    value: np.ndarray
    scale: np.ndarray
    exact: bool = False

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.shape


def exact_in_fp32(problem: Problem) -> bool:
    """Whether every product, partial sum and scaling of the problem is exact in FP32: the
    ``integers`` class while 8·8·K·|alpha| + 8·|beta| stays below 2^22 and alpha and beta
    are multiples of 1/4 (every intermediate a multiple of 1/4 below 2^22: 24 bits)."""
    if problem.distribution != "integers":
        return False
    quarters = all(float(4 * x).is_integer() for x in (problem.alpha, problem.beta))
    largest = (INTEGER_MAX**2 * problem.k * max(1.0, abs(problem.alpha))
               + INTEGER_MAX * abs(problem.beta))
    return quarters and largest < 2.0**22


@np.errstate(invalid="ignore", over="ignore")  # NaN and Inf inputs give NaN as IEEE has it
def reference(problem: Problem, inputs: tuple[np.ndarray, ...]) -> Reference:
    """alpha·A·B + beta·C0 in float64, with C's logical shape, and its error scale."""
    a, b, c0 = (x.astype(np.float64) for x in inputs)
    value = problem.alpha * np.matmul(a, b)
    scale = abs(problem.alpha) * np.matmul(np.abs(a), np.abs(b))
    if problem.beta != 0.0:  # beta == 0: C0 is not read, as BLAS has it
        value += problem.beta * c0
        scale += abs(problem.beta) * np.abs(c0)
    return Reference(value, scale, exact_in_fp32(problem))


@dataclass(frozen=True)
class Verdict:
    max_rel_err: float
    tolerance: float
    ok: bool
    reason: str = ""
    err_bound: float = math.nan


def relative_error(output: np.ndarray, ref: Reference) -> float:
    """The worst matrix's relative Frobenius error over the outputs whose reference is finite
    (inf where such an output is not finite)."""
    finite = np.isfinite(ref.value)
    if not np.isfinite(output[finite]).all():
        return math.inf
    out3 = np.where(finite, output, 0.0).reshape(-1, *ref.shape[-2:]).astype(np.float64)
    ref3 = np.where(finite, ref.value, 0.0).reshape(-1, *ref.shape[-2:])
    diff = np.linalg.norm((out3 - ref3).reshape(len(ref3), -1), axis=1)
    norm = np.linalg.norm(ref3.reshape(len(ref3), -1), axis=1)
    return float((diff / np.maximum(norm, np.finfo(np.float64).tiny)).max())


def componentwise_error(output: np.ndarray, ref: Reference) -> float:
    """``err_bound``: max |C - C64| / (scale + FP32_TINY) over the outputs whose reference is
    finite (inf where such an output is not finite; 0 where there are none)."""
    finite = np.isfinite(ref.value)
    if not finite.any():
        return 0.0
    out = output[finite].astype(np.float64)
    if not np.isfinite(out).all():
        return math.inf
    return float((np.abs(out - ref.value[finite]) / (ref.scale[finite] + FP32_TINY)).max())


def _ieee_mismatch(output: np.ndarray, ref: Reference) -> str:
    """Where the non-finite outputs differ from what IEEE arithmetic gives; "" where none."""
    finite_ref = np.isfinite(ref.value)
    unwritten = int((~np.isfinite(output) & finite_ref).sum())
    if unwritten:
        return (f"{unwritten} of {output.size} elements are NaN/Inf where the reference is "
                "finite (unwritten or overflowed)")
    nan_ref = np.isnan(ref.value)
    not_nan = int((nan_ref & ~np.isnan(output)).sum())
    if not_nan:
        return f"{not_nan} elements are not NaN where IEEE arithmetic makes them NaN"
    inf_ref = np.isinf(ref.value)
    wrong_inf = int((inf_ref & (output.astype(np.float64) != ref.value)).sum())
    if wrong_inf:
        return f"{wrong_inf} elements are not Inf of the sign IEEE arithmetic gives them"
    return ""


def check(output: np.ndarray, ref: Reference, k: int, precision: str = "fp32") -> Verdict:
    """Compare an output with its float64 reference, elementwise (see the module's text)."""
    tol = 0.0 if ref.exact else tolerance(k, precision)
    if output.shape != ref.shape:
        return Verdict(math.inf, tol, False, f"shape {output.shape} != expected {ref.shape}",
                       math.inf)
    finite_ref = np.isfinite(ref.value)
    beyond = int((finite_ref & (np.abs(ref.value) > FLOAT32_MAX)).sum())
    if beyond:
        largest = float(np.abs(ref.value[finite_ref]).max())
        return Verdict(math.inf, tol, False,
                       f"the float64 reference leaves FP32's range in {beyond} of {output.size} "
                       f"elements (|C| up to {largest:.3g} > {FLOAT32_MAX:.3g}): the inputs "
                       "overflow FP32, not the kernel; use a shorter K or smaller inputs",
                       math.inf)
    worst, bound = relative_error(output, ref), componentwise_error(output, ref)
    mismatch = _ieee_mismatch(output, ref)
    if mismatch:
        return Verdict(worst, tol, False, mismatch, bound)
    ok = bound <= tol
    reason = "" if ok else (f"componentwise error {bound:.2e} exceeds tolerance {tol:.2e}"
                            + (" (the inputs make every FP32 result exact)" if ref.exact
                               else ""))
    return Verdict(worst, tol, ok, reason, bound)
