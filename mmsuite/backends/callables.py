"""A plugin's Python callable as a kernel: ``f(alpha, A, B, beta, C)`` updating C in place,
on numpy arrays (the CPU adapter) or CuPy arrays (the CUDA adapter). The adapters keep
their own buffers, timers and streams; this module only hands the callable views of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .base import KernelFailed

if TYPE_CHECKING:
    from ..layout import GemmCall
    from .base import KernelSpec


def gemm_views(call: GemmCall, a: Any, b: Any, c: Any) -> tuple[Any, Any, Any]:
    """A, B and C of ``call`` as the logical matrices a callable takes (m×k, k×n, m×n; a
    leading batch axis when batch > 1), views of the flat buffers ``a``, ``b`` and ``c`` in
    the call's layout: numpy or CuPy arrays alike, so that C is updated in place."""
    def view(flat: Any, rows: int, cols: int) -> Any:
        if call.layout == "row":
            matrices = flat.reshape(call.batch, rows, cols)
        else:  # column-major: each matrix is stored as its transpose
            matrices = flat.reshape(call.batch, cols, rows).transpose(0, 2, 1)
        return matrices[0] if call.batch == 1 else matrices

    return view(a, call.m, call.k), view(b, call.k, call.n), view(c, call.m, call.n)


def launch(kernel: KernelSpec, arrays: tuple[Any, Any, Any],
           call: GemmCall) -> Callable[[], None]:
    """A plugin's ``f(alpha, A, B, beta, C)`` on ``arrays`` (``gemm_views``); whatever it
    raises is the kernel's failure (its row), not mmsuite's."""
    function = kernel.function
    assert function is not None
    a, b, c = arrays
    alpha, beta = float(call.alpha), float(call.beta)

    def call_it() -> None:
        try:
            function(alpha, a, b, beta, c)
        except Exception as exc:
            raise KernelFailed(f"{kernel.id} raised {type(exc).__name__}: {exc}") from exc

    return call_it
