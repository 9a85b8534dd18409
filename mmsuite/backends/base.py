"""The contract every backend adapter implements.

An adapter owns allocation, transfers, launches and timing for one kind of
device. It receives a ``GemmCall`` already mapped to the kernel's native layout
(see ``mmsuite.layout``) and returns an ``Execution``: the C storage of the
last timed run and the per-phase samples. Verification, statistics and
reporting happen elsewhere, once for all backends.

Rules every adapter follows:
- Before every run (warm-up and timed), C is reset: filled with NaN when
  beta == 0 (so unwritten elements fail verification), else with C0.
- ``warmup`` untimed runs come first (compilation, caches, first-touch), then
  ``repeats`` timed runs. Device work is timed with device clocks.
- h2d covers A and B (and C0 when beta != 0); d2h covers C. Host backends
  report no transfer samples.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from ..catalogue import Kernel
from ..layout import GemmCall
from ..problem import Problem


@dataclass(frozen=True)
class RunOptions:
    """Backend settings chosen by the user; hashable so adapters can be cached per option set."""

    threads: int | None = None  # OpenMP threads for the CPU backend (None: all cores)
    cl_device: str | None = None  # OpenCL device: index or name substring
    pinned: bool = False  # page-locked host buffers for GPU transfers
    profile: bool = False  # add registers / shared / spill bytes per kernel


@dataclass
class Execution:
    """What one adapter run returns: C's storage and the per-phase samples in ms."""

    output: np.ndarray
    kernel_ms: list[float]
    h2d_ms: list[float] = field(default_factory=list)
    d2h_ms: list[float] = field(default_factory=list)
    info: dict = field(default_factory=dict)


class KernelUnavailable(RuntimeError):
    """The kernel cannot run here; the message is the reason."""


class Backend(ABC):
    """One kind of device. Subclasses are thin: they launch and time, nothing else."""

    name: str = ""

    def __init__(self, options: RunOptions) -> None:
        self.options = options

    @abstractmethod
    def probe(self) -> str:
        """Empty when the backend can run here, else a one-line reason with a way out."""

    def kernel_reason(self, kernel: Kernel) -> str:
        """Empty when this kernel can run on the selected device, else why not."""
        return ""

    @abstractmethod
    def execute(self, kernel: Kernel, call: GemmCall, repeats: int, warmup: int) -> Execution:
        """Run ``kernel`` on ``call``: warm-up, then ``repeats`` timed runs."""

    def environment(self) -> dict:
        """Facts about where this backend runs (device, driver, versions)."""
        return {}

    def reference(self, problem: Problem, inputs: tuple[np.ndarray, ...]) -> np.ndarray | None:
        """A float64 reference computed on this backend's device, or None to use the host."""
        return None
