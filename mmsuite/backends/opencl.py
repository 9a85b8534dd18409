"""OpenCL backend: the cl/ ladder through pyopencl, and CLBlast (pyclblast) as reference.

Devices are found, selected and smoke-tested by ``cl_devices``.

Timing. Every transfer and launch is an OpenCL command with profiling on: h2d is
the sum of the copies of A and B (and C0 when beta != 0), d2h the copy of C back,
kernel the NDRange alone. C is reset on the device before every run (NaN fill
when beta == 0; the C0 copy otherwise).

Tuning. Tile sizes are build options (-D). For each rung and device type the
adapter holds a list of geometries, best first, and uses the first that the
device accepts: work-group size, work-item sizes and local memory against the
device limits before the build, against the built kernel's limits (registers)
after it. Builds are cached per (context, source, options). PoCL compiles a
kernel again for each local size at its first launch, so every geometry gets one
untimed single-work-group launch before it is timed, whatever ``warmup`` is.

Includes. Local ``#include "x.h"`` lines that name files of the cl/ folder
(cl/common.h) are pasted into the source before it is built, as the CUDA
adapter does, so that no build needs an include path and the program cache key
covers the headers too.
"""

from __future__ import annotations

import hashlib
import math
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..catalogue import Kernel
from ..layout import GemmCall
from ..sources import read_source
from .base import Backend, Execution, KernelUnavailable, RunOptions
from .cl_devices import (
    DeviceEntry,
    import_pyopencl,
    list_devices,
    no_platform_reason,
    nvidia_icd_hint,
    select_device,
    smoke_test,
)


# ------------------------------------------------------------------------ geometry
@dataclass(frozen=True)
class Geometry:
    """How one rung is built and launched: -D options, local size, C block per work-group."""

    defines: tuple[tuple[str, int], ...]
    local: tuple[int, int]
    block: tuple[int, int]  # (columns, rows) of C per work-group
    local_mem: int = 0  # bytes of local memory the kernel declares

    @property
    def options(self) -> list[str]:
        return [f"-D{name}={value}" for name, value in self.defines]

    @property
    def work_group_size(self) -> int:
        return self.local[0] * self.local[1]

    def global_size(self, call: GemmCall) -> tuple[int, int, int]:
        groups_x = -(-call.n // self.block[0])
        groups_y = -(-call.m // self.block[1])
        return (groups_x * self.local[0], groups_y * self.local[1], call.batch)

    def shape_error(self) -> str:
        """Why the -D values are inconsistent (rung 4's slices must split evenly), else ''."""
        d = dict(self.defines)
        if d.get("STAGE", 0):
            width = 4 if d.get("VEC") else 1
            items = self.work_group_size
            if (d["BM"] * d["BK"] // width) % items or (d["BK"] * d["BN"] // width) % items:
                return f"{self.describe()}: slices do not split evenly over {items} work-items"
        return ""

    def describe(self) -> str:
        defs = " ".join(f"{n}={v}" for n, v in self.defines)
        return f"local {self.local[0]}x{self.local[1]}" + (f", {defs}" if defs else "")


def naive_geometry(lx: int, ly: int) -> Geometry:
    return Geometry((), (lx, ly), (lx, ly))


def tiled_geometry(ts: int) -> Geometry:
    return Geometry((("TS", ts),), (ts, ts), (ts, ts), 2 * ts * ts * 4)


def more_work_geometry(ts: int, wpt: int) -> Geometry:
    return Geometry((("TS", ts), ("WPT", wpt)), (ts, ts // wpt), (ts, ts), 2 * ts * ts * 4)


def regblock_geometry(bm: int, bn: int, bk: int, tm: int, tn: int, pad: int = 4,
                      vec: int = 0, stage: int = 1) -> Geometry:
    defines = (("BM", bm), ("BN", bn), ("BK", bk), ("TM", tm), ("TN", tn), ("PAD", pad),
               ("VEC", vec), ("STAGE", stage))
    local_mem = (2 * bk * (bm + pad) * 4 + 2 * bk * bn * 4) if stage else 0
    return Geometry(defines, (bn // tn, bm // tm), (bn, bm), local_mem)


# Geometries per rung and device type, best first; the first the device accepts is used.
# GPU entries were tuned on an H100 through NVIDIA's driver, CPU entries on PoCL (x86-64).
TUNING: dict[str, dict[str, list[Geometry]]] = {
    "naive": {
        "GPU": [naive_geometry(32, 8), naive_geometry(16, 16), naive_geometry(8, 8),
                naive_geometry(1, 1)],
        "CPU": [naive_geometry(64, 4), naive_geometry(16, 16), naive_geometry(8, 8),
                naive_geometry(1, 1)],
    },
    "tiled": {
        "GPU": [tiled_geometry(32), tiled_geometry(16), tiled_geometry(8), tiled_geometry(4)],
        "CPU": [tiled_geometry(8), tiled_geometry(16), tiled_geometry(4)],
    },
    "more_work": {
        "GPU": [more_work_geometry(32, 8), more_work_geometry(32, 4), more_work_geometry(16, 4),
                more_work_geometry(8, 2)],
        "CPU": [more_work_geometry(16, 4), more_work_geometry(32, 8), more_work_geometry(8, 2)],
    },
    "regblock_vec": {
        # H100, 4096^3: 64x128 block 45.0 TFLOP/s (167 registers, 128 work-items);
        # 128x128x16 39.4; 128x128x8 39.1; 64x64x16 with 4x4 per work-item 32.6.
        "GPU": [regblock_geometry(64, 128, 16, 8, 8), regblock_geometry(128, 128, 16, 8, 8),
                regblock_geometry(128, 128, 8, 8, 8), regblock_geometry(64, 64, 16, 4, 4),
                regblock_geometry(32, 32, 8, 4, 4)],
        # x86-64 (2 cores, AVX2), PoCL 3.0, 1024^3: unstaged 32x64 block, 4x8 per
        # work-item 40 GFLOP/s; staged 64x64x16 with 4x4 per work-item 16.
        "CPU": [regblock_geometry(32, 64, 8, 4, 8, stage=0),
                regblock_geometry(32, 32, 8, 4, 8, stage=0),
                regblock_geometry(16, 16, 8, 4, 4, stage=0)],
    },
}


def _with_vec(geometry: Geometry, vec: int) -> Geometry:
    defines = tuple((n, vec if n == "VEC" else v) for n, v in geometry.defines)
    return Geometry(defines, geometry.local, geometry.block, geometry.local_mem)


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
class Prepared:
    """A kernel built for one geometry, and the local sizes already launched once."""

    geometry: Geometry
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
        self._prepared: dict[tuple[str, int], Prepared] = {}
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
    def _fits(self, geometry: Geometry) -> str:
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

    def candidates(self, kernel: Kernel) -> list[Geometry]:
        table = TUNING.get(kernel.name)
        if table is None:
            return []
        return list(table.get(self.device_type, table["GPU"]))

    def kernel_reason(self, kernel: Kernel) -> str:
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

    def prepare(self, kernel: Kernel, vec: bool = False,
                geometries: Sequence[Geometry] | None = None) -> Prepared:
        """Build ``kernel`` with the first geometry the device accepts (cached)."""
        key = (kernel.id, int(vec)) if geometries is None else (
            kernel.id, hash(tuple(geometries)))
        if key in self._prepared:
            return self._prepared[key]
        cl = self._cl
        source = read_source(kernel.source)
        refusals = []
        for geometry in geometries or self.candidates(kernel):
            if "VEC" in dict(geometry.defines) and geometries is None:
                geometry = _with_vec(geometry, int(vec))
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
            info = cl.kernel_work_group_info
            limit = knl.get_work_group_info(info.WORK_GROUP_SIZE, self.device)
            if geometry.work_group_size > limit:
                refusals.append(f"built kernel allows {limit} work-items, "
                                f"{geometry.describe()} needs {geometry.work_group_size}")
                continue
            prepared = Prepared(geometry, knl)
            self._prepared[key] = prepared
            return prepared
        raise KernelUnavailable(f"{kernel.id} cannot run on {self.entry.name}: "
                                + "; ".join(refusals))

    # ---------------------------------------------------------------- execution
    def execute(self, kernel: Kernel, call: GemmCall, repeats: int, warmup: int) -> Execution:
        if kernel.reference:
            return self._execute_clblast(call, repeats, warmup)
        prepared = self.prepare(kernel, vec=vec_ok(call))
        return self.execute_prepared(prepared, call, repeats, warmup)

    def execute_prepared(self, prepared: Prepared, call: GemmCall, repeats: int,
                         warmup: int) -> Execution:
        """Time one prepared kernel (a tuning script may pass its own via ``prepare``)."""
        cl = self._cl
        geometry, knl = prepared.geometry, prepared.kernel
        buffers = self._buffers(call)
        a_buf, b_buf, c_buf = buffers.device
        knl.set_args(np.int32(call.m), np.int32(call.n), np.int32(call.k),
                     np.float32(call.alpha), a_buf, b_buf, np.float32(call.beta), c_buf)
        global_size = geometry.global_size(call)
        local_size = (*geometry.local, 1)

        def launch():
            return cl.enqueue_nd_range_kernel(self.queue, knl, global_size, local_size)

        if local_size not in prepared.primed:
            # One work-group: PoCL compiles the work-group function for this local size here.
            cl.enqueue_nd_range_kernel(self.queue, knl, local_size, local_size).wait()
            prepared.primed.add(local_size)
        execution = self._timed_runs(call, buffers, launch, repeats, warmup)
        execution.info.update({"geometry": geometry.describe(),
                               "build_options": " ".join(geometry.options + self.device_options),
                               "global_size": list(global_size)})
        return execution

    def _buffers(self, call: GemmCall) -> _Buffers:
        cl = self._cl
        mf = cl.mem_flags
        ctx = self.context
        device = tuple(cl.Buffer(ctx, flags, max(array.nbytes, 4)) for flags, array in (
            (mf.READ_ONLY, call.a), (mf.READ_ONLY, call.b), (mf.READ_WRITE, call.c0)))
        if self.options.pinned:
            hosts = [self._pinned(array.size) for array in (call.a, call.b, call.c0)]
            for host, array in zip(hosts, (call.a, call.b, call.c0)):
                host[:] = array
            return _Buffers(device, *hosts, self._pinned(call.c_size))
        return _Buffers(device, call.a, call.b, call.c0, np.empty(call.c_size, np.float32))

    def _pinned(self, size: int) -> np.ndarray:
        # Page-locked host memory the OpenCL way: a host-allocated buffer, mapped.
        cl = self._cl
        buf = cl.Buffer(self.context, cl.mem_flags.ALLOC_HOST_PTR, max(4 * size, 4))
        array, _ = cl.enqueue_map_buffer(self.queue, buf, cl.map_flags.READ | cl.map_flags.WRITE,
                                         0, (size,), np.float32)
        return array  # the mapping (array.base) keeps the buffer alive

    def _timed_runs(self, call: GemmCall, buffers: _Buffers, launch: Callable, repeats: int,
                    warmup: int) -> Execution:
        cl, queue = self._cl, self.queue
        a_buf, b_buf, c_buf = buffers.device
        nan = np.float32(np.nan)
        kernel_ms, h2d_ms, d2h_ms = [], [], []
        for run in range(warmup + repeats):
            copies = [cl.enqueue_copy(queue, a_buf, buffers.a, is_blocking=False),
                      cl.enqueue_copy(queue, b_buf, buffers.b, is_blocking=False)]
            if call.beta != 0.0:
                copies.append(cl.enqueue_copy(queue, c_buf, buffers.c0, is_blocking=False))
            else:
                cl.enqueue_fill_buffer(queue, c_buf, nan, 0, 4 * call.c_size)
            kernel_event = launch()
            back = cl.enqueue_copy(queue, buffers.c, c_buf, is_blocking=True)
            if run >= warmup:
                h2d_ms.append(sum(_ms(e) for e in copies))
                kernel_ms.append(_ms(kernel_event))
                d2h_ms.append(_ms(back))
        output = buffers.c if not self.options.pinned else np.array(buffers.c)
        return Execution(output=output, kernel_ms=kernel_ms, h2d_ms=h2d_ms, d2h_ms=d2h_ms,
                         info={"device": self.entry.label, "device_type": self.device_type,
                               "pinned": self.options.pinned})

    # ---------------------------------------------------------------- reference
    def _execute_clblast(self, call: GemmCall, repeats: int, warmup: int) -> Execution:
        reason = _clblast_reason()
        if reason:
            raise KernelUnavailable(reason)
        import pyclblast
        from pyopencl.array import Array

        buffers = self._buffers(call)
        a_buf, b_buf, c_buf = buffers.device
        queue = self.queue
        m, n, k, batch = call.m, call.n, call.k, call.batch
        a = Array(queue, (batch * m, k), np.float32, data=a_buf)
        b = Array(queue, (batch * k, n), np.float32, data=b_buf)
        c = Array(queue, (batch * m, n), np.float32, data=c_buf)

        class _Events:
            def __init__(self, events: list) -> None:
                self.events = events

        def launch():
            events = [pyclblast.gemm(queue, m, n, k, a, b, c, a_ld=k, b_ld=n, c_ld=n,
                                     alpha=call.alpha, beta=call.beta, a_offset=i * m * k,
                                     b_offset=i * k * n, c_offset=i * m * n)
                      for i in range(batch)]
            return _Events(events)

        execution = self._timed_runs(call, buffers, launch, repeats, warmup)
        execution.info["geometry"] = "CLBlast"
        return execution

    # -------------------------------------------------------------- environment
    def environment(self) -> dict:
        if self._cl is None:
            return {"opencl": self._import_reason}
        env: dict = {"pyopencl": self._cl.VERSION_TEXT}
        entries = list_devices()
        env["opencl_devices"] = [e.label for e in entries]
        hint = nvidia_icd_hint()
        if hint:
            env["opencl_note"] = hint
        try:
            entry = self.entry
        except (KernelUnavailable, ValueError) as exc:
            env["opencl"] = str(exc)
            return env
        dev, platform = entry.device, entry.platform
        env.update({
            "opencl_platform": entry.platform_name,
            "opencl_platform_version": platform.version.strip(),
            "opencl_device": entry.name,
            "opencl_device_index": entry.index,
            "opencl_device_type": entry.type_name,
            "opencl_device_version": dev.version.strip(),
            "opencl_c_version": dev.opencl_c_version.strip(),
            "opencl_driver": dev.driver_version.strip(),
            "compute_units": dev.max_compute_units,
            "max_clock_mhz": dev.max_clock_frequency,
            "max_work_group_size": dev.max_work_group_size,
            "local_mem_bytes": dev.local_mem_size,
            "global_mem_bytes": dev.global_mem_size,
        })
        pocl = re.search(r"PoCL\s+([0-9][^\s]*)", platform.version, re.IGNORECASE)
        if pocl:
            env["pocl"] = pocl.group(1)
            try:
                from importlib.metadata import version

                env["pocl_binary_distribution"] = version("pocl-binary-distribution")
            except Exception:
                pass
        try:
            from importlib.metadata import version

            import pyclblast  # noqa: F401

            env["pyclblast"] = version("pyclblast")
        except Exception:
            pass
        return env


@dataclass
class _Buffers:
    """Device buffers (A, B, C) and the host arrays the transfers use."""

    device: tuple
    a: np.ndarray
    b: np.ndarray
    c0: np.ndarray
    c: np.ndarray


def _ms(event) -> float:
    """Device time of an OpenCL command (or of several, for a batched library call), in ms."""
    events = getattr(event, "events", None)
    if events is not None:
        return sum(_ms(e) for e in events) if all(e is not None for e in events) else math.nan
    event.wait()
    return (event.profile.end - event.profile.start) * 1e-6


def _clblast_reason() -> str:
    try:
        import pyclblast  # noqa: F401
    except ImportError:
        return "pyclblast is not installed (optional: `pip install pyclblast`, needs CLBlast)"
    return ""
