"""Shared test fixtures: the shape grid every kernel must pass."""

from __future__ import annotations

import importlib.util

import pytest

from mmsuite import Problem, kernels
from mmsuite.testing import ODD_SHAPES  # noqa: F401  (the grid the tests below share)


def needs(module: str, extra: str) -> pytest.MarkDecorator:
    """Skip, with the reason, a test that needs an optional extra which is not installed."""
    return pytest.mark.skipif(importlib.util.find_spec(module) is None,
                              reason=f"{module} is not installed: pip install -e '.[{extra}]'")


needs_asv = needs("asv", "bench")


def kernel_ids(backend: str | None = None) -> list:
    """Every catalogue kernel as a pytest param, skipped with its reason where unavailable."""
    params = []
    for kernel in kernels(backend):
        marks = [] if kernel.available else [pytest.mark.skip(reason=kernel.reason)]
        params.append(pytest.param(kernel.id, id=kernel.id, marks=marks))
    return params


@pytest.fixture
def small_problem() -> Problem:
    return Problem(35, 79, 19)
