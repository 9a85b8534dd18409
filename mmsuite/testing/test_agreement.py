"""Your kernels compute the same SGEMM as the float64 reference (``mmsuite.testing``)."""

from __future__ import annotations

import fnmatch

import pytest

import mmsuite
from mmsuite import plugins
from mmsuite.problem import DISTRIBUTIONS, Problem
from mmsuite.testing import ODD_SHAPES


def _chosen(config: pytest.Config) -> list:
    plugins.load_configured()
    globs = config.getoption("mmsuite_kernel", default=[])
    return [k for k in mmsuite.kernels()
            if (any(fnmatch.fnmatchcase(k.id, g) for g in globs) if globs else k.plugin)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "kernel_id" in metafunc.fixturenames:
        params = [pytest.param(k.id, id=k.id, marks=[] if k.available else
                               [pytest.mark.skip(reason=f"{k.id}: {k.reason}")])
                  for k in _chosen(metafunc.config)]
        metafunc.parametrize("kernel_id", params)


def _assert_ok(kernel_id: str, problem: Problem) -> None:
    m = mmsuite.run(kernel_id, problem, repeats=1, warmup=0)
    assert m.output.shape == problem.logical_shape("C")
    assert m.ok, f"{kernel_id} on {problem}: {m.verdict.reason}"


def test_there_are_kernels_to_check(request: pytest.FixtureRequest) -> None:
    assert _chosen(request.config), ("no plugin kernel to check: give --mmsuite-plugin PATH, "
                                     "set MMSUITE_PLUGINS, or install a plugin")


@pytest.mark.parametrize("shape", ODD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_odd_shapes(kernel_id: str, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    _assert_ok(kernel_id, Problem(m, n, k, seed=m * 7 + n * 3 + k))


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_every_input_class(kernel_id: str, distribution: str) -> None:
    for seed, (m, n, k) in enumerate([(35, 79, 19), (130, 67, 45)]):
        _assert_ok(kernel_id, Problem(m, n, k, seed=seed + 21, distribution=distribution))


@pytest.mark.parametrize("batch,layout,alpha,beta",
                         [(1, "col", 1.0, 0.0), (3, "row", -0.75, 1.5), (3, "col", 2.0, -1.0)])
def test_batch_layout_and_scalars(kernel_id: str, batch: int, layout: str, alpha: float,
                                  beta: float) -> None:
    for seed, (m, n, k) in enumerate([(35, 79, 19), (1, 1, 1), (130, 67, 45)]):
        _assert_ok(kernel_id, Problem(m, n, k, batch, layout, alpha, beta, seed=seed + 11))
