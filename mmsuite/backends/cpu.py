"""CPU backend: the C ladder through its cffi extensions (one per rung, in
``mmsuite._cladder``), and numpy (OpenBLAS) as reference.

Host memory is the device memory here, so a session has no transfers. Each
sample is timed with a monotonic wall clock around the C call (cffi releases
the GIL for the call's duration) or the numpy call. ``scrub_l2`` writes a buffer
twice the size of the largest CPU cache.

OpenMP's thread count is per calling thread and sticks once set, so ``prepare``
sets it (``RunOptions.threads``, else the count OpenMP chose at load time) in
the thread that will launch, and records the count it used. A numpy session
holds the BLAS thread limit (threadpoolctl) while it is open. The engine
alternates every C rung's samples with a numpy session on the same call
(``interleaves_reference``).

A session's operands and C are copies placed at the start of mappings of their
own, aligned to 2 MiB and backed by huge pages where the OS grants them
(``placed``). Where ordinary heap memory put them, the caches' sets (indexed by
physical address) saw a different conflict pattern in every process: two
processes of the same code on a 2-core machine differed by up to 13% at 1024^3
(cpu.omp_tiled), which no number of samples averages away.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import importlib
import importlib.util
import mmap
import os
import pkgutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import shared_objects
from ..host import blas_info
from ..identity import C_LADDER, built_rung
from . import callables, cpu_build
from .base import (
    Backend,
    KernelUnavailable,
    RunOptions,
    Session,
    Timer,
    WallTimer,
)

if TYPE_CHECKING:
    from ..layout import GemmCall
    from .base import KernelSpec

# A warm-up (when asked for) lasts at least this long: OpenBLAS's worker threads,
# used by numpy for the float64 reference or the interleaved reference samples,
# keep spinning on the cores for about 0.1 s after their last call and would slow
# the first timed runs of an OpenMP rung.
WARMUP_FLOOR_S = 0.15

_DEFAULT_THREADS: int | None = None  # OpenMP's own choice, read before anyone changes it

HUGE_PAGE = 2 << 20  # bytes: x86-64's transparent huge page


def placed_empty(count: int, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """A flat array at the start of an anonymous mapping of its own, aligned to
    ``HUGE_PAGE`` and advised to use huge pages, so that where it lands in the caches is
    the same in every process (page-aligned at least, where huge pages are refused).
    The mapping is private: a shared one (mmap's default) is shared memory, which
    transparent huge pages leave out unless the system says otherwise."""
    itemsize = np.dtype(dtype).itemsize
    size = max(count, 1) * itemsize
    private = {"flags": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS} if hasattr(
        mmap, "MAP_ANONYMOUS") else {}
    mapping = mmap.mmap(-1, -(-size // HUGE_PAGE) * HUGE_PAGE + HUGE_PAGE, **private)
    raw = np.frombuffer(mapping, dtype=np.uint8)  # the array keeps the mapping alive
    start = -raw.ctypes.data % HUGE_PAGE
    if hasattr(mmap, "MADV_HUGEPAGE"):  # Linux only
        with contextlib.suppress(OSError):  # refused where THP is off: still page-aligned
            mapping.madvise(mmap.MADV_HUGEPAGE, start, len(raw) - start)
    return raw[start:start + count * itemsize].view(dtype)


def placed(array: np.ndarray) -> np.ndarray:
    """A flat copy of ``array`` in memory of its own (``placed_empty``)."""
    out = placed_empty(array.size, array.dtype)
    out[:] = array.reshape(-1)
    return out


_REINSTALL = "reinstall with `pip install .`"


@contextlib.contextmanager
def cpu_set_kept() -> Iterator[None]:
    """The calling thread keeps its CPU set through the block.

    libgomp, loaded with OMP_PROC_BIND or OMP_PLACES exported, binds the thread that loads
    it to the first place (CPU 0); every thread and process started from that thread later
    (the host worker, OpenBLAS's threads) would inherit the one CPU, and OpenMP would count
    one CPU for its default team. The team threads it starts are bound to their places on
    creation, so the user's binding still holds inside the kernels.
    """
    if not hasattr(os, "sched_getaffinity"):  # not Linux: nothing narrows it
        yield
        return
    before = os.sched_getaffinity(0)
    try:
        yield
    finally:
        if os.sched_getaffinity(0) != before:
            os.sched_setaffinity(0, before)


def _load_rung(name: str):
    """The built extension of C rung ``name``, and why not where it is not built."""
    global _DEFAULT_THREADS
    module = f"mmsuite.{C_LADDER}.{name}"
    spec = None if module in sys.modules else importlib.util.find_spec(module)
    wrong = shared_objects.damage(Path(spec.origin)) if spec and spec.origin else ""
    if wrong:  # loading it could kill this process (SIGBUS): a reason, not a crash
        return None, f"the C extension of {name} is damaged: {wrong}; {_REINSTALL}"
    try:
        with cpu_set_kept():
            extension = importlib.import_module(module)
    except ImportError as exc:
        return None, f"the C extension of {name} is not built ({exc}); {_REINSTALL}"
    if _DEFAULT_THREADS is None:  # every rung shares one OpenMP runtime and its setting
        _DEFAULT_THREADS = int(extension.lib.mm_max_threads())
    return extension, ""


@functools.cache
def ladder_cflags() -> str | None:
    """The flags the installed C ladder was built with (None where no rung is built): a
    plugin's C kernel is built with the same, and the environment records them."""
    extension = _any_rung()
    return None if extension is None else extension.ffi.string(extension.lib.mm_cflags()).decode()


def _plugin_rung(kernel: KernelSpec) -> tuple:
    """A plugin's C kernel built with the ladder's flags (``cpu_build``), or None and why."""
    cflags = ladder_cflags()
    if cflags is None:
        return None, f"no C rung is built to take its flags from; {_REINSTALL}"
    try:
        return cpu_build.load(kernel.source, kernel.entry, cflags), ""
    except cpu_build.CBuildError as exc:
        return None, str(exc)


def _rung_of(kernel: KernelSpec) -> tuple:
    """A C rung's built extension and its entry's name, or None and why it cannot run."""
    if not kernel.entry or not kernel.source:
        return None, "", f"{kernel.id} names no entry or source in the catalogue"
    extension, reason = (_plugin_rung(kernel) if kernel.plugin
                         else _load_rung(built_rung(kernel.source)))
    if extension is None:
        return None, "", reason
    if not hasattr(extension.lib, kernel.entry):
        return None, "", f"{kernel.entry} is not in its built extension; {_REINSTALL}"
    return extension, kernel.entry, ""


def _any_rung():
    """One built rung's extension (for what all share: OpenMP's default, the C flags), or
    None where none is built."""
    package = importlib.import_module(f"mmsuite.{C_LADDER}")
    for found in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        extension, _ = _load_rung(found.name)
        if extension is not None:
            return extension
    return None


def _blas_limiter(threads: int | None):
    """A context capping numpy's BLAS at ``threads``, and the count it runs with.

    Needs threadpoolctl; without it BLAS keeps its own setting and the count is
    reported as None (unknown).
    """
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        return contextlib.nullcontext(), None
    if threads:
        return threadpool_limits(limits=threads, user_api="blas"), threads
    pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    return contextlib.nullcontext(), (pools[0]["num_threads"] if pools else None)


class CpuBackend(Backend):
    name = "cpu"
    interleaves_reference = True

    def __init__(self, options: RunOptions) -> None:
        if options.threads is not None and options.threads < 1:
            raise ValueError(f"threads must be >= 1, got {options.threads}")
        super().__init__(options)
        self._any = _any_rung()

    def probe(self) -> str:
        return ""  # numpy always works; C rungs report their own reason

    def kernel_reason(self, kernel: KernelSpec) -> str:
        return "" if kernel.reference or kernel.function else _rung_of(kernel)[2]

    def build_flags(self, kernel: KernelSpec) -> str:
        return (ladder_cflags() or "") if kernel.plugin and kernel.source else ""

    @property
    def threads(self) -> int:
        """The OpenMP threads the C rungs run with under these options."""
        return self.options.threads or _DEFAULT_THREADS or os.cpu_count() or 1

    def prepare(self, kernel: KernelSpec, call: GemmCall) -> Session:
        call = dataclasses.replace(call, a=placed(call.a), b=placed(call.b))
        session = _CpuSession(kernel, call)
        if kernel.reference or kernel.function:
            # numpy and a plugin's Python callable run under the same BLAS thread limit.
            limiter, threads = _blas_limiter(self.options.threads)
            session.hold(limiter)
            session.launch_fn = _numpy_launch(call, session.c) if kernel.reference else \
                callables.launch(kernel, callables.gemm_views(call, call.a, call.b, session.c),
                                 call)
        else:
            extension, entry, reason = _rung_of(kernel)
            if extension is None:
                raise KernelUnavailable(reason)
            session.launch_fn = _c_launch(getattr(extension.lib, entry), extension.ffi,
                                          kernel.id, call, session.c)
            # Set in this thread, where the engine launches: the setting is per thread.
            extension.lib.mm_set_threads(self.threads)
            threads = int(extension.lib.mm_team_threads())  # what a region gets, not asks
        session.info["threads"] = threads
        return session

    def environment(self) -> dict:
        env: dict = {"omp_threads": self.threads, "numpy": np.__version__}
        if self._any is not None:  # every rung is built with the same flags
            env["cflags"] = ladder_cflags()
        limiter, _ = _blas_limiter(self.options.threads)
        with limiter:  # the BLAS thread count the reference runs with
            env["blas"] = blas_info()
        return env


def _c_launch(fn: Callable, ffi, kernel_id: str, call: GemmCall,
              c: np.ndarray) -> Callable[[], None]:
    a = ffi.cast("const float *", ffi.from_buffer(call.a))
    b = ffi.cast("const float *", ffi.from_buffer(call.b))
    cp = ffi.cast("float *", ffi.from_buffer(c))
    args = (call.m, call.n, call.k, call.batch, call.alpha, a, b, call.beta, cp)

    def launch() -> None:
        # A rung that cannot allocate its buffers sets errno and fails rather than
        # run another algorithm under its name: say so instead of a NaN mismatch.
        ffi.errno = 0
        fn(*args)
        if ffi.errno == errno.ENOMEM:
            raise MemoryError(f"{kernel_id} could not allocate its work buffers")

    return launch


def _numpy_launch(call: GemmCall, c: np.ndarray) -> Callable[[], None]:
    # numpy's matmul on float32 calls OpenBLAS sgemm; the kernel layout is row-major.
    shape_a, shape_b = (call.batch, call.m, call.k), (call.batch, call.k, call.n)
    a, b = call.a.reshape(shape_a), call.b.reshape(shape_b)
    out = c.reshape(call.batch, call.m, call.n)
    alpha, beta = np.float32(call.alpha), np.float32(call.beta)

    # NaN and Inf inputs make NaN outputs as IEEE has them: no warning for what is asked.
    @np.errstate(invalid="ignore", over="ignore")
    def launch() -> None:
        if call.beta == 0.0:
            np.matmul(a, b, out=out)
            if call.alpha != 1.0:
                np.multiply(out, alpha, out=out)
        else:
            product = np.matmul(a, b)
            product *= alpha
            np.multiply(out, beta, out=out)
            np.add(out, product, out=out)

    return launch


def _last_level_cache_bytes() -> int:
    """The largest CPU cache on this machine (sysfs), or 32 MiB when it cannot be read."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        with contextlib.suppress(ValueError):
            sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes, default=32 * 2**20)


# Involuntary context switches per second of a sample above which another process is
# taking the cores: a quiet machine preempts a few times a second (kernel threads), a
# busy loop sharing a core every few milliseconds.
DISTURBED_SWITCHES_PER_S = 50.0


class PreemptionTimer(WallTimer):
    """The wall clock, plus the process's involuntary context switches during the sample."""

    def __init__(self) -> None:
        super().__init__()
        self._switches = 0

    def start(self) -> None:
        self._switches = _involuntary_switches()
        super().start()

    def stop(self) -> None:
        super().stop()
        self._switches = _involuntary_switches() - self._switches

    def disturbed(self) -> bool:
        seconds = self.elapsed_ms() / 1e3
        return seconds > 0 and self._switches / seconds > DISTURBED_SWITCHES_PER_S


def _involuntary_switches() -> int:
    """Involuntary context switches of every thread of this process so far (0 if unknown)."""
    try:
        import resource
    except ImportError:  # not on every platform
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


class _CpuSession(Session):
    """A C rung or numpy on host buffers: launches return when the work is done."""

    warmup_floor_s = WARMUP_FLOOR_S

    def __init__(self, kernel: KernelSpec, call: GemmCall) -> None:
        super().__init__(kernel, call)
        self.c = placed_empty(call.c_size)
        self.launch_fn: Callable[[], None] = lambda: None
        self._held = contextlib.ExitStack()
        self._scrub: np.ndarray | None = None

    def hold(self, context: contextlib.AbstractContextManager) -> None:
        """Keep ``context`` entered for the session's lifetime (a BLAS thread limit)."""
        self._held.enter_context(context)

    def reset_c(self) -> None:
        if self.call.beta == 0.0:
            self.c.fill(np.nan)
        else:
            self.c[:] = self.call.c0

    def launch(self) -> None:
        self.launch_fn()

    def timer(self) -> Timer:
        return PreemptionTimer()

    def scrub_l2(self) -> None:
        # Writing twice the largest cache evicts A, B and C from every level.
        if self._scrub is None:
            self._scrub = np.zeros(2 * _last_level_cache_bytes() // 8, dtype=np.float64)
        self._scrub += 1.0

    def output(self) -> np.ndarray:
        return self.c.copy()

    def close(self) -> None:
        self._held.close()
        self._scrub = None
