"""OpenCL ladder (PoCL on a CPU, the vendor driver on a GPU): ``asv run --bench opencl``."""

from __future__ import annotations

from . import _suite


class OpenclKernels(_suite._DeviceSuite):
    """Every ``opencl.*`` kernel of the catalogue; times from OpenCL profiling events."""

    version = "2"  # 2: fastest sample under the engine's stopping rule (1: median of repeats)
    backend = "opencl"
    params = _suite.params("opencl")

    def setup_cache(self) -> str:
        return _suite.new_cache_dir()
