"""Operand mapping between a problem's layout and a kernel's native layout.

A row-major C = A·B is the column-major C^T = B^T·A^T: a kernel written for one
layout serves the other when the adapter swaps A with B and m with n. No kernel
exists twice. In both cases the kernel's C buffer is exactly C's storage in the
problem's layout, so reading the result back never needs a transpose.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .problem import Problem


def storage(array: np.ndarray, layout: str) -> np.ndarray:
    """The flat float32 storage of a (batched) matrix kept in ``layout``; no copy if it is."""
    matrices = array if layout == "row" else np.swapaxes(array, -1, -2)
    return np.ascontiguousarray(matrices, dtype=np.float32).reshape(-1)


def from_storage(flat: np.ndarray, problem: Problem) -> np.ndarray:
    """The logical C (``problem.logical_shape('C')``) stored in ``flat`` in the problem's layout."""
    b, m, n = problem.batch, problem.m, problem.n
    if problem.layout == "row":
        logical = flat.reshape(b, m, n)
    else:
        logical = flat.reshape(b, n, m).swapaxes(-1, -2)
    return logical[0] if b == 1 else logical


@dataclass(frozen=True)
class GemmCall:
    """What a kernel is launched with: sizes and flat contiguous buffers in its native layout.

    The kernel computes, for each of ``batch`` matrices stored one after another,
    C = alpha·A·B + beta·C with A m×k, B k×n, C m×n, all in ``layout``.
    When ``beta == 0`` a kernel must not read C (it holds NaN poison).
    """

    m: int
    n: int
    k: int
    batch: int
    layout: str
    alpha: float
    beta: float
    a: np.ndarray
    b: np.ndarray
    c0: np.ndarray

    @property
    def c_size(self) -> int:
        return self.batch * self.m * self.n


def plan_call(problem: Problem, inputs: tuple[np.ndarray, ...], kernel_layout: str) -> GemmCall:
    """Map the problem's operands onto a kernel written for ``kernel_layout``."""
    a, b, c0 = inputs
    mem_a, mem_b, mem_c = (storage(x, problem.layout) for x in (a, b, c0))
    if kernel_layout != problem.layout:  # C^T = B^T A^T: the operands swap places
        mem_a, mem_b = mem_b, mem_a
    return replace(sized_call(problem, kernel_layout), a=mem_a, b=mem_b, c0=mem_c)


def sized_call(problem: Problem, kernel_layout: str) -> GemmCall:
    """The call's sizes and scalars with empty operands: all a planner reads to choose its
    launches (compiling ahead of a job needs no inputs)."""
    m, n = (problem.m, problem.n) if kernel_layout == problem.layout else (problem.n, problem.m)
    empty = np.empty(0, dtype=np.float32)
    return GemmCall(m, n, problem.k, problem.batch, kernel_layout, problem.alpha, problem.beta,
                    empty, empty, empty)
