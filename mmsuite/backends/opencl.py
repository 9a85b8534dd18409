"""OpenCL backend: the cl/ ladder through pyopencl, and CLBlast (pyclblast) as reference.

Devices are found, selected and smoke-tested by ``cl_devices``; the geometries
each rung may use are launch data in the catalogue. A session (``opencl_session``)
holds the buffers of one call, launches it, and times it with a gated queue.

Builds. For each rung and device type the catalogue lists geometries, best
first; the first that the device accepts is used: work-group size, work-item
sizes and local memory against the device limits before the build, against the
built kernel's limits (registers) after it. Builds are cached per (context,
source, options), each an ``opencl_session.Built`` that keeps the local sizes
already launched once (PoCL compiles a kernel again for each local size at its
first launch).

Includes. Local ``#include "x.h"`` lines that name files of the cl/ folder
(cl/common.h) are pasted into the source before it is built, as the CUDA
adapter does, so that no build needs an include path and the program cache key
covers the headers too.
"""

from __future__ import annotations

import contextlib
import hashlib
import warnings
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from ..launch import ClGeometry
from ..layout import GemmCall
from ..sources import read_source
from .base import Backend, KernelUnavailable, RunOptions, Session
from .cl_devices import (
    DeviceEntry,
    device_facts,
    import_pyopencl,
    list_devices,
    no_platform_reason,
    nvidia_icd_hint,
    select_device,
    smoke_test,
)
from .opencl_session import Built, ClblastSession, ClDevice, KernelSession

if TYPE_CHECKING:
    from .base import KernelSpec


def vec_ok(call: GemmCall) -> bool:
    """Whether float4 global access is safe: K and N multiples of 4 keep every float4
    aligned and wholly inside or outside the matrix."""
    return call.k % 4 == 0 and call.n % 4 == 0


# ------------------------------------------------------------------- program cache
_PROGRAMS: dict[tuple[int, str, str], Any] = {}


def build_program(context: Any, source: str, options: Sequence[str]) -> Any:
    """A built program, cached per (context, source, options) for the life of the process.

    ``source`` comes from ``read_source``, with the cl/ headers already inlined.
    """
    import pyopencl as cl

    key = (context.int_ptr, hashlib.sha1(source.encode()).hexdigest(), " ".join(options))
    program = _PROGRAMS.get(key)
    if program is None:
        with warnings.catch_warnings():
            # Drivers print notes (NVIDIA: register use) that pyopencl turns into warnings.
            warnings.simplefilter("ignore", cl.CompilerWarning)
            program = cl.Program(context, source).build(options=list(options))
        _PROGRAMS[key] = program
    return program


# -------------------------------------------------------------------------- adapter
class OpenCLBackend(Backend):
    name = "opencl"
    runtime_packages = ("pyopencl", "pyclblast")

    def __init__(self, options: RunOptions) -> None:
        super().__init__(options)
        self._cl, self._import_reason = import_pyopencl()
        self._entry: DeviceEntry | None = None
        self._context = None
        self._queue = None
        self._built: dict[tuple[str, int], Built] = {}
        self._missing = ""
        if self._cl is not None:
            try:  # a selector matching nothing fails here, as a ValueError listing the devices
                self._entry = select_device(options.cl_device)
            except LookupError as exc:  # no device at all: reported by probe()
                self._missing = str(exc)

    # ------------------------------------------------------------ device, context
    @property
    def entry(self) -> DeviceEntry:
        """The selected device; KernelUnavailable when pyopencl or every device is missing."""
        if self._cl is None:
            raise KernelUnavailable(self._import_reason)
        if self._entry is None:
            raise KernelUnavailable(self._missing or no_platform_reason())
        return self._entry

    @property
    def device(self) -> Any:
        """The selected pyopencl.Device."""
        return self.entry.device

    @property
    def device_type(self) -> str:
        kind = self.entry.type_name
        return "GPU" if kind in ("GPU", "ACCELERATOR") else "CPU"

    @property
    def queue(self) -> Any:
        """A profiling command queue on the selected device (created on first use)."""
        if self._queue is None:
            cl = self._cl
            self._context = cl.Context([self.device])
            self._queue = cl.CommandQueue(
                self._context, self.device,
                properties=cl.command_queue_properties.PROFILING_ENABLE)
        return self._queue

    @property
    def context(self) -> Any:
        _ = self.queue
        return self._context

    @property
    def device_options(self) -> list[str]:
        """Build options for every rung on this device, beside the geometry's -D options.

        PoCL lowers fma() to a slow library call on CPUs: CPU builds use a * b + c and
        let the compiler contract it (-cl-mad-enable) into the hardware FMA.
        """
        return ["-DFAST_MAD=1", "-cl-mad-enable"] if self.device_type == "CPU" else []

    def probe(self) -> str:
        if self._cl is None:
            return self._import_reason
        try:
            return smoke_test(self.entry)
        except KernelUnavailable as exc:
            return str(exc)

    # --------------------------------------------------------------- geometries
    def _fits(self, geometry: ClGeometry) -> str:
        if geometry.shape_error():
            return geometry.shape_error()
        dev = self.device
        sizes = dev.max_work_item_sizes
        if geometry.work_group_size > dev.max_work_group_size:
            return (f"work-group of {geometry.work_group_size} > device maximum "
                    f"{dev.max_work_group_size}")
        for axis, (want, limit) in enumerate(zip(geometry.local, sizes)):
            if want > limit:
                return f"local size {want} on axis {axis} > device maximum {limit}"
        if geometry.local_mem > dev.local_mem_size:
            return (f"needs {geometry.local_mem} B of local memory, device has "
                    f"{dev.local_mem_size} B")
        return ""

    def candidates(self, kernel: KernelSpec) -> list[ClGeometry]:
        """The catalogue's geometries for this device type, best first."""
        return list(kernel.launch.get(self.device_type, kernel.launch.get("GPU", ())))

    def kernel_reason(self, kernel: KernelSpec) -> str:
        if kernel.reference:
            return _clblast_reason()
        if not kernel.source:
            return f"{kernel.id} names no source in the catalogue"
        try:
            read_source(kernel.source)
        except OSError as exc:
            return f"kernel source {kernel.source} is missing ({exc})"
        refusals = [self._fits(g) for g in self.candidates(kernel)]
        if not refusals:
            return f"no geometry is defined for {kernel.id}"
        if all(refusals):
            return f"{self.entry.name} refuses every geometry of {kernel.id}: {refusals[-1]}"
        return ""

    def build(self, kernel: KernelSpec, vec: bool = False) -> Built:
        """Build ``kernel`` with the first geometry the device accepts (cached)."""
        key = (kernel.id, int(vec))
        if key in self._built:
            return self._built[key]
        cl = self._cl
        if not kernel.source:
            raise KernelUnavailable(f"{kernel.id} names no source in the catalogue")
        source = read_source(kernel.source)
        refusals = []
        for geometry in self.candidates(kernel):
            if "VEC" in dict(geometry.defines):
                geometry = geometry.with_define("VEC", int(vec))
            why = self._fits(geometry)
            if why:
                refusals.append(why)
                continue
            try:
                program = build_program(self.context, source,
                                        geometry.options + self.device_options)
            except cl.Error as exc:
                refusals.append(f"build with {geometry.describe()} failed: "
                                f"{str(exc).splitlines()[0]}")
                continue
            knl = cl.Kernel(program, kernel.entry)
            limit = knl.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE,
                                            self.device)
            if geometry.work_group_size > limit:
                refusals.append(f"built kernel allows {limit} work-items, "
                                f"{geometry.describe()} needs {geometry.work_group_size}")
                continue
            built = Built(geometry, knl)
            self._built[key] = built
            return built
        raise KernelUnavailable(f"{kernel.id} cannot run on {self.entry.name}: "
                                + "; ".join(refusals))

    # ----------------------------------------------------------------- sessions
    def prepare(self, kernel: KernelSpec, call: GemmCall) -> Session:
        if kernel.reference:
            reason = _clblast_reason()
            if reason:
                raise KernelUnavailable(reason)
            return ClblastSession(self._session_device(), kernel, call)
        return KernelSession(self._session_device(), kernel, call,
                             self.build(kernel, vec=vec_ok(call)))

    def _session_device(self) -> ClDevice:
        return ClDevice(self._cl, self.queue, self.context, self.entry.label, self.device_type,
                        self.device_options)

    # -------------------------------------------------------------- environment
    def environment(self) -> dict:
        if self._cl is None:
            return {"opencl": self._import_reason}
        env: dict = {"pyopencl": self._cl.VERSION_TEXT,
                     "opencl_devices": [e.label for e in list_devices()]}
        hint = nvidia_icd_hint()
        if hint:
            env["opencl_note"] = hint
        try:
            env.update(device_facts(self.entry))
        except (KernelUnavailable, ValueError) as exc:
            env["opencl"] = str(exc)
        with contextlib.suppress(ImportError, PackageNotFoundError):
            import pyclblast  # noqa: F401

            env["pyclblast"] = version("pyclblast")
        return env


def _clblast_reason() -> str:
    try:
        import pyclblast  # noqa: F401
    except ImportError:
        return "pyclblast is not installed (optional: `pip install pyclblast`, needs CLBlast)"
    return ""
