"""OpenCL ladder (PoCL on a CPU, the vendor driver on a GPU): ``asv run --bench opencl``."""

from __future__ import annotations

from . import _suite


class OpenclKernels(_suite._DeviceSuite):
    """Every ``opencl.*`` kernel of the catalogue; times from gated OpenCL profiling events."""

    # 3: device-time samples through asv's time_ benchmarks (2: fastest sample under the
    # engine's stopping rule, as a track_ number; 1: median of fixed repeats)
    version = "3"
    backend = "opencl"
    params = _suite.params("opencl")
