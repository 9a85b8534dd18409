"""The CUDA adapter's side of plugins, without a GPU: what it would compile ahead."""

from __future__ import annotations

from types import SimpleNamespace

from mmsuite import Problem
from mmsuite.backends import RunOptions
from mmsuite.backends.cuda import CudaBackend
from mmsuite.catalogue import Kernel
from mmsuite.layout import sized_call


def test_a_callable_has_nothing_to_compile_ahead(monkeypatch) -> None:
    callable_kernel = Kernel(id="mine.cupy", backend="cuda", rung=1, parent=None, adds="",
                             origin="plugin", plugin="mine.py", function=print)
    planned = []
    monkeypatch.setattr(CudaBackend, "plan", lambda self, kernel, call: planned.append(
        kernel.id) or SimpleNamespace(steps=()))
    CudaBackend(RunOptions()).warm([(callable_kernel, sized_call(Problem(8, 8, 8), "row"))])
    assert planned == []
