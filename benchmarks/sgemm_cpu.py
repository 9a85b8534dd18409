"""CPU ladder (sequential C, OpenMP, numpy/OpenBLAS reference): ``asv run --bench cpu``."""

from __future__ import annotations

from . import _suite


class CpuKernels(_suite._KernelSuite):
    """Every ``cpu.*`` kernel of the catalogue at the CPU sizes, wall clock around the C call."""

    version = "2"  # 2: fastest sample under the engine's stopping rule (1: median of repeats)
    backend = "cpu"
    params = _suite.params("cpu")

    def setup_cache(self) -> str:
        return _suite.new_cache_dir()
