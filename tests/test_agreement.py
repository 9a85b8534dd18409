"""Every available kernel of every backend computes the same SGEMM as the float64 reference.

Unavailable kernels (no GPU, no OpenCL platform) skip with the reason the
catalogue gives. Each case draws fresh inputs from its own seed.
"""

from __future__ import annotations

import itertools

import pytest

import mmsuite
from mmsuite import Problem

from .conftest import ODD_SHAPES, kernel_ids

ALL = kernel_ids()


def _assert_ok(kernel_id: str, problem: Problem) -> None:
    m = mmsuite.run(kernel_id, problem, repeats=1, warmup=0)
    assert m.output.shape == problem.logical_shape("C")
    assert m.ok, f"{kernel_id} on {problem}: {m.verdict.reason}"


@pytest.mark.parametrize("kernel_id", ALL)
@pytest.mark.parametrize("shape", ODD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_odd_shapes_row_major(kernel_id: str, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    _assert_ok(kernel_id, Problem(m, n, k, seed=m * 7 + n * 3 + k))


@pytest.mark.parametrize("kernel_id", ALL)
@pytest.mark.parametrize(
    "batch,layout,alpha,beta",
    [(b, lay, a, be) for (b, lay), (a, be) in itertools.product(
        [(1, "col"), (3, "row"), (3, "col")], [(1.0, 0.0), (-0.75, 1.5)])],
)
def test_batch_layout_and_scalars(kernel_id: str, batch: int, layout: str, alpha: float,
                                  beta: float) -> None:
    for seed, (m, n, k) in enumerate([(35, 79, 19), (1, 1, 1), (130, 67, 45)]):
        _assert_ok(kernel_id, Problem(m, n, k, batch, layout, alpha, beta, seed=seed + 11))


@pytest.mark.parametrize("kernel_id", ALL)
def test_round_shape(kernel_id: str) -> None:
    _assert_ok(kernel_id, Problem(512, 256, 384, seed=5))
