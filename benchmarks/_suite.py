"""Machinery shared by the per-backend asv suites.

Kernels come from ``mmsuite.kernels(backend)`` and sizes from the ``sweep``
preset: this package holds no second list of kernels. A kernel added to the
catalogue is benchmarked on the next run. Only a kernel whose backend cannot
run on the machine (no GPU, no OpenCL platform) or whose vendor library is not
installed is skipped by asv, with the reason printed; a rung that fails to
build (missing from the built extension, a compile error), raises or fails
verification is *failed*, so that a broken build never reads as "n/a".

Each (kernel, size) is measured once per benchmarked commit. asv runs every
``track_`` method of every parameter combination in a fresh interpreter (launch
method "spawn"), so the first ``track_`` method that needs a measurement calls
``mmsuite.run`` and writes the figures into the class's ``setup_cache``
directory, which asv shares between all benchmarks of that class for one
commit and deletes afterwards; the remaining ``track_`` methods read them back.

Each figure is the fastest sample of its phase that ``mmsuite.run`` took under
the engine's stopping rule (at least 10 samples and 0.5 s, until the robust
noise is below 0.5% or 15 s have passed). asv keeps one number per benchmark
and compares it across commits with a factor, so that number must not move
with load. Other programs on the cores only ever add time to a sample: on a
shared 2-core machine at load 5, between two runs of the same commit, the
fastest sample of six of the seven CPU kernels moved by less than 5% where
their medians moved by up to 72%. Load that lasts a whole run moves both
(OpenBLAS, whose threads wait for each other, by 32x there).
The samples themselves, with their median, are what ``mmsuite compare`` tests.
``MMSUITE_ASV_SAMPLING=quick`` selects the engine's quick rule (for tests and
smoke runs). The clocks are the engine's: a monotonic wall clock around the C
call on the CPU, device timers for the GPU backends. Nothing here adds a clock
of its own.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import mmsuite

try:
    from asv_runner.benchmarks.mark import SkipNotImplemented
except ImportError:  # outside asv: the same meaning, a skip
    SkipNotImplemented = NotImplementedError  # noqa: N816

#: Square sizes per backend, each taken from the ``sweep`` preset. The CPU set
#: stays small so that ``asv run`` over a few commits takes minutes on two cores.
SIZES: dict[str, tuple[int, ...]] = {
    "cpu": (256, 512),
    "opencl": (256, 512),
    "cuda": (1024, 4096),
}

#: (timed repeats, untimed warm-up runs) per backend. The repeats are used only
#: with an mmsuite older than the stopping rule (asv may measure old commits).
RUNS: dict[str, tuple[int, int]] = {
    "cpu": (5, 1),
    "opencl": (3, 1),
    "cuda": (10, 2),
}

#: Environment variable naming the engine's stopping rule: "default" or "quick".
SAMPLING_ENV = "MMSUITE_ASV_SAMPLING"


def problems(backend: str) -> dict[int, mmsuite.Problem]:
    """The problems benchmarked for ``backend``, keyed by their size, from the sweep preset."""
    sweep = {p.m: p for p in mmsuite.preset("sweep") if p.m == p.n == p.k and p.batch == 1}
    missing = [s for s in SIZES[backend] if s not in sweep]
    if missing:
        raise ValueError(f"sizes {missing} of the {backend} suite are not in the sweep preset")
    return {s: sweep[s] for s in SIZES[backend]}


def params(backend: str) -> list[list[Any]]:
    """asv parameters: every catalogue kernel of ``backend`` crossed with its sizes."""
    return [[k.id for k in mmsuite.kernels(backend)], list(problems(backend))]


def _record_path(cache_dir: str, kernel_id: str, size: int) -> Path:
    return Path(cache_dir) / f"{kernel_id}-{size}.json"


def skip_reason(kernel: mmsuite.Kernel) -> str:
    """Why asv should skip ``kernel`` here: its backend cannot run on this machine, or it is a
    vendor library that is not installed. Empty when the kernel must run; any other reason
    it is unavailable (a rung missing from the build, a missing source) is a failure."""
    from mmsuite.backends import get_backend

    try:
        reason = get_backend(kernel.backend).probe()
    except Exception:  # the adapter itself does not load: a broken build, reported as failed
        return ""
    if reason:
        return reason
    return kernel.reason if kernel.reference else ""


def _run_arguments(backend: str) -> dict[str, Any]:
    """``mmsuite.run`` keywords: the engine's stopping rule, or fixed repeats before it."""
    from mmsuite import measure as engine

    repeats, warmup = RUNS[backend]
    if not hasattr(engine, "QUICK_SAMPLING"):  # an mmsuite from before the stopping rule
        return {"repeats": repeats, "warmup": warmup}
    name = os.environ.get(SAMPLING_ENV, "default").strip().lower() or "default"
    rules = {"default": engine.DEFAULT_SAMPLING, "quick": engine.QUICK_SAMPLING}
    if name not in rules:
        raise ValueError(f"{SAMPLING_ENV}={name!r}: expected one of {', '.join(rules)}")
    return {"sampling": rules[name], "warmup": warmup}


def measure(backend: str, kernel_id: str, size: int) -> dict[str, Any]:
    """Run one kernel once through ``mmsuite.run`` and return its figures (or why not)."""
    kernel = mmsuite.get(kernel_id)
    skip = skip_reason(kernel)
    if skip:
        return {"skip": skip}
    if not kernel.available:
        return {"error": f"{kernel_id} cannot run: {kernel.reason}"}
    try:
        m = mmsuite.run(kernel_id, problems(backend)[size], **_run_arguments(backend))
    except Exception as exc:  # recorded so that every track_ method fails the same way
        return {"error": f"{type(exc).__name__}: {exc}"}
    if not m.ok:
        return {"error": f"{kernel_id} at {size}^3 failed verification: {m.verdict.reason} "
                         f"(max relative error {m.max_rel_err:.3g})"}
    figures = {"kernel_ms": m.kernel_ms.min, "h2d_ms": m.h2d_ms.min, "d2h_ms": m.d2h_ms.min}
    figures["host_to_host_ms"] = sum(figures.values())
    if not all(math.isfinite(v) for v in figures.values()):
        return {"error": f"{kernel_id} at {size}^3 returned a non-finite time: {figures}"}
    info = getattr(m, "info", None) or {}
    if backend != "cpu" and str(info.get("device_type", "")).upper() == "CPU":
        # A few microseconds of memcpy inside host memory, moved by whatever else uses
        # the memory bus: nothing of the device's to track, only noise for the gate.
        figures["no_transfers"] = (f"{kernel_id} runs on a CPU device here: its h2d and d2h "
                                   "are copies within host memory")
    return figures


def figures(cache_dir: str, backend: str, kernel_id: str, size: int) -> dict[str, Any]:
    """The figures of (kernel, size) for this commit, measured on first use.

    Raises NotImplementedError (asv: skipped) for a kernel whose backend or vendor
    library is missing here and RuntimeError (asv: failed) for a build failure, an
    error or a failed verification, so that no number is recorded for a wrong result.
    """
    path = _record_path(cache_dir, kernel_id, size)
    if path.exists():
        record = json.loads(path.read_text())
    else:
        record = measure(backend, kernel_id, size)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(path)
    if "skip" in record:
        raise NotImplementedError(record["skip"])
    if "error" in record:
        raise RuntimeError(record["error"])
    return record


def new_cache_dir() -> str:
    """What ``setup_cache`` returns: the directory asv runs this class's benchmarks in."""
    return os.getcwd()


class _KernelSuite:
    """Kernel-only and host-to-host time of every kernel of one backend, in ms.

    Subclasses set ``backend``, ``params``, ``version`` and define their own
    ``setup_cache`` (asv keys the cache by where that method is defined).
    """

    backend = ""
    param_names = ["kernel", "size"]
    unit = "ms"
    timeout = 900

    def setup(self, cache_dir: str, kernel_id: str, size: int) -> None:
        self.figures = figures(cache_dir, self.backend, kernel_id, size)

    def track_kernel_ms(self, cache_dir: str, kernel_id: str, size: int) -> float:
        """Kernel-only time (fastest sample under the engine's stopping rule), ms."""
        return self.figures["kernel_ms"]

    def track_host_to_host_ms(self, cache_dir: str, kernel_id: str, size: int) -> float:
        """h2d + kernel + d2h (fastest samples), ms; equal to the kernel time on the CPU."""
        return self.figures["host_to_host_ms"]


class _DeviceSuite(_KernelSuite):
    """A GPU backend: transfers are tracked on their own as well."""

    def track_h2d_ms(self, cache_dir: str, kernel_id: str, size: int) -> float:
        """Host-to-device copy of A and B (fastest sample), ms; skipped on a CPU device."""
        return self._transfer("h2d_ms")

    def track_d2h_ms(self, cache_dir: str, kernel_id: str, size: int) -> float:
        """Device-to-host copy of C (fastest sample), ms; skipped on a CPU device."""
        return self._transfer("d2h_ms")

    def _transfer(self, phase: str) -> float:
        if "no_transfers" in self.figures:
            raise SkipNotImplemented(self.figures["no_transfers"])
        return self.figures[phase]
