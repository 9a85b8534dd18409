"""CUDA ladder and the cuBLAS reference: ``asv run --bench cuda``."""

from __future__ import annotations

from . import _suite


class CudaKernels(_suite._DeviceSuite):
    """Every ``cuda.*`` kernel of the catalogue; times from CUDA events."""

    version = "2"  # 2: fastest sample under the engine's stopping rule (1: median of repeats)
    backend = "cuda"
    params = _suite.params("cuda")

    def setup_cache(self) -> str:
        return _suite.new_cache_dir()
