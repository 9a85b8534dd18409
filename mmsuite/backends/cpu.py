"""CPU backend: the C ladder through the cffi extension, and numpy (OpenBLAS) as reference.

Host memory is the device memory here, so h2d and d2h are empty. Each run is
timed with a monotonic wall clock around the C call; cffi releases the GIL for
the call's duration.

OpenMP's thread count is per calling thread and sticks once set, so the adapter
sets it before every execution (``RunOptions.threads``, else the count OpenMP
chose at load time) in the thread that launches, and records the count it used.
"""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np

from ..catalogue import Kernel
from ..host import blas_info
from ..layout import GemmCall
from .base import Backend, Execution, RunOptions

# A warm-up (when asked for) lasts at least this long: OpenBLAS's worker threads,
# used by numpy for the float64 reference of the previous measurement, keep
# spinning on the cores for about 0.1 s after their last call and would slow the
# first timed runs of an OpenMP rung.
WARMUP_FLOOR_S = 0.15

_DEFAULT_THREADS: int | None = None  # OpenMP's own choice, read before anyone changes it


def _load_extension():
    global _DEFAULT_THREADS
    try:
        from .. import _ckernels
    except ImportError as exc:
        return None, f"the C extension is not built ({exc}); reinstall with `pip install .`"
    if _DEFAULT_THREADS is None:
        _DEFAULT_THREADS = int(_ckernels.lib.mm_max_threads())
    return _ckernels, ""


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

    def __init__(self, options: RunOptions) -> None:
        if options.threads is not None and options.threads < 1:
            raise ValueError(f"threads must be >= 1, got {options.threads}")
        super().__init__(options)
        self._ext, self._reason = _load_extension()

    def probe(self) -> str:
        return ""  # numpy always works; C rungs report their own reason

    def kernel_reason(self, kernel: Kernel) -> str:
        if kernel.reference:
            return ""
        if self._ext is None:
            return self._reason
        if not hasattr(self._ext.lib, kernel.entry):
            return f"{kernel.entry} is not in the built extension; reinstall with `pip install .`"
        return ""

    @property
    def threads(self) -> int:
        """The OpenMP threads the C rungs run with under these options."""
        return self.options.threads or _DEFAULT_THREADS or os.cpu_count() or 1

    def execute(self, kernel: Kernel, call: GemmCall, repeats: int, warmup: int) -> Execution:
        c = np.empty(call.c_size, dtype=np.float32)
        if kernel.reference:
            launch = self._numpy_launch(call, c)
            limiter, threads = _blas_limiter(self.options.threads)
        else:
            launch = self._c_launch(kernel, call, c)
            # Set in this thread, right before the runs: the setting is per thread.
            self._ext.lib.mm_set_threads(self.threads)
            limiter, threads = contextlib.nullcontext(), int(self._ext.lib.mm_max_threads())
        def timed_run() -> float:
            if call.beta == 0.0:
                c.fill(np.nan)
            else:
                c[:] = call.c0
            start = time.perf_counter()
            launch()
            return (time.perf_counter() - start) * 1e3

        with limiter:
            warm_start, done = time.perf_counter(), 0
            while done < warmup or (done and time.perf_counter() - warm_start < WARMUP_FLOOR_S):
                timed_run()
                done += 1
            samples = [timed_run() for _ in range(repeats)]
        return Execution(output=c, kernel_ms=samples, info={"threads": threads})

    def _c_launch(self, kernel: Kernel, call: GemmCall, c: np.ndarray):
        ffi, lib = self._ext.ffi, self._ext.lib
        fn = getattr(lib, kernel.entry)
        a = ffi.cast("const float *", ffi.from_buffer(call.a))
        b = ffi.cast("const float *", ffi.from_buffer(call.b))
        cp = ffi.cast("float *", ffi.from_buffer(c))
        args = (call.m, call.n, call.k, call.batch, call.alpha, a, b, call.beta, cp)
        return lambda: fn(*args)

    @staticmethod
    def _numpy_launch(call: GemmCall, c: np.ndarray):
        # numpy's matmul on float32 calls OpenBLAS sgemm; the kernel layout is row-major.
        shape_a, shape_b = (call.batch, call.m, call.k), (call.batch, call.k, call.n)
        a, b = call.a.reshape(shape_a), call.b.reshape(shape_b)
        out = c.reshape(call.batch, call.m, call.n)

        def launch() -> None:
            if call.beta == 0.0:
                np.matmul(a, b, out=out)
                if call.alpha != 1.0:
                    np.multiply(out, np.float32(call.alpha), out=out)
            else:
                product = np.matmul(a, b)
                product *= np.float32(call.alpha)
                np.multiply(out, np.float32(call.beta), out=out)
                np.add(out, product, out=out)

        return launch

    def environment(self) -> dict:
        env: dict = {"omp_threads": self.threads, "numpy": np.__version__}
        if self._ext is not None:
            env["cflags"] = self._ext.ffi.string(self._ext.lib.mm_cflags()).decode()
        limiter, _ = _blas_limiter(self.options.threads)
        with limiter:  # the BLAS thread count the reference runs with
            env["blas"] = blas_info()
        return env
