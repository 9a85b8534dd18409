"""Operand mapping: a kernel of either native layout serves problems of both layouts."""

from __future__ import annotations

import numpy as np
import pytest

from mmsuite import Problem
from mmsuite.layout import from_storage, plan_call, sized_call


def _kernel_in_numpy(call) -> np.ndarray:
    """What a correct kernel computes from a GemmCall, written against its own layout."""
    def matrices(flat, rows, cols):
        x = flat.reshape(call.batch, rows, cols) if call.layout == "row" else \
            flat.reshape(call.batch, cols, rows).swapaxes(1, 2)
        return x.astype(np.float64)

    a = matrices(call.a, call.m, call.k)
    b = matrices(call.b, call.k, call.n)
    c = call.alpha * a @ b + call.beta * matrices(call.c0, call.m, call.n)
    c = c if call.layout == "row" else c.swapaxes(1, 2)
    return np.ascontiguousarray(c).reshape(-1)


@pytest.mark.parametrize("problem_layout", ["row", "col"])
@pytest.mark.parametrize("kernel_layout", ["row", "col"])
def test_any_kernel_layout_serves_any_problem_layout(problem_layout: str,
                                                     kernel_layout: str) -> None:
    p = Problem(5, 7, 3, batch=2, layout=problem_layout, alpha=0.5, beta=2.0)
    inputs = p.inputs()
    call = plan_call(p, inputs, kernel_layout)
    out = from_storage(_kernel_in_numpy(call), p)
    a, b, c0 = (x.astype(np.float64) for x in inputs)
    np.testing.assert_allclose(out, 0.5 * a @ b + 2.0 * c0, rtol=1e-12)


@pytest.mark.parametrize("kernel_layout", ["row", "col"])
def test_a_sized_call_has_the_planned_calls_sizes_and_no_operands(kernel_layout: str) -> None:
    p = Problem(5, 7, 3, batch=2, layout="row", alpha=0.5, beta=2.0)
    planned, sized = plan_call(p, p.inputs(), kernel_layout), sized_call(p, kernel_layout)
    fields = ("m", "n", "k", "batch", "layout", "alpha", "beta")
    assert [getattr(sized, f) for f in fields] == [getattr(planned, f) for f in fields]
    assert sized.a.size == sized.b.size == sized.c0.size == 0
