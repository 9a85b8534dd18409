"""CUDA backend: the cuda/ ladder compiled with NVRTC and run through CuPy, and cuBLAS as
reference.

CuPy is imported lazily, on the first probe or run, so that ``import mmsuite``
and listing the catalogue never need it. Before that import the adapter drops
``CUPY_TF32`` and ``NVIDIA_TF32_OVERRIDE`` (recording what they were): cuBLAS's
math mode is set per call instead, through the library's API (``cublas_steps``),
FP32 for ``cuda.cublas`` (its error, far below the TF32 row's, is how the
tests prove it is off) and TF32 tensor ops for ``cuda.cublas_tf32``.

Compilation
    Every module (rungs, packs, reductions and fix-ups alike) goes through one
    path: NVRTC called directly (``compile_cubin``) with ``nvrtc_options``, for
    the current device's architecture (``sm_90`` on an H100) or for the
    architecture-specific target a step names (``CudaStep.arch``, e.g. ``sm_90a``
    for wgmma and setmaxnreg; such a rung is unavailable on other GPUs,
    ``kernel_reason``), into a cubin that ``cupy.RawModule`` loads. The options
    carry ``IEEE_FLAGS``: CuPy's own compile path appends ``-ftz=true`` to every
    compile, whatever the options say, and a flushed rung computes another
    function than the CPU, OpenCL and cuBLAS rows on subnormal products. Each
    (source, defines, arch) is compiled once per process and kept; the cubin is
    also cached on disk (``cubin_cache_dir``), keyed by the source text, the
    options and NVRTC's version. Local ``#include "x.cuh"`` lines are inlined
    first (``read_source``), so the key covers the headers too. Kernels are
    plain ``extern "C"`` functions.

Launches
    A rung's ``CudaLaunch`` (``mmsuite.launch``) gives a ``CudaPlan``: one step
    (the rung on its grid), or, for a rung with a ``planner``, the sequence of
    kernels it picks for the problem (a split-K kernel and its reduction), with
    a workspace. ``Session.launch()`` enqueues every step on the session's
    stream; one sample times them together.

Sessions
    Device buffers for A, B and C (and C0 when beta != 0) live on one
    non-blocking stream; the inputs are copied in once, untimed. C is reset on
    the device (NaN fill, or a copy of C0). The timer is ``SpinTimer``
    (``cuda_timing``): a bounded spin kernel keeps the stream busy while the
    host enqueues the start event, the launches and the stop event, and the
    timer checks that the spin outlasted that enqueue. ``scrub_l2`` writes a
    buffer twice the L2's size. Transfers are timed in their own phase with
    events around the copies, from pageable numpy arrays and from page-locked
    buffers (``cupyx.empty_pinned``). NVML's SM clock and throttle reasons are
    read when sampling starts (after the warm-up) and when C is copied out
    (``info["gpu"]``).

cuBLAS (``cuda.cublas``, ``cuda.cublas_tf32``)
    ``cupy.matmul`` on float32 (cuBLAS SGEMM, strided batched) in the row-major
    layout, on views made once per session, with the handle's math mode set to
    ``CUBLAS_DEFAULT_MATH`` around the call, where alpha == 1 and beta == 0;
    otherwise ``cublasSgemmStridedBatched`` itself, alpha and beta included
    (CuPy's elementwise kernels are compiled with -ftz=true: an epilogue of
    theirs would flush subnormal results). The TF32 row calls
    ``cublasSgemmStridedBatched`` with ``CUBLAS_TF32_TENSOR_OP_MATH`` set on the
    handle around the call and the previous mode restored after it.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import roof, verify
from ..launch import (
    IEEE_FLAGS,
    MAX_STATIC_SMEM,
    CudaLaunch,
    CudaPlan,
    DeviceFacts,
    arch_capability,
)
from ..peak import gpu_peak, parse_compute_capability
from ..sources import read_source, source_path
from . import callables
from .base import Backend, RunOptions, is_kernel_failure
from .cuda_session import CudaLaunchError, CudaSession, cublas_steps, kernel_steps

if TYPE_CHECKING:
    from ..layout import GemmCall
    from ..problem import Problem
    from .base import KernelSpec

INSTALL_HINT = "install CuPy with `pip install 'mmsuite[cuda]'`"
# Device memory kept free beyond the buffers themselves (CuPy pools, cuBLAS workspace).
_HEADROOM = 256 * 1024 * 1024

_cupy = None
_cupy_error = ""
_cupy_preimported = False
_TF32_VARIABLES = ("NVIDIA_TF32_OVERRIDE", "CUPY_TF32")
_tf32_found: dict[str, str | None] = {}
# Compiled modules and kernels, shared by every adapter instance of the process.
_MODULES: dict[tuple, Any] = {}
_FUNCTIONS: dict[tuple, Any] = {}
_COMPILE_THREADS = 8  # NVRTC compiles ahead of a sweep at once (``CudaBackend.warm``)


class DeviceMemoryError(MemoryError):
    """The problem does not fit in the GPU's free memory."""


def _import_cupy():
    """Import CuPy once, with TF32 forced off first. Returns the module or None."""
    global _cupy, _cupy_error, _cupy_preimported
    if _cupy is not None or _cupy_error:
        return _cupy
    _cupy_preimported = "cupy" in sys.modules
    # Either variable would decide TF32 for the whole process; the math mode decides per call.
    for name in _TF32_VARIABLES:
        _tf32_found[name] = os.environ.pop(name, None)
    try:
        import cupy
        import cupyx  # noqa: F401  (pinned host buffers)
    except Exception as exc:  # ImportError, or a broken CUDA install
        _cupy_error = f"CuPy is not importable ({type(exc).__name__}: {exc}); {INSTALL_HINT}"
        return None
    _cupy = cupy
    return cupy


# cudaDeviceAttr numbers: the clocks left cudaDeviceProp in CUDA 13; these queries keep them (kHz).
_ATTR_SM_CLOCK_KHZ = 13
_ATTR_MEMORY_CLOCK_KHZ = 36
_ATTR_MEMORY_BUS_BITS = 37


@dataclass(frozen=True)
class GpuFacts:
    """What CUDA's runtime says about one GPU: the one reader for the adapter's environment
    and for the devices a sweep ran on."""

    index: int
    gpu: str
    compute_capability: str
    pci_bus_id: str
    sm_count: int
    memory_gib: float
    l2_bytes: int
    sm_clock_mhz: int | None
    memory_clock_mhz: int | None
    memory_bus_bits: int | None = None

    @classmethod
    def read(cls, cupy: Any, index: int) -> GpuFacts:
        runtime = cupy.cuda.runtime
        device = cupy.cuda.Device(index)
        props = runtime.getDeviceProperties(index)
        name = props.get("name", b"?")
        clocks = []
        for attr, scale in ((_ATTR_SM_CLOCK_KHZ, 1000), (_ATTR_MEMORY_CLOCK_KHZ, 1000),
                            (_ATTR_MEMORY_BUS_BITS, 1)):
            try:
                clocks.append(runtime.deviceGetAttribute(attr, index) // scale or None)
            except Exception:  # an old driver without the attribute: the figure is unknown
                clocks.append(None)
        return cls(index, name.decode() if isinstance(name, bytes) else str(name),
                   str(device.compute_capability), str(device.pci_bus_id),
                   int(props.get("multiProcessorCount", 0)),
                   round(props.get("totalGlobalMem", 0) / 2**30, 1),
                   int(props.get("l2CacheSize", 0)), *clocks)

    def to_dict(self) -> dict:
        return asdict(self)


def nvrtc_options(source: str, defines: Iterable, arch: str) -> tuple[str, ...]:
    """Every NVRTC option of the module of ``source`` with ``defines`` for ``arch``
    (``sm_90``, ``sm_90a``)."""
    return ("-std=c++17", f"-I{source_path(source).parent}", *IEEE_FLAGS,
            *(f"-D{name}={value}" for name, value in defines), f"-arch={arch}")


def _nvrtc(source: str, options: Sequence[str], output: str) -> bytes:
    """``source`` (headers inlined) compiled by NVRTC with ``options``; its ``output``,
    "CUBIN" or "PTX". RuntimeError with NVRTC's log when it fails."""
    from cupy_backends.cuda.libs import nvrtc

    program = nvrtc.createProgram(read_source(source), source, [], [])
    try:
        try:
            nvrtc.compileProgram(program, list(options))
        except Exception as exc:
            raise RuntimeError(f"{exc}\n{nvrtc.getProgramLog(program)}") from exc
        return nvrtc.getCUBIN(program) if output == "CUBIN" else nvrtc.getPTX(program)
    finally:
        nvrtc.destroyProgram(program)


def module_ptx(source: str, defines: Iterable, arch: str) -> str:
    """The PTX of a module, compiled with its own options but for the virtual architecture
    of ``arch`` (``compute_90a`` for ``sm_90a``), for which NVRTC always gives PTX."""
    options = nvrtc_options(source, _define_key(defines), arch.replace("sm_", "compute_"))
    ptx = _nvrtc(source, options, "PTX")
    return (ptx.decode() if isinstance(ptx, bytes) else str(ptx)).rstrip("\0")


def cubin_cache_dir() -> Path:
    """Where compiled modules are kept between processes: ``$XDG_CACHE_HOME/mmsuite/cuda``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mmsuite" / "cuda"


def compile_cubin(source: str, options: Sequence[str]) -> str:
    """The path of ``source``'s cubin compiled by NVRTC with ``options`` (which name the
    architecture), from the disk cache when it holds one (CuPy loads a module from a file)."""
    from cupy_backends.cuda.libs import nvrtc

    key = hashlib.sha256("\0".join([str(nvrtc.getVersion()), *options,
                                     read_source(source)]).encode()).hexdigest()[:32]
    for folder in (cubin_cache_dir(), Path(_cubin_folder().name)):
        path = folder / f"{key}.cubin"
        if path.is_file():
            return str(path)
    cubin = _nvrtc(source, options, "CUBIN")
    for folder in (cubin_cache_dir(), Path(_cubin_folder().name)):
        try:  # a cache that cannot be written costs the next process a compile, no more
            folder.mkdir(parents=True, exist_ok=True)
            # Written aside and renamed: the threads of ``warm`` and other processes may
            # read the same key meanwhile.
            with tempfile.NamedTemporaryFile(dir=folder, suffix=".part", delete=False) as part:
                part.write(cubin)
            os.replace(part.name, folder / f"{key}.cubin")
            return str(folder / f"{key}.cubin")
        except OSError:
            continue
    raise RuntimeError("no folder to write a compiled CUDA module to")


@cache
def _cubin_folder() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="mmsuite-cubin-")


def _define_key(defines: Iterable) -> tuple[tuple[str, str], ...]:
    """A module's defines in one canonical form: the key of both caches."""
    return tuple(sorted((str(name), str(value)) for name, value in defines))


def launch_of(kernel: KernelSpec) -> CudaLaunch:
    launch = kernel.launch
    return launch if isinstance(launch, CudaLaunch) else CudaLaunch(**dict(launch))


def _job_key(kernel: KernelSpec, call: GemmCall) -> tuple:
    """What a planner reads of a job: the rung and the call's sizes and scalars."""
    return (kernel.id, call.layout, call.m, call.n, call.k, call.batch, call.alpha, call.beta)


class CudaBackend(Backend):
    name = "cuda"
    runtime_packages = ("cupy", "cupy_backends")

    def __init__(self, options: RunOptions) -> None:
        super().__init__(options)
        self._stream = None
        #: The plans the last ``warm`` decided, each handed to its job's ``prepare``: a job's
        #: planner runs once, not once to build ahead and again to launch.
        self._warmed: dict[tuple, CudaPlan] = {}

    def probe(self) -> str:
        cp = _import_cupy()
        if cp is None:
            return _cupy_error
        try:
            count = cp.cuda.runtime.getDeviceCount()
        except Exception as exc:
            return (f"no CUDA device found ({type(exc).__name__}: {exc}); CUDA kernels need an "
                    "NVIDIA GPU and its driver")
        return "" if count > 0 else "no CUDA device found; CUDA kernels need an NVIDIA GPU"

    def device_count(self) -> int:
        return int(self._cupy.cuda.runtime.getDeviceCount())

    def devices_environment(self, indices: Iterable[int]) -> list[dict]:
        """Each GPU a sweep ran on: the index a row's ``device`` names, name, SMs, clocks,
        compute capability."""
        return [GpuFacts.read(self._cupy, index).to_dict() for index in indices]

    def kernel_reason(self, kernel: KernelSpec) -> str:
        if kernel.reference or kernel.function:
            return ""
        if not kernel.source or not kernel.entry:
            return f"{kernel.id} names no source or entry in the catalogue"
        if not source_path(kernel.source).is_file():
            return f"source {kernel.source} is missing from this installation"
        arch = launch_of(kernel).arch
        if arch:
            capability = self._compute_capability()
            if capability and capability != arch_capability(arch):
                return (f"{kernel.id} is built for {arch} (compute capability "
                        f"{arch_capability(arch)}); this GPU's is {capability}")
        return ""

    def _compute_capability(self) -> str:
        """The current GPU's compute capability ("90"), "" where there is none to ask."""
        cp = _import_cupy()
        if cp is None:
            return ""
        try:
            return str(cp.cuda.Device().compute_capability)
        except Exception:  # no device or driver: probe() gives that reason
            return ""

    @property
    def _cupy(self):
        cp = _import_cupy()
        if cp is None:
            raise RuntimeError(_cupy_error)
        return cp

    def device_arch(self) -> str:
        """The current GPU's own NVRTC target ("sm_90")."""
        return f"sm_{self._cupy.cuda.Device().compute_capability}"

    def _module(self, source: str, defines: tuple[tuple[str, str], ...], arch: str = "") -> Any:
        """The ``cupy.RawModule`` of ``source`` compiled with ``defines`` (cached), for the
        device's own architecture or for the architecture-specific target ``arch``."""
        module = _MODULES.get((source, defines, arch))
        if module is None:
            try:
                options = nvrtc_options(source, defines, arch or self.device_arch())
                module = self._cupy.RawModule(path=compile_cubin(source, options))
                module.compile()
            except Exception as exc:
                raise CudaLaunchError(f"NVRTC failed on {source} {dict(defines)}"
                                      f"{f' for {arch}' if arch else ''}: {exc}") from exc
            _MODULES[(source, defines, arch)] = module
        return module

    def function(self, source: str, entry: str, defines: tuple = (), smem: int = 0,
                 arch: str = "") -> Any:
        """The compiled ``cupy.RawKernel`` ``entry`` of ``source`` with ``defines`` (cached),
        for ``arch`` where the step names one."""
        defines = _define_key(defines)
        key = (source, defines, entry, arch)
        fn = _FUNCTIONS.get(key)
        if fn is None:
            module = self._module(source, defines, arch)
            try:
                fn = module.get_function(entry)
            except Exception as exc:
                raise CudaLaunchError(f"cannot load {entry} from {source}: {exc}") from exc
            _FUNCTIONS[key] = fn
        if smem > MAX_STATIC_SMEM:
            fn.max_dynamic_shared_size_bytes = smem
        return fn

    def warm(self, jobs: Sequence[tuple[KernelSpec, GemmCall]]) -> None:
        """Compile every module the jobs' plans launch, several at once: NVRTC runs outside
        the GIL, so a cold cache costs a sweep about one compile per thread, not the sum
        (about 0.4 s a module on the H100's host, 30-odd modules in the default run)."""
        modules: dict[tuple, None] = {}
        self._warmed = {}
        for kernel, call in jobs:
            if kernel.reference or kernel.function:  # nothing of mmsuite's to compile
                continue
            try:
                plan = self.plan(kernel, call)
            except Exception:  # the job plans again and reports it in its own row
                continue
            self._warmed[_job_key(kernel, call)] = plan
            for step in plan.steps:
                modules[(step.source or kernel.source, _define_key(step.defines),
                         step.arch)] = None
        missing = [key for key in modules if key not in _MODULES]
        if not missing:
            return

        def compile_one(key: tuple) -> None:
            try:
                self._module(*key)
            except CudaLaunchError:  # the job compiles it again and reports the failure
                pass

        with ThreadPoolExecutor(min(len(missing), os.cpu_count() or 1, _COMPILE_THREADS)) as pool:
            list(pool.map(compile_one, missing))

    def plan(self, kernel: KernelSpec, call: GemmCall) -> CudaPlan:
        """The launches of one sample of ``kernel`` on ``call`` (``mmsuite.launch``)."""
        launch = launch_of(kernel)
        if launch.planner is None:
            return launch.plan(call, kernel.layout)
        return launch.planner(call, self.device_facts, None)  # (call, facts, forced plan)

    @cached_property
    def device_facts(self) -> DeviceFacts:
        """The current GPU as the dispatcher sees it (``mmsuite.launch.DeviceFacts``), from
        the one reader of its facts; an H100's figures where the runtime gives none."""
        facts, default = GpuFacts.read(self._cupy, self._cupy.cuda.Device().id), DeviceFacts()
        return DeviceFacts(facts.gpu, facts.sm_count or default.sms,
                           facts.sm_clock_mhz or default.clock_mhz,
                           facts.memory_clock_mhz or default.memory_clock_mhz,
                           facts.memory_bus_bits or default.memory_bus_bits,
                           facts.l2_bytes or default.l2_bytes)

    def _check_memory(self, nbytes: int, what: str) -> None:
        free, total = self._cupy.cuda.runtime.memGetInfo()
        if nbytes + _HEADROOM > free:
            raise DeviceMemoryError(
                f"{what} needs {nbytes / 2**30:.2f} GiB of GPU memory but only "
                f"{free / 2**30:.2f} GiB of {total / 2**30:.2f} GiB is free; use a smaller "
                "shape or batch")

    def prepare(self, kernel: KernelSpec, call: GemmCall,
                plan: CudaPlan | None = None) -> CudaSession:
        """A session of ``kernel`` on ``call``, launching ``plan`` where one is given (the
        tuner times candidate plans of a rung so), else the rung's own."""
        cp = self._cupy
        if self._stream is None:
            self._stream = cp.cuda.Stream(non_blocking=True)
        if kernel.reference or kernel.function:
            plan = None
        elif plan is None:  # the plan ``warm`` decided for this job, else a fresh one
            plan = self._warmed.pop(_job_key(kernel, call), None) or self.plan(kernel, call)
        c0 = call.c_size if call.beta != 0.0 else 0
        elems = call.a.size + call.b.size + call.c_size + c0 + (
            plan.workspace if plan else 0)
        what = f"{kernel.id} on {call.batch}x{call.m}x{call.n}x{call.k}"
        self._check_memory(4 * elems, what)
        session = CudaSession(kernel, call, cp, self._stream, self._env)
        try:
            if kernel.function is not None:  # a plugin's callable, on CuPy arrays
                views = callables.gemm_views(call, session.a, session.b, session.c)
                session.steps = [callables.launch(kernel, views, call)]
                session.info["callable"] = getattr(kernel.function, "__qualname__", "?")
            elif plan is None:
                session.steps = cublas_steps(cp, session, kernel.precision)
                matmul = kernel.precision == "fp32" and (call.alpha, call.beta) == (1, 0)
                session.info.update({"cublas": "cupy.matmul" if matmul
                                     else "cublasSgemmStridedBatched",
                                     "math_mode": "TF32 tensor op" if kernel.precision == "tf32"
                                     else "default (FP32)"})
            else:
                session.steps = kernel_steps(session, plan, self.function, self.options.profile)
        except Exception as exc:
            session.close()
            if isinstance(exc, CudaLaunchError) or not is_kernel_failure(exc,
                                                                          self.runtime_packages):
                raise  # a bug of mmsuite's keeps its own type and traceback
            raise CudaLaunchError(f"{what}: {type(exc).__name__}: {exc}") from exc
        session.info["pinned"] = self.options.pinned
        return session

    # ---------------------------------------------------------- environment
    @cached_property
    def _env(self) -> dict:
        cp = self._cupy
        runtime = cp.cuda.runtime
        facts = GpuFacts.read(cp, cp.cuda.Device().id)
        env = {key: value for key, value in facts.to_dict().items()
               if key != "index" and value is not None}
        env.update({
            "driver": runtime.driverGetVersion(),
            "cuda_runtime": runtime.runtimeGetVersion(),
            "cupy": cp.__version__,
            # What the environment asked for before the adapter dropped it (None: unset).
            "tf32_override": _tf32_found.get("NVIDIA_TF32_OVERRIDE"),
            "cupy_tf32": _tf32_found.get("CUPY_TF32"),
            # True when CuPy was imported before this adapter could set the TF32 variables.
            "cupy_imported_early": _cupy_preimported,
        })
        try:
            env["nvrtc"] = ".".join(map(str, cp.cuda.nvrtc.getVersion()))
        except Exception:
            pass
        # The memory bandwidth of this GPU, for each row's roof (mmsuite.roof).
        env["copy_probe"] = roof.cuda_copy_probe(cp, facts.gpu, facts.pci_bus_id, env["driver"])
        # For the environment table; % peak works it out again from the same facts.
        fp32 = gpu_peak(facts.sm_count, facts.sm_clock_mhz or 0,
                        parse_compute_capability(facts.compute_capability))
        if fp32 is not None:
            env["fp32_peak_tflops"] = round(fp32.gflops / 1e3, 1)
        return env

    def environment(self) -> dict:
        return {} if self.probe() else dict(self._env)

    def reference(self, problem: Problem,
                  inputs: tuple[np.ndarray, ...]) -> verify.Reference | None:
        """alpha·A·B + beta·C0 and its error scale (``mmsuite.verify.reference``) in float64 on
        the GPU; None (host fallback) when they do not fit."""
        if self.probe():
            return None
        cp = self._cupy
        a, b, c0 = inputs
        free, _ = cp.cuda.runtime.memGetInfo()
        if 8 * (a.size + b.size + 3 * c0.size) + _HEADROOM > free:
            return None
        try:
            a64, b64 = cp.asarray(a, dtype=cp.float64), cp.asarray(b, dtype=cp.float64)
            value = cp.matmul(a64, b64)
            scale = cp.matmul(cp.abs(a64), cp.abs(b64))
            if problem.alpha != 1.0:
                value *= problem.alpha
                scale *= abs(problem.alpha)
            if problem.beta != 0.0:  # beta == 0: C0 is not read, as BLAS has it
                c64 = cp.asarray(c0, dtype=cp.float64)
                value += problem.beta * c64
                scale += abs(problem.beta) * cp.abs(c64)
            return verify.Reference(cp.asnumpy(value), cp.asnumpy(scale),
                                    verify.exact_in_fp32(problem))
        finally:
            cp.get_default_memory_pool().free_all_blocks()
