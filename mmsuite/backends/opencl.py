"""OpenCL backend: the cl/ ladder through pyopencl, and CLBlast (pyclblast) as reference.

Devices are found, selected and smoke-tested by ``cl_devices``; the geometries
each rung may use are launch data in the catalogue.

Sessions. A session holds device buffers for A, B and C on a profiling,
in-order queue. C is reset on the device (a NaN fill when beta == 0, a copy of
C0 otherwise). The timer gates the queue: its start enqueues a marker that
waits on a user event, then the start marker; the launches and the stop marker
follow, and only then does the host open the gate. The device so runs the
sample's commands back to back, and the markers bracket everything the launch
enqueued (CLBlast enqueues several kernels for one call), with nothing of the
host's between them. Transfers are timed in their own phase from the copies'
profiling events, from pageable and from pinned (ALLOC_HOST_PTR) host memory.

Builds. For each rung and device type the catalogue lists geometries, best
first; the first that the device accepts is used: work-group size, work-item
sizes and local memory against the device limits before the build, against the
built kernel's limits (registers) after it. Builds are cached per (context,
source, options). PoCL compiles a kernel again for each local size at its first
launch, so every geometry gets one untimed single-work-group launch when it is
built, whatever the warm-up.

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
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

import numpy as np

from ..launch import ClGeometry
from ..layout import GemmCall
from ..sources import read_source
from .base import Backend, KernelUnavailable, RunOptions, Session, Timer
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

if TYPE_CHECKING:
    from .base import KernelSpec

# Twice the largest last-level cache of the devices this runs on (H100: 50 MB L2).
SCRUB_BYTES = 256 * 2**20


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


@dataclass
class Built:
    """A kernel built for one geometry, and the local sizes already launched once."""

    geometry: ClGeometry
    kernel: Any  # pyopencl.Kernel
    primed: set = field(default_factory=set)


# -------------------------------------------------------------------------- adapter
class OpenCLBackend(Backend):
    name = "opencl"

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
            return _ClblastSession(self, kernel, call)
        return _KernelSession(self, kernel, call, self.build(kernel, vec=vec_ok(call)))

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


class _GateTimer(Timer):
    """Markers around the sample's commands, released together by a user event."""

    def __init__(self, cl: Any, queue: Any) -> None:
        self._cl, self._queue = cl, queue
        self._gate = self._start = self._stop = None

    def start(self) -> None:
        cl = self._cl
        self._gate = cl.UserEvent(self._queue.context)
        cl.enqueue_marker(self._queue, wait_for=[self._gate])
        self._start = cl.enqueue_marker(self._queue)

    def stop(self) -> None:
        self._stop = self._cl.enqueue_marker(self._queue)
        self._gate.set_status(self._cl.command_execution_status.COMPLETE)

    def elapsed_ms(self) -> float:
        self._stop.wait()
        return (self._stop.profile.end - self._start.profile.end) * 1e-6


class _ClSession(Session):
    """Device buffers for one call on the backend's queue; subclasses say how to launch."""

    has_transfers = True

    def __init__(self, backend: OpenCLBackend, kernel: KernelSpec, call: GemmCall) -> None:
        super().__init__(kernel, call)
        cl = self._cl = backend._cl
        self.queue, self.context = backend.queue, backend.context
        mf = cl.mem_flags
        self.a_buf, self.b_buf, self.c_buf = (
            cl.Buffer(self.context, flags, max(array.nbytes, 4)) for flags, array in (
                (mf.READ_ONLY, call.a), (mf.READ_ONLY, call.b), (mf.READ_WRITE, call.c0)))
        self._c0_buf = None
        cl.enqueue_copy(self.queue, self.a_buf, call.a)
        cl.enqueue_copy(self.queue, self.b_buf, call.b)
        if call.beta != 0.0:
            self._c0_buf = cl.Buffer(self.context, mf.READ_ONLY, max(call.c0.nbytes, 4))
            cl.enqueue_copy(self.queue, self._c0_buf, call.c0)
        self._pinned: tuple[np.ndarray, ...] | None = None
        self._scrub = None
        self.info.update({"device": backend.entry.label, "device_type": backend.device_type})

    def reset_c(self) -> None:
        cl, nbytes = self._cl, 4 * self.call.c_size
        if self._c0_buf is None:
            cl.enqueue_fill_buffer(self.queue, self.c_buf, np.float32(np.nan), 0, nbytes)
        else:
            cl.enqueue_copy(self.queue, self.c_buf, self._c0_buf, byte_count=nbytes)

    def timer(self) -> Timer:
        return _GateTimer(self._cl, self.queue)

    def synchronize(self) -> None:
        self.queue.finish()

    def scrub_l2(self) -> None:
        if self._scrub is None:
            self._scrub = self._cl.Buffer(self.context, self._cl.mem_flags.READ_WRITE,
                                          SCRUB_BYTES)
        self._cl.enqueue_fill_buffer(self.queue, self._scrub, np.float32(0), 0, SCRUB_BYTES)

    def output(self) -> np.ndarray:
        out = np.empty(self.call.c_size, np.float32)
        self._cl.enqueue_copy(self.queue, out, self.c_buf, is_blocking=True)
        return out

    def transfer_ms(self, pinned: bool) -> tuple[float, float]:
        cl, queue, call = self._cl, self.queue, self.call
        a, b, c = self._host_buffers() if pinned else (call.a, call.b,
                                                      np.empty(call.c_size, np.float32))
        queue.finish()
        up = [cl.enqueue_copy(queue, self.a_buf, a, is_blocking=False),
              cl.enqueue_copy(queue, self.b_buf, b, is_blocking=False)]
        down = cl.enqueue_copy(queue, c, self.c_buf, is_blocking=True)
        return sum(_ms(e) for e in up), _ms(down)

    def _host_buffers(self) -> tuple[np.ndarray, ...]:
        # Page-locked host memory the OpenCL way: host-allocated buffers, mapped.
        if self._pinned is None:
            cl, call = self._cl, self.call
            arrays = []
            for source, size in ((call.a, call.a.size), (call.b, call.b.size),
                                 (None, call.c_size)):
                buf = cl.Buffer(self.context, cl.mem_flags.ALLOC_HOST_PTR, max(4 * size, 4))
                array, _ = cl.enqueue_map_buffer(
                    self.queue, buf, cl.map_flags.READ | cl.map_flags.WRITE, 0, (size,),
                    np.float32)
                if source is not None:
                    array[:] = source
                arrays.append(array)  # the mapping (array.base) keeps the buffer alive
            self._pinned = tuple(arrays)
        return self._pinned

    def close(self) -> None:
        self.queue.finish()
        for buf in (self.a_buf, self.b_buf, self.c_buf, self._c0_buf, self._scrub):
            if buf is not None:
                buf.release()
        self._pinned = self._scrub = self._c0_buf = None


class _KernelSession(_ClSession):
    """A cl/ rung: one NDRange per launch."""

    def __init__(self, backend: OpenCLBackend, kernel: KernelSpec, call: GemmCall,
                 built: Built) -> None:
        super().__init__(backend, kernel, call)
        geometry, self._kernel = built.geometry, built.kernel
        self._kernel.set_args(np.int32(call.m), np.int32(call.n), np.int32(call.k),
                              np.float32(call.alpha), self.a_buf, self.b_buf,
                              np.float32(call.beta), self.c_buf)
        self._global = geometry.global_size(call.m, call.n, call.batch)
        self._local = (*geometry.local, 1)
        if self._local not in built.primed:
            # One work-group: PoCL compiles the work-group function for this local size here.
            self._cl.enqueue_nd_range_kernel(self.queue, self._kernel, self._local,
                                             self._local).wait()
            built.primed.add(self._local)
        self.info.update({"geometry": geometry.describe(),
                          "build_options": " ".join(geometry.options + backend.device_options),
                          "global_size": list(self._global)})

    def launch(self) -> None:
        self._cl.enqueue_nd_range_kernel(self.queue, self._kernel, self._global, self._local)


class _ClblastSession(_ClSession):
    """The reference: CLBlast's sgemm, one call per matrix of the batch."""

    def __init__(self, backend: OpenCLBackend, kernel: KernelSpec, call: GemmCall) -> None:
        super().__init__(backend, kernel, call)
        import pyclblast
        from pyopencl.array import Array

        self._gemm = pyclblast.gemm
        m, n, k, batch = call.m, call.n, call.k, call.batch
        self._a = Array(self.queue, (batch * m, k), np.float32, data=self.a_buf)
        self._b = Array(self.queue, (batch * k, n), np.float32, data=self.b_buf)
        self._c = Array(self.queue, (batch * m, n), np.float32, data=self.c_buf)
        self.info["geometry"] = "CLBlast"

    def launch(self) -> None:
        call = self.call
        m, n, k = call.m, call.n, call.k
        for i in range(call.batch):
            self._gemm(self.queue, m, n, k, self._a, self._b, self._c, a_ld=k, b_ld=n, c_ld=n,
                       alpha=call.alpha, beta=call.beta, a_offset=i * m * k,
                       b_offset=i * k * n, c_offset=i * m * n)


def _ms(event: Any) -> float:
    """Device time of one OpenCL command, in ms."""
    event.wait()
    return (event.profile.end - event.profile.start) * 1e-6


def _clblast_reason() -> str:
    try:
        import pyclblast  # noqa: F401
    except ImportError:
        return "pyclblast is not installed (optional: `pip install pyclblast`, needs CLBlast)"
    return ""
