"""CPU ladder (sequential C, OpenMP, numpy/OpenBLAS reference): ``asv run --bench cpu``."""

from __future__ import annotations

from . import _suite


class CpuKernels(_suite._KernelSuite):
    """Every ``cpu.*`` kernel of the catalogue at the CPU sizes, wall clock around the C call."""

    # 3: device-time samples through asv's time_ benchmarks (2: fastest sample under the
    # engine's stopping rule, as a track_ number; 1: median of fixed repeats)
    version = "3"
    backend = "cpu"
    params = _suite.params("cpu")
