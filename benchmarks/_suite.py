"""Machinery shared by the per-backend asv suites.

Kernels come from ``mmsuite.kernels(backend)`` and sizes from the ``sweep``
preset: this package holds no second list of kernels. A kernel added to the
catalogue is benchmarked on the next run, a plugin's too: the plugins installed
in asv's environment and the files of ``MMSUITE_PLUGINS`` (set in the shell
that runs ``asv``) are loaded first. Only a kernel whose backend cannot
run on the machine (no GPU, no OpenCL platform) or whose vendor library is not
installed is skipped by asv, with the reason printed; a rung that fails to
build (missing from the built extension, a compile error), raises or fails
verification is *failed*, so that a broken build never reads as "n/a".

Every figure is an asv ``time_`` benchmark, so that asv keeps its samples,
tests a change with its Mann-Whitney U test rather than a bare ratio, and can
interleave the rounds of two commits (``asv continuous --interleave-rounds``):
load from elsewhere on a shared machine then falls on both commits alike
instead of on whichever was measured during a burst. The clock asv reads is
``DEVICE_CLOCK``: it advances only by the device time that the measurement
engine's own timer gives for each sample (``mmsuite.measure.KernelSampler``:
C reset outside the timer, CUDA's spin kernel and events, OpenCL's gated
profiling events, a wall clock around the C call on the CPU), so asv's samples
hold no Python and no host dispatch. Each benchmark process prepares and
verifies its kernel once (``sampler``); a kernel whose output is wrong is never
timed. The numbers are seconds, asv's unit for ``time_`` benchmarks.

Each asv sample is the fastest of the engine's samples taken over at least
``WINDOW_S`` (and at least ``FASTEST_OF`` of them). Other programs on a shared
machine only ever add time to a sample, in bursts that come and go within
seconds; the fastest sample of a short window stays put while a median of
single samples moves with them.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
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


def problems(backend: str) -> dict[int, mmsuite.Problem]:
    """The problems benchmarked for ``backend``, keyed by their size, from the sweep preset."""
    sweep = {p.m: p for p in mmsuite.preset("sweep") if p.m == p.n == p.k and p.batch == 1}
    missing = [s for s in SIZES[backend] if s not in sweep]
    if missing:
        raise ValueError(f"sizes {missing} of the {backend} suite are not in the sweep preset")
    return {s: sweep[s] for s in SIZES[backend]}


def params(backend: str) -> list[list[Any]]:
    """asv parameters: every catalogue kernel of ``backend``, plugins' included, crossed
    with its sizes."""
    plugins = getattr(mmsuite, "plugins", None)  # None: a commit from before plugins
    if plugins is not None:
        plugins.load_configured()
    return [[k.id for k in mmsuite.kernels(backend)], list(problems(backend))]


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


class DeviceClock:
    """A clock for asv that advances only by the device time of the samples taken.

    asv reads its ``timer`` before and after the calls of a sample; the
    ``time_`` methods call ``advance`` with what the engine measured, so the
    difference asv sees is that device time alone.
    """

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds

    def advance(self, ms: float) -> None:
        self.seconds += ms / 1e3


DEVICE_CLOCK = DeviceClock()
#: An asv sample: the fastest engine sample of a window this long, of at least this many.
WINDOW_S = 0.02
FASTEST_OF = 3


def fastest_ms(sample: Callable[[], float], window_s: float = WINDOW_S,
               least: int = FASTEST_OF,
               clock: Callable[[], float] = time.perf_counter) -> float:
    """The fastest of the samples ``sample()`` gives over ``window_s`` of wall clock, and
    of at least ``least`` of them."""
    start, taken, best = clock(), 0, float("inf")
    while taken < least or clock() - start < window_s:
        best = min(best, sample())
        taken += 1
    return best


@functools.cache
def sampler(backend: str, kernel_id: str, size: int) -> Any:
    """The kernel prepared and verified on the backend's problem of ``size``, once per
    process: asv runs ``setup`` again before every sample.

    Raises NotImplementedError (asv: skipped) when the backend or vendor library is
    missing here and RuntimeError (asv: failed) for a build failure, an error or a
    failed verification, so that no number is recorded for a wrong result.
    """
    from mmsuite import measure

    kernel = mmsuite.get(kernel_id)
    skip = skip_reason(kernel)
    if skip:
        raise NotImplementedError(skip)
    if not hasattr(measure, "KernelSampler"):  # asv measuring a commit older than the sampler
        raise NotImplementedError("this mmsuite predates KernelSampler: no device-time samples")
    if not kernel.available:
        raise RuntimeError(f"{kernel_id} cannot run: {kernel.reason}")
    try:
        return measure.KernelSampler(kernel_id, problems(backend)[size])
    except Exception as exc:  # one line for asv's table, the cause chained
        raise RuntimeError(f"{type(exc).__name__}: {exc}") from exc


class _KernelSuite:
    """Kernel-only device time of every kernel of one backend, in seconds.

    Subclasses set ``backend``, ``params`` and ``version``. Each round asv runs
    is a fresh process (launch method ``spawn``); ``rounds`` of them, with at
    least ``repeat[0]`` samples each, give asv's test enough samples to call a
    difference significant (5 a side cannot reach its p < 0.002).
    """

    backend = ""
    param_names = ["kernel", "size"]
    timer = DEVICE_CLOCK
    rounds = 4
    repeat = (5, 10, 10.0)  # per round: at least 5 samples, at most 10 or 10 s
    number = 1  # one engine sample per asv sample
    warmup_time = 0.0  # the sampler warmed the kernel up and verified it
    timeout = 900

    def setup(self, kernel_id: str, size: int) -> None:
        self.sampler = sampler(self.backend, kernel_id, size)

    def time_kernel(self, kernel_id: str, size: int) -> None:
        """Kernel-only time: the fastest engine sample of a short window (each one launch,
        or several back-to-back launches for kernels under 0.2 ms on CUDA)."""
        DEVICE_CLOCK.advance(fastest_ms(self.sampler.kernel_ms))


class _DeviceSuite(_KernelSuite):
    """A GPU backend: transfers are timed on their own as well."""

    def time_h2d(self, kernel_id: str, size: int) -> None:
        """Host-to-device copy of A and B from pageable memory (the fastest of a short
        window, as for the kernel); skipped on a CPU device."""
        DEVICE_CLOCK.advance(fastest_ms(lambda: self._transfer(kernel_id)[0]))

    def time_d2h(self, kernel_id: str, size: int) -> None:
        """Device-to-host copy of C to pageable memory; skipped on a CPU device."""
        DEVICE_CLOCK.advance(fastest_ms(lambda: self._transfer(kernel_id)[1]))

    def _transfer(self, kernel_id: str) -> tuple[float, float]:
        if str(self.sampler.info.get("device_type", "")).upper() == "CPU":
            # A few microseconds of memcpy inside host memory, moved by whatever else uses
            # the memory bus: nothing of the device's to track, only noise for the gate.
            raise SkipNotImplemented(f"{kernel_id} runs on a CPU device "
                                     "here: its h2d and d2h are copies within host memory")
        return self.sampler.transfer_ms()
