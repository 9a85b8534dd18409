"""The table of backends, beside the catalogue of kernels: what the rest of mmsuite knows of
each backend, written once.

A new backend is its adapter (``mmsuite/backends/``), one row here and its kernels in the
catalogue. The sweep, the report, the figures, the peak and the command line read this
table instead of naming backends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .identity import (
    C_LADDER,
    CLBLAST,
    CUBLAS,
    HOST_BLAS,
    NO_TOOLCHAIN,
    NVRTC,
    OPENCL_PLATFORMS,
    CodeReaders,
)
from .launch import declared_cl_launch, declared_cuda_launch

#: Where a backend's kernels run: the host's CPU, a GPU, or the device the user selects
#: (OpenCL: a CPU or a GPU), which each result row then names in ``info.device_type``.
HOST, GPU, SELECTED = "host", "gpu", "selected"
#: Where a backend's FP32 peak comes from: the host CPU's (cores x vector lanes x clock,
#: the FMA probe), a GPU's (SMs x lanes x clock), or the selected device's own figures.
HOST_PEAK, GPU_PEAK, DEVICE_PEAK = "host", "gpu", "device"


@dataclass(frozen=True)
class BackendInfo:
    """One backend. ``adapter`` is ``module:Class``, imported only when first used, so that
    listing the catalogue needs no GPU; ``isolated``: its kernels run in worker processes,
    one per device, so that a crash costs one row; ``environment``: the fields of its
    environment the report shows, with their titles; ``device_field``: the field of its
    environment that names its device (None: the host's CPU, named by the environment's
    ``CPU_MODEL``); ``device_type_field``: for a selected device, the field that says
    whether it is a CPU or a GPU; ``code``: where the identity of its code is read.

    What a plugin declares for it (``mmsuite.register``): ``declares``, the keywords that
    apply beyond ``source`` and ``entry``; ``declared_launch``, what makes its launch data
    of them (None: the kernel needs none); ``callable_device``, the ``device=`` of a Python
    callable this backend runs and times (None: it runs none)."""

    name: str
    title: str
    adapter: str
    device: str
    reference: str
    peak: str
    isolated: bool
    colour: str
    environment: tuple[tuple[str, str], ...]
    device_field: str | None
    device_type_field: str | None
    code: CodeReaders
    declares: tuple[str, ...] = ()
    declared_launch: Callable[..., object] | None = None
    callable_device: str | None = None

    def on_host(self, device_type: object = None) -> bool:
        """Whether a row of this backend ran on the host's CPU (sharing its cores with
        everything else there); ``device_type`` is the row's ``info.device_type``."""
        return self.device == HOST or (self.device == SELECTED
                                       and str(device_type or "").upper() == "CPU")

    def gpu_name(self, facts: dict) -> str | None:
        """The GPU this backend's recorded environment ``facts`` names, if it ran on one."""
        on_gpu = self.device == GPU or (
            self.device == SELECTED and self.device_type_field is not None
            and str(facts.get(self.device_type_field) or "").upper() == "GPU")
        name = facts.get(self.device_field) if on_gpu and self.device_field else None
        return str(name) if name else None


_ROWS = (
    BackendInfo(
        name="cpu", title="C (sequential and OpenMP)", adapter="mmsuite.backends.cpu:CpuBackend",
        device=HOST, reference="cpu.blas", peak=HOST_PEAK, isolated=False, colour="#1f77b4",
        environment=(("omp_threads", "OpenMP threads"), ("blas", "BLAS"),
                     ("blas_coretype", "BLAS kernels (architecture)"),
                     ("blas_threads", "BLAS threads"), ("cflags", "C flags")),
        device_field=None, device_type_field=None,
        code=CodeReaders(built=C_LADDER, toolchain=NO_TOOLCHAIN, library=HOST_BLAS),
        declares=("threaded",), callable_device=HOST),
    BackendInfo(
        name="opencl", title="OpenCL", adapter="mmsuite.backends.opencl:OpenCLBackend",
        device=SELECTED, reference="opencl.clblast", peak=DEVICE_PEAK, isolated=False,
        colour="#2ca02c",
        environment=(("opencl_platform", "OpenCL platform"), ("opencl_device", "OpenCL device"),
                     ("opencl_device_type", "OpenCL device type"),
                     ("compute_units", "compute units"),
                     ("max_clock_mhz", "OpenCL max clock (MHz)"),
                     ("opencl_driver", "OpenCL driver")),
        device_field="opencl_device", device_type_field="opencl_device_type",
        code=CodeReaders(built=None, toolchain=OPENCL_PLATFORMS, library=CLBLAST),
        declares=("local", "block", "defines", "local_mem"),
        declared_launch=declared_cl_launch),
    BackendInfo(
        name="cuda", title="CUDA", adapter="mmsuite.backends.cuda:CudaBackend", device=GPU,
        reference="cuda.cublas", peak=GPU_PEAK, isolated=True, colour="#d62728",
        environment=(("gpu", "GPU"), ("sm_count", "SMs"),
                     ("compute_capability", "compute capability"),
                     ("sm_clock_mhz", "SM clock (MHz)"), ("memory_clock_mhz", "memory clock (MHz)"),
                     ("fp32_peak_tflops", "FP32 peak (TFLOP/s)"), ("driver", "driver"),
                     ("cuda_runtime", "CUDA runtime"), ("cupy", "CuPy")),
        device_field="gpu", device_type_field=None,
        code=CodeReaders(built=None, toolchain=NVRTC, library=CUBLAS),
        declares=("block", "tile", "grid_x", "smem", "defines"),
        declared_launch=declared_cuda_launch, callable_device="cuda"),
)

#: Every backend by name, in ladder order (C first, then OpenCL, then CUDA).
BACKENDS: Mapping[str, BackendInfo] = MappingProxyType({row.name: row for row in _ROWS})
#: The backend whose kernels run on the host's CPU itself; its reference (the host's BLAS)
#: stands in where another backend has no reference of its own (OpenCL without CLBlast).
HOST_BACKEND = next(row for row in _ROWS if row.device == HOST)
#: The backends whose kernels run on a GPU of their own (not one the user selects).
GPU_BACKENDS = tuple(row.name for row in _ROWS if row.device == GPU)
#: A colour for rows of a backend that this table does not know (an old results file).
UNKNOWN_COLOUR = "#7f7f7f"


def in_ladder_order(names: Iterable[str]) -> list[str]:
    """Backend names, once each: the table's in its order, then unknown ones by name."""
    given = set(names)
    return [b for b in BACKENDS if b in given] + sorted(given - set(BACKENDS))


def runs_on_host(record: dict) -> bool:
    """Whether a result row ran on the host's CPU (the C ladder, OpenCL on a CPU)."""
    backend = BACKENDS.get(str(record.get("backend")))
    info = record.get("info")
    return backend is not None and backend.on_host(
        info.get("device_type") if isinstance(info, dict) else None)
