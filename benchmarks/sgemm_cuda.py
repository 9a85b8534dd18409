"""CUDA ladder and the cuBLAS reference: ``asv run --bench cuda``."""

from __future__ import annotations

from . import _suite


class CudaKernels(_suite._DeviceSuite):
    """Every ``cuda.*`` kernel of the catalogue; times from CUDA events behind the spin kernel."""

    # 3: device-time samples through asv's time_ benchmarks (2: fastest sample under the
    # engine's stopping rule, as a track_ number; 1: median of fixed repeats)
    version = "3"
    backend = "cuda"
    params = _suite.params("cuda")
