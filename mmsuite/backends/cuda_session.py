"""The CUDA adapter's session: buffers of one call on one stream, launches, timer, transfers.

See ``mmsuite.backends.cuda`` for the whole picture and ``cuda_timing`` for the
timer. ``CudaSession.steps`` are the launches of one sample (callables that
enqueue on the current stream); the adapter fills them from the rung's
``CudaPlan`` or with ``cublas_steps``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..launch import TensorMaps
from . import cuda_tensormap, cuda_timing
from .base import KernelFailed, Session, Timer

if TYPE_CHECKING:
    from ..launch import CudaPlan
    from ..layout import GemmCall
    from .base import KernelSpec


class CudaLaunchError(KernelFailed):
    """A kernel launch or its execution failed; the message holds CUDA's error text."""


def kernel_steps(session: CudaSession, plan: CudaPlan, function: Callable[..., Any],
                 profile: bool) -> list[Callable[[], None]]:
    """The launches of ``plan``'s steps on the session's buffers; ``function(source, entry,
    defines, smem, arch)`` gives a compiled kernel. ``TensorMaps`` arguments are encoded
    over the buffers once, here. Records each step's geometry in ``info``."""
    cp, call, kernel = session.cp, session.call, session.kernel
    # Zeroed once: rung 24's fused variants keep arrival counters there, which each
    # launch leaves zero again.
    work = cp.zeros(max(plan.workspace, 1), dtype=cp.float32)
    session.keep.append(work)
    values = {"m": np.int32(call.m), "n": np.int32(call.n), "k": np.int32(call.k),
              "batch": np.int32(call.batch), "alpha": np.float32(call.alpha),
              "beta": np.float32(call.beta), "a": session.a, "b": session.b,
              "c": session.c, "work": work}
    steps: list[Callable[[], None]] = []
    described: list[dict[str, Any]] = []  # each step's geometry, for the record

    def value(arg: str | int | float | TensorMaps) -> Any:
        if isinstance(arg, str):
            return values[arg]
        if isinstance(arg, TensorMaps):
            return cuda_tensormap.kernel_argument(arg, values)
        return np.int32(arg) if isinstance(arg, int) else np.float32(arg)

    for step in plan.steps:
        fn = function(step.source or kernel.source, step.entry or kernel.entry,
                      step.defines, step.smem, step.arch)
        args = tuple(value(a) for a in step.args)
        steps.append(functools.partial(fn, step.grid, step.block, args, shared_mem=step.smem))
        described.append({"entry": step.entry or kernel.entry, "grid": list(step.grid),
                          "block": list(step.block), "smem": step.smem})
        if profile:
            described[-1]["profile"] = {
                "registers": int(fn.num_regs),
                "static_shared_bytes": int(fn.shared_size_bytes),
                "dynamic_shared_bytes": step.smem,
                "local_bytes": int(fn.local_size_bytes),
                "max_threads_per_block": int(fn.max_threads_per_block)}
    session.info.update(described[0])  # the main kernel's geometry, as a one-step rung has
    if len(described) > 1:
        session.info["steps"] = described
    session.info.update(dict(plan.info))
    if plan.workspace:  # a split plan's partial sums: bytes the row moves (mmsuite.roof)
        session.info["workspace_bytes"] = 4 * plan.workspace
    return steps


# cublasMath_t values (cublas_api.h), for CuPy builds that do not export the names.
CUBLAS_DEFAULT_MATH = 0
CUBLAS_TF32_TENSOR_OP_MATH = 3


def with_math_mode(cp: Any, mode: int, fn: Callable[[], Any]) -> Callable[[], None]:
    """``fn`` run with cuBLAS's math mode set to ``mode`` on CuPy's handle, the previous
    mode restored after it (the mode is the library's per-handle setting, not the
    process's: other callers of the handle see their own)."""
    cublas = cp.cuda.cublas

    def call() -> None:
        handle = cp.cuda.device.get_cublas_handle()
        previous = cublas.getMathMode(handle)
        cublas.setMathMode(handle, mode)
        try:
            fn()
        finally:
            cublas.setMathMode(handle, previous)

    return call


def _sgemm(cp: Any, session: CudaSession, mode: int) -> Callable[[], None]:
    """cublasSgemmStridedBatched on the row-major call (column-major C^T = B^T A^T), alpha
    and beta included, with the handle's math mode set to ``mode``."""
    call, cublas = session.call, cp.cuda.cublas
    scalars = np.array([call.alpha, call.beta], dtype=np.float32)
    session.keep.append(scalars)
    m, n, k = call.m, call.n, call.k

    def sgemm() -> None:
        handle = cp.cuda.device.get_cublas_handle()
        cublas.setStream(handle, session.stream.ptr)
        cublas.sgemmStridedBatched(
            handle, 0, 0, n, m, k, scalars.ctypes.data, session.b.data.ptr, n, k * n,
            session.a.data.ptr, k, m * k, scalars.ctypes.data + 4, session.c.data.ptr, n,
            m * n, call.batch)

    return with_math_mode(cp, mode, sgemm)


def cublas_steps(cp: Any, session: CudaSession, precision: str = "fp32"
                 ) -> list[Callable[[], None]]:
    """cuBLAS SGEMM in the row-major layout. FP32: ``cupy.matmul`` (strided batched) with
    the default math mode where alpha == 1 and beta == 0, else one cublasSgemmStridedBatched
    with alpha and beta (a CuPy elementwise epilogue would be compiled with -ftz=true and
    flush subnormal results). TF32: one cublasSgemmStridedBatched with the TF32 math mode."""
    call = session.call
    if call.layout != "row":  # the catalogue lists cuBLAS as row-major
        raise ValueError("cuda.cublas is launched in the row-major layout")
    if precision == "tf32":
        return [_sgemm(cp, session, getattr(cp.cuda.cublas, "CUBLAS_TF32_TENSOR_OP_MATH",
                                            CUBLAS_TF32_TENSOR_OP_MATH))]
    default = getattr(cp.cuda.cublas, "CUBLAS_DEFAULT_MATH", CUBLAS_DEFAULT_MATH)
    if (call.alpha, call.beta) != (1.0, 0.0):
        return [_sgemm(cp, session, default)]
    a3 = session.a.reshape(call.batch, call.m, call.k)
    b3 = session.b.reshape(call.batch, call.k, call.n)
    c3 = session.c.reshape(call.batch, call.m, call.n)
    return [with_math_mode(cp, default, functools.partial(cp.matmul, a3, b3, out=c3))]


class CudaSession(Session):
    """Buffers of one call on one stream; ``steps`` are the launches of a sample."""

    has_transfers = True

    def __init__(self, kernel: KernelSpec, call: GemmCall, cp: Any, stream: Any, env: dict) -> None:
        super().__init__(kernel, call)
        self.cp, self.stream, self._env = cp, stream, env
        self.steps: list[Callable[[], None]] = []
        self.keep: list[Any] = []  # workspaces the steps use
        self._pinned: tuple | None = None
        self._pageable_c: np.ndarray | None = None
        self._scrub: Any | None = None  # the buffer scrub_l2 writes, allocated on first use
        self._timer: cuda_timing.SpinTimer | None = None
        with stream:
            self.a = cp.asarray(call.a, dtype=cp.float32)
            self.b = cp.asarray(call.b, dtype=cp.float32)
            self.c = cp.empty(call.c_size, dtype=cp.float32)
            self.c0 = cp.asarray(call.c0, dtype=cp.float32) if call.beta != 0.0 else None
        stream.synchronize()
        self.info["device"] = f"cuda:{cp.cuda.Device().id} {env['gpu']}"
        self.info["gpu"] = {}

    def reset_c(self) -> None:
        with self.stream:
            if self.c0 is None:
                self.c.fill(np.float32(np.nan))
            else:
                self.c[...] = self.c0

    def launch(self) -> None:
        try:
            with self.stream:
                for step in self.steps:
                    step()
        except Exception as exc:
            call = self.call
            raise CudaLaunchError(f"{self.kernel.id} failed on {call.batch}x{call.m}x{call.n}x"
                                  f"{call.k}: {type(exc).__name__}: {exc}") from exc

    def timer(self) -> Timer:
        if self._timer is None:
            # The engine asks for the timer after the warm-up: the clock the samples start at.
            self.info["gpu"]["before"] = cuda_timing.gpu_state(self._env["pci_bus_id"])
            self._timer = cuda_timing.SpinTimer(self.cp, self.stream)
        return self._timer

    def scrub_l2(self) -> None:
        scrub = self._scrub
        if scrub is None:
            scrub = self._scrub = self.cp.empty(max(2 * self._env["l2_bytes"], 2**20),
                                                dtype=self.cp.uint8)
        with self.stream:
            scrub.fill(1)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def output(self) -> np.ndarray:
        self.info["gpu"]["after"] = cuda_timing.gpu_state(self._env["pci_bus_id"])
        if self._timer is not None:
            self.info["timer"] = self._timer.report()
        out = self.cp.asnumpy(self.c, stream=self.stream)
        self.stream.synchronize()
        return out

    def transfer_ms(self, pinned: bool) -> tuple[float, float]:
        cp, call = self.cp, self.call
        if pinned:
            if self._pinned is None:
                import cupyx

                hosts = tuple(cupyx.empty_pinned((x.size,), dtype=np.float32)
                              for x in (call.a, call.b, call.c0))
                hosts[0][:], hosts[1][:] = call.a, call.b
                self._pinned = hosts
            host_a, host_b, host_c = self._pinned
        else:
            if self._pageable_c is None:
                self._pageable_c = np.empty(call.c_size, dtype=np.float32)
            host_a, host_b, host_c = call.a, call.b, self._pageable_c
        runtime, ptr = cp.cuda.runtime, self.stream.ptr
        timer = cuda_timing.EventPair(cp, self.stream)
        timer.begin()
        for dev, host in ((self.a, host_a), (self.b, host_b)):
            runtime.memcpyAsync(dev.data.ptr, host.ctypes.data, host.nbytes,
                                runtime.memcpyHostToDevice, ptr)
        h2d = timer.end()
        timer.begin()
        runtime.memcpyAsync(host_c.ctypes.data, self.c.data.ptr, 4 * call.c_size,
                            runtime.memcpyDeviceToHost, ptr)
        return h2d, timer.end()

    def energy_reader(self) -> Callable[[], float] | str:
        from .. import energy

        return energy.nvml_reader(self._env["pci_bus_id"])

    def device_state(self) -> dict:
        """NVML's view of this session's GPU now (clock, throttle reasons): ``continuous``'s
        worker reads it at both ends of each turn."""
        return cuda_timing.gpu_state(self._env["pci_bus_id"])

    def close(self) -> None:
        self.steps, self.keep = [], []
        self.a = self.b = self.c = self.c0 = self._scrub = None
        self._pinned = self._pageable_c = None
        self.cp.get_default_memory_pool().free_all_blocks()
