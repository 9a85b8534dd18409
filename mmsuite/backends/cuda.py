"""CUDA backend: the cuda/ ladder compiled with NVRTC through CuPy, and cuBLAS as reference.

CuPy is imported lazily, on the first probe or run, so that ``import mmsuite``
and listing the catalogue never need it. Before that import the adapter sets
``NVIDIA_TF32_OVERRIDE=0`` and drops ``CUPY_TF32``: cuBLAS then runs plain FP32
SGEMM (TF32 would fail verification, which is how the tests prove it is off).

Compilation
    Each (source, defines) pair is compiled once per process into a
    ``cupy.RawModule`` (NVRTC, the current device's architecture) and kept;
    CuPy also caches the binary on disk (``~/.cupy/kernel_cache``), keyed by
    the code and the options. Local ``#include "x.cuh"`` lines are expanded
    into the code before compiling, so that the on-disk key covers the headers
    too (NVRTC's own include would let a stale binary survive a header edit).
    The source's folder is also passed with ``-I``. Kernels are plain
    ``extern "C"`` functions (no ``name_expressions``).

Launch geometry (a catalogue kernel's ``launch`` mapping)
    ``block``    (x, y) threads per block; default (16, 16).
    ``tile``     (tile_x, tile_y): output elements one block covers along grid x
                 and grid y; default ``block`` (one output per thread).
    ``grid_x``   "rows" (grid.x walks M, grid.y walks N) or "cols" (grid.x walks
                 N, grid.y walks M); default "rows" for column-major kernels,
                 "cols" for row-major ones.
    ``smem``     dynamic shared memory in bytes; default 0. Above 48 KB the
                 kernel's ``MaxDynamicSharedMemorySize`` attribute is raised.
    ``defines``  {NAME: value}, passed to NVRTC as ``-DNAME=value``: one source
                 file serves several rungs; the catalogue's ``entry`` names the
                 ``__global__`` function.
    ``split_k``  number of slices the K loop is cut into; default 1. The grid
                 gets ``batch * split_k`` blocks along z and the kernel reads
                 its slice as ``blockIdx.z % split_k``, its matrix as
                 ``blockIdx.z / split_k``. Only for kernels written for it.
    The grid is (ceil(dimx / tile_x), ceil(dimy / tile_y), batch * split_k),
    where dimx and dimy are the C sizes that ``grid_x`` names. The kernel
    arguments are always (M, N, K, alpha, A, B, beta, C), see cuda/common.cuh.

Timing (one CUDA stream, CUDA events, no synchronisation between events)
    Every run, warm-up or timed: h2d of A and B (and C0 when beta != 0, which
    is also C's reset), then, when beta == 0, C is filled with NaN on the device
    (not timed), then the launch, then d2h of C. Events around the copies give
    ``h2d_ms`` and ``d2h_ms``, events around the launch alone give
    ``kernel_ms``. The host waits once per run, after the d2h. Host buffers
    are pageable numpy arrays by default and page-locked (``cupyx.empty_pinned``)
    with ``RunOptions(pinned=True)``; filling the pinned buffers is not timed.

cuBLAS (``cuda.cublas``)
    ``cupy.matmul`` on float32 (cuBLAS SGEMM, batched as strided batched) in
    the row-major layout. With alpha == 1 and beta == 0 the timed region is the
    matmul alone; otherwise it is the matmul into a scratch buffer plus one fused
    elementwise kernel ``C = alpha * P + beta * C``, and both are timed.
"""

from __future__ import annotations

import os
import sys
from functools import cached_property
from typing import Any

import numpy as np

from ..catalogue import Kernel
from ..layout import GemmCall
from ..problem import Problem
from ..sources import read_source, source_path
from .base import Backend, Execution, RunOptions

INSTALL_HINT = "install CuPy with `pip install 'mmsuite[cuda]'`"
MAX_STATIC_SMEM = 48 * 1024
# Device memory kept free beyond the buffers themselves (CuPy pools, cuBLAS workspace).
_HEADROOM = 256 * 1024 * 1024

_cupy = None
_cupy_error = ""
# Compiled modules and kernels, shared by every adapter instance of the process.
_MODULES: dict[tuple, Any] = {}
_FUNCTIONS: dict[tuple, Any] = {}
_cupy_preimported = False


class DeviceMemoryError(MemoryError):
    """The problem does not fit in the GPU's free memory."""


class CudaLaunchError(RuntimeError):
    """A kernel launch or its execution failed; the message holds CUDA's error text."""


def _import_cupy():
    """Import CuPy once, with TF32 forced off first. Returns the module or None."""
    global _cupy, _cupy_error
    if _cupy is not None or _cupy_error:
        return _cupy
    global _cupy_preimported
    _cupy_preimported = "cupy" in sys.modules
    os.environ["NVIDIA_TF32_OVERRIDE"] = "0"
    os.environ.pop("CUPY_TF32", None)
    try:
        import cupy
        import cupyx  # noqa: F401  (pinned host buffers)
    except Exception as exc:  # ImportError, or a broken CUDA install
        _cupy_error = f"CuPy is not importable ({type(exc).__name__}: {exc}); {INSTALL_HINT}"
        return None
    _cupy = cupy
    return cupy


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class CudaBackend(Backend):
    name = "cuda"

    def __init__(self, options: RunOptions) -> None:
        super().__init__(options)
        self._stream = None

    # -------------------------------------------------------------- probing
    def probe(self) -> str:
        cp = _import_cupy()
        if cp is None:
            return _cupy_error
        try:
            count = cp.cuda.runtime.getDeviceCount()
        except Exception as exc:
            return (f"no CUDA device found ({type(exc).__name__}: {exc}); CUDA kernels need an "
                    "NVIDIA GPU and its driver")
        if count < 1:
            return "no CUDA device found; CUDA kernels need an NVIDIA GPU and its driver"
        return ""

    def kernel_reason(self, kernel: Kernel) -> str:
        if kernel.reference:
            return ""
        if not kernel.source or not kernel.entry:
            return f"{kernel.id} names no source or entry in the catalogue"
        if not source_path(kernel.source).is_file():
            return f"source {kernel.source} is missing from this installation"
        return ""

    # ---------------------------------------------------------- compilation
    def function(self, kernel: Kernel) -> Any:
        """The compiled ``cupy.RawKernel`` of ``kernel`` (compiled once per process)."""
        defines = tuple(sorted((str(k), str(v)) for k, v in
                               dict(kernel.launch.get("defines", {})).items()))
        key = (kernel.source, defines, kernel.entry)
        fn = _FUNCTIONS.get(key)
        if fn is None:
            module = self._module(kernel.source, defines)
            try:
                fn = module.get_function(kernel.entry)
            except Exception as exc:
                raise CudaLaunchError(f"{kernel.id}: cannot load {kernel.entry} from "
                                      f"{kernel.source}: {exc}") from exc
            smem = int(kernel.launch.get("smem", 0))
            if smem > MAX_STATIC_SMEM:
                fn.max_dynamic_shared_size_bytes = smem
            _FUNCTIONS[key] = fn
        return fn

    def _module(self, source: str, defines: tuple[tuple[str, str], ...]) -> Any:
        key = (source, defines)
        module = _MODULES.get(key)
        if module is None:
            cp = self._cupy
            code = read_source(source)
            options = ("-std=c++17", f"-I{source_path(source).parent}") + tuple(
                f"-D{name}={value}" for name, value in defines)
            try:
                module = cp.RawModule(code=code, options=options, backend="nvrtc")
                module.compile()
            except Exception as exc:
                raise CudaLaunchError(f"NVRTC failed on {source} {dict(defines)}: {exc}") from exc
            _MODULES[key] = module
        return module

    @property
    def _cupy(self):
        cp = _import_cupy()
        if cp is None:
            raise RuntimeError(_cupy_error)
        return cp

    # ------------------------------------------------------------- geometry
    @staticmethod
    def geometry(kernel: Kernel, call: GemmCall) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        """(grid, block, dynamic shared bytes) of ``kernel`` on ``call`` (module docstring)."""
        launch = kernel.launch
        block = tuple(int(x) for x in launch.get("block", (16, 16)))
        tile = tuple(int(x) for x in launch.get("tile", block[:2] if len(block) > 1
                                                 else (block[0], 1)))
        walk = launch.get("grid_x", "rows" if kernel.layout == "col" else "cols")
        if walk not in ("rows", "cols"):
            raise ValueError(f"{kernel.id}: grid_x must be 'rows' or 'cols', got {walk!r}")
        dim_x, dim_y = (call.m, call.n) if walk == "rows" else (call.n, call.m)
        split_k = int(launch.get("split_k", 1))
        grid = (_ceil_div(dim_x, tile[0]), _ceil_div(dim_y, tile[1]), call.batch * split_k)
        if grid[1] > 65535 or grid[2] > 65535:
            raise ValueError(f"{kernel.id}: grid {grid} exceeds CUDA's y/z limit of 65535")
        return grid, block, int(launch.get("smem", 0))

    # ------------------------------------------------------------ execution
    def _check_memory(self, nbytes: int, what: str) -> None:
        free, total = self._cupy.cuda.runtime.memGetInfo()
        if nbytes + _HEADROOM > free:
            raise DeviceMemoryError(
                f"{what} needs {nbytes / 2**30:.2f} GiB of GPU memory but only "
                f"{free / 2**30:.2f} GiB of {total / 2**30:.2f} GiB is free; use a smaller "
                "shape or batch")

    def _host_buffer(self, source: np.ndarray | None, size: int) -> np.ndarray:
        if self.options.pinned:
            import cupyx

            buf = cupyx.empty_pinned((size,), dtype=np.float32)
            if source is not None:
                buf[:] = source
            return buf
        if source is not None:
            return np.ascontiguousarray(source, dtype=np.float32)
        return np.empty(size, dtype=np.float32)

    def execute(self, kernel: Kernel, call: GemmCall, repeats: int, warmup: int) -> Execution:
        cp = self._cupy
        runtime = cp.cuda.runtime
        scratch = kernel.reference and not (call.alpha == 1.0 and call.beta == 0.0)
        elems = call.a.size + call.b.size + call.c_size * (2 if scratch else 1)
        self._check_memory(4 * elems, f"{kernel.id} on {call.batch}x{call.m}x{call.n}x{call.k}")

        if kernel.reference:
            launch = self._cublas_launch(call, scratch)
            info: dict = {"cublas": "cupy.matmul", "epilogue_timed": scratch}
        else:
            launch, info = self._kernel_launch(kernel, call)
        info["pinned"] = self.options.pinned
        dev_a = cp.empty(call.a.size, dtype=cp.float32)
        dev_b = cp.empty(call.b.size, dtype=cp.float32)
        dev_c = cp.empty(call.c_size, dtype=cp.float32)

        host_a = self._host_buffer(call.a, call.a.size)
        host_b = self._host_buffer(call.b, call.b.size)
        host_c0 = self._host_buffer(call.c0, call.c_size) if call.beta != 0.0 else None
        host_c = self._host_buffer(None, call.c_size)
        if self._stream is None:
            self._stream = cp.cuda.Stream(non_blocking=True)
        stream = self._stream
        h2d, d2h = runtime.memcpyHostToDevice, runtime.memcpyDeviceToHost
        copies_in = [(dev_a, host_a), (dev_b, host_b)] + (
            [(dev_c, host_c0)] if host_c0 is not None else [])

        samples: dict[str, list[float]] = {"h2d": [], "kernel": [], "d2h": []}
        try:
            with stream:
                for run in range(warmup + repeats):
                    ev = [cp.cuda.Event() for _ in range(5)]
                    ev[0].record(stream)
                    for dev, host in copies_in:
                        runtime.memcpyAsync(dev.data.ptr, host.ctypes.data, host.nbytes, h2d,
                                            stream.ptr)
                    ev[1].record(stream)
                    if host_c0 is None:
                        dev_c.fill(np.float32(np.nan))
                    ev[2].record(stream)
                    launch(dev_a, dev_b, dev_c)
                    ev[3].record(stream)
                    runtime.memcpyAsync(host_c.ctypes.data, dev_c.data.ptr, host_c.nbytes, d2h,
                                        stream.ptr)
                    ev[4].record(stream)
                    ev[4].synchronize()
                    if run >= warmup:
                        samples["h2d"].append(cp.cuda.get_elapsed_time(ev[0], ev[1]))
                        samples["kernel"].append(cp.cuda.get_elapsed_time(ev[2], ev[3]))
                        samples["d2h"].append(cp.cuda.get_elapsed_time(ev[3], ev[4]))
        except Exception as exc:
            raise CudaLaunchError(f"{kernel.id} failed on {call.batch}x{call.m}x{call.n}x"
                                  f"{call.k}: {type(exc).__name__}: {exc}") from exc
        finally:
            del dev_a, dev_b, dev_c
            cp.get_default_memory_pool().free_all_blocks()
        output = np.array(host_c, copy=True) if self.options.pinned else host_c
        return Execution(output=output, kernel_ms=samples["kernel"], h2d_ms=samples["h2d"],
                         d2h_ms=samples["d2h"], info=info)

    def _kernel_launch(self, kernel: Kernel, call: GemmCall):
        fn = self.function(kernel)
        grid, block, smem = self.geometry(kernel, call)
        args_tail = (np.int32(call.m), np.int32(call.n), np.int32(call.k),
                     np.float32(call.alpha))
        beta = np.float32(call.beta)

        def launch(a, b, c) -> None:
            fn(grid, block, args_tail + (a, b, beta, c), shared_mem=smem)

        info: dict = {"grid": list(grid), "block": list(block), "smem": smem}
        if self.options.profile:
            info["profile"] = {
                "registers": int(fn.num_regs),
                "static_shared_bytes": int(fn.shared_size_bytes),
                "dynamic_shared_bytes": smem,
                "local_bytes": int(fn.local_size_bytes),
                "max_threads_per_block": int(fn.max_threads_per_block),
            }
        return launch, info

    def _cublas_launch(self, call: GemmCall, scratch: bool):
        cp = self._cupy
        shape_a, shape_b = (call.batch, call.m, call.k), (call.batch, call.k, call.n)
        shape_c = (call.batch, call.m, call.n)
        if call.layout != "row":  # the catalogue lists cuBLAS as row-major
            raise ValueError("cuda.cublas is launched in the row-major layout")
        alpha, beta = np.float32(call.alpha), np.float32(call.beta)
        product = cp.empty(shape_c, dtype=cp.float32) if scratch else None
        epilogue = cp.ElementwiseKernel(
            "float32 p, float32 alpha, float32 beta", "float32 c",
            "c = beta == 0.0f ? alpha * p : alpha * p + beta * c", "mmsuite_axpby")

        def launch(a, b, c) -> None:
            a3, b3, c3 = a.reshape(shape_a), b.reshape(shape_b), c.reshape(shape_c)
            if product is None:
                cp.matmul(a3, b3, out=c3)
            else:
                cp.matmul(a3, b3, out=product)
                epilogue(product, alpha, beta, c3)

        return launch

    # ---------------------------------------------------------- environment
    @cached_property
    def _env(self) -> dict:
        cp = self._cupy
        runtime = cp.cuda.runtime
        dev = cp.cuda.Device()
        props = runtime.getDeviceProperties(dev.id)
        name = props.get("name", b"?")
        env = {
            "gpu": name.decode() if isinstance(name, bytes) else str(name),
            "compute_capability": dev.compute_capability,
            "sm_count": int(props.get("multiProcessorCount", 0)),
            "memory_gib": round(props.get("totalGlobalMem", 0) / 2**30, 1),
            "l2_bytes": int(props.get("l2CacheSize", 0)),
            "driver": runtime.driverGetVersion(),
            "cuda_runtime": runtime.runtimeGetVersion(),
            "cupy": cp.__version__,
            "tf32_override": os.environ.get("NVIDIA_TF32_OVERRIDE"),
            "cupy_tf32": os.environ.get("CUPY_TF32"),
            # True when CuPy was imported before this adapter could set the TF32 variables.
            "cupy_imported_early": _cupy_preimported,
        }
        # clockRate left cudaDeviceProp in CUDA 13; the attribute query still has it (kHz).
        for key, attr in (("sm_clock_mhz", 13), ("memory_clock_mhz", 36)):
            try:
                env[key] = runtime.deviceGetAttribute(attr, dev.id) // 1000
            except Exception:
                value = props.get("clockRate" if attr == 13 else "memoryClockRate")
                if value:
                    env[key] = int(value) // 1000
        try:
            env["nvrtc"] = ".".join(map(str, cp.cuda.nvrtc.getVersion()))
        except Exception:
            pass
        if env.get("sm_clock_mhz"):
            # FP32 peak: SMs x 128 lanes x 2 flops (FMA) x clock.
            env["fp32_peak_tflops"] = round(
                env["sm_count"] * 128 * 2 * env["sm_clock_mhz"] * 1e6 / 1e12, 1)
        return env

    def environment(self) -> dict:
        if self.probe():
            return {}
        return dict(self._env)

    def reference(self, problem: Problem, inputs: tuple[np.ndarray, ...]) -> np.ndarray | None:
        """alpha·A·B + beta·C0 in float64 on the GPU; None (host fallback) when it does not fit."""
        if self.probe():
            return None
        cp = self._cupy
        a, b, c0 = inputs
        nbytes = 8 * (a.size + b.size + 2 * c0.size)
        free, _ = cp.cuda.runtime.memGetInfo()
        if nbytes + _HEADROOM > free:
            return None
        try:
            da, db = cp.asarray(a, dtype=cp.float64), cp.asarray(b, dtype=cp.float64)
            ref = cp.matmul(da, db)
            del da, db
            if problem.alpha != 1.0:
                ref *= problem.alpha
            if problem.beta != 0.0:
                ref += problem.beta * cp.asarray(c0, dtype=cp.float64)
            out = cp.asnumpy(ref)
        finally:
            cp.get_default_memory_pool().free_all_blocks()
        return out

