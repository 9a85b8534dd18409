"""mmsuite: a performance regression suite for SGEMM kernel ladders.

    >>> import mmsuite
    >>> p = mmsuite.Problem(512, 512, 512)
    >>> m = mmsuite.run("cpu.omp_packed", p)
    >>> m.ok, m.gflops

Your own kernels join the catalogue through ``mmsuite.register`` (``mmsuite.plugins``).
"""

from .backends import KernelUnavailable, RunOptions
from .catalogue import Kernel, get, kernels
from .measure import Measurement, PhaseStats, run
from .plugins import PluginError, register
from .problem import PRESETS, Problem, preset

__version__ = "0.1.0"

__all__ = [
    "Kernel", "KernelUnavailable", "Measurement", "PRESETS", "PhaseStats", "PluginError",
    "Problem", "RunOptions", "__version__", "get", "kernels", "preset", "register", "run",
]
