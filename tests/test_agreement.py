"""Every available kernel of every backend computes the same SGEMM as the float64 reference.

Unavailable kernels (no GPU, no OpenCL platform) skip with the reason the
catalogue gives. Each case draws fresh inputs from its own seed.
"""

from __future__ import annotations

import itertools

import pytest

import mmsuite
from mmsuite import Problem
from mmsuite.problem import DISTRIBUTIONS
from mmsuite.verify import FP32_TINY

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


# Small cases of the odd-shape grid (unit, primes, non-multiples of every tile, a batch),
# with and without alpha, beta and column-major storage: each input class on each.
CLASS_CASES = [
    dict(m=1, n=1, k=1),
    dict(m=35, n=79, k=19, alpha=-0.75, beta=1.5),
    dict(m=2, n=3, k=5, layout="col"),
    dict(m=129, n=65, k=33),
    dict(m=17, n=1, k=131, batch=3, layout="col", alpha=0.5, beta=-2.0),
]


@pytest.mark.parametrize("kernel_id", ALL)
@pytest.mark.parametrize("distribution", [d for d in DISTRIBUTIONS if d != "uniform"])
def test_every_input_class_and_the_accuracy_column(kernel_id: str, distribution: str) -> None:
    """Every class (uniform is every other test's) agrees with float64 within the kernel's
    precision class's componentwise tolerance (NaN and Inf where IEEE puts them, the exact
    answer on integers), and each row carries its err_bound over the FP32 reference
    library's on the same inputs."""
    for seed, case in enumerate(CLASS_CASES):
        problem = Problem(**case, seed=seed + 21, distribution=distribution)
        m_ = mmsuite.run(kernel_id, problem, repeats=1, warmup=0)
        assert m_.ok, f"{kernel_id} on {problem}: {m_.verdict.reason}"
        record = m_.to_record()
        assert record["problem"]["inputs"] == distribution
        assert record["err_bound"] <= record["tolerance"]
        if distribution == "integers":
            assert record["tolerance"] == 0.0 and record["err_bound"] == 0.0
        assert record["ref_library"] and record["ref_err_bound"] >= 0
        assert record["err_vs_ref"] == pytest.approx(
            m_.err_bound / max(record["ref_err_bound"], FP32_TINY))


@pytest.mark.parametrize("kernel_id", ALL)
def test_round_shape(kernel_id: str) -> None:
    _assert_ok(kernel_id, Problem(512, 256, 384, seed=5))


@pytest.mark.parametrize("kernel_id", kernel_ids("cpu"))
def test_random_problems_on_the_cpu_ladder(kernel_id: str) -> None:
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=20, deadline=None, derandomize=True)
    @hypothesis.given(m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(1, 70),
                      batch=st.integers(1, 3), layout=st.sampled_from(["row", "col"]),
                      alpha=st.sampled_from([1.0, -2.0, 0.25]),
                      beta=st.sampled_from([0.0, 1.0, -0.5]),
                      seed=st.integers(0, 2**31))
    def check(m, n, k, batch, layout, alpha, beta, seed):
        _assert_ok(kernel_id, Problem(m, n, k, batch, layout, alpha, beta, seed))

    check()
