"""The OpenCL adapter's session: buffers of one call on one queue, launches, timer, transfers.

See ``mmsuite.backends.opencl`` for devices and builds. A session holds device
buffers for A, B and C on the backend's profiling, in-order queue; A and B are
copied in once, untimed. C is reset on the device (a NaN fill when beta == 0, a
copy of C0 otherwise). ``KernelSession`` launches a cl/ rung as one NDRange;
PoCL compiles a kernel again for each local size at its first launch, so the
first session of each built geometry makes one untimed single-work-group launch,
whatever the warm-up. ``ClblastSession`` calls CLBlast's sgemm once per matrix of
the batch.

``GateTimer`` gates the queue: its start enqueues a marker that waits on a user
event, then the start marker; the launches and the stop marker follow, and only
then does the host open the gate. The device so runs the sample's commands back
to back, and the markers bracket everything the launch enqueued (CLBlast
enqueues several kernels for one call), with nothing of the host's between them.
Transfers are timed in their own phase from the copies' profiling events, from
pageable and from pinned (ALLOC_HOST_PTR) host memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .base import Session, Timer

if TYPE_CHECKING:
    from ..launch import ClGeometry
    from ..layout import GemmCall
    from .base import KernelSpec

# Twice the largest last-level cache of the devices this runs on (H100: 50 MB L2).
SCRUB_BYTES = 256 * 2**20


@dataclass
class ClDevice:
    """What a session takes from the backend, passed in so that this module does not
    import it: pyopencl, the device's queue and context, and what results record."""

    cl: Any  # the pyopencl module
    queue: Any  # pyopencl.CommandQueue: in order, profiling enabled
    context: Any  # pyopencl.Context of the queue
    label: str  # DeviceEntry.label
    device_type: str  # "GPU" or "CPU"
    build_options: list[str]  # the device's, beside each geometry's


@dataclass
class Built:
    """A kernel built for one geometry (by the backend), and the local sizes already
    launched once: PoCL compiles a kernel again for each local size at its first launch."""

    geometry: ClGeometry
    kernel: Any  # pyopencl.Kernel
    primed: set = field(default_factory=set)


class GateTimer(Timer):
    """Markers around the sample's commands, released together by a user event."""

    def __init__(self, cl: Any, queue: Any) -> None:
        self._cl, self._queue = cl, queue
        # pyopencl's UserEvent and the two marker Events of the sample under way.
        self._gate: Any | None = None
        self._start: Any | None = None
        self._stop: Any | None = None

    def start(self) -> None:
        cl = self._cl
        self._gate = cl.UserEvent(self._queue.context)
        cl.enqueue_marker(self._queue, wait_for=[self._gate])
        self._start = cl.enqueue_marker(self._queue)

    def stop(self) -> None:
        if self._gate is None:
            raise RuntimeError("GateTimer.stop() before start()")
        self._stop = self._cl.enqueue_marker(self._queue)
        self._gate.set_status(self._cl.command_execution_status.COMPLETE)

    def elapsed_ms(self) -> float:
        if self._start is None or self._stop is None:
            raise RuntimeError("GateTimer.elapsed_ms() before start() and stop()")
        self._stop.wait()
        return (self._stop.profile.end - self._start.profile.end) * 1e-6


def _ms(event: Any) -> float:
    """Device time of one OpenCL command, in ms."""
    event.wait()
    return (event.profile.end - event.profile.start) * 1e-6


class ClSession(Session):
    """Device buffers for one call on the device's queue; subclasses say how to launch."""

    has_transfers = True

    def __init__(self, device: ClDevice, kernel: KernelSpec, call: GemmCall) -> None:
        super().__init__(kernel, call)
        cl = self._cl = device.cl
        self.queue, self.context = device.queue, device.context
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
        self.info.update({"device": device.label, "device_type": device.device_type})

    def reset_c(self) -> None:
        cl, nbytes = self._cl, 4 * self.call.c_size
        if self._c0_buf is None:
            cl.enqueue_fill_buffer(self.queue, self.c_buf, np.float32(np.nan), 0, nbytes)
        else:
            cl.enqueue_copy(self.queue, self.c_buf, self._c0_buf, byte_count=nbytes)

    def timer(self) -> Timer:
        return GateTimer(self._cl, self.queue)

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


class KernelSession(ClSession):
    """A cl/ rung: one NDRange of the built kernel per launch."""

    def __init__(self, device: ClDevice, kernel: KernelSpec, call: GemmCall,
                 built: Built) -> None:
        super().__init__(device, kernel, call)
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
                          "build_options": " ".join(geometry.options + device.build_options),
                          "global_size": list(self._global)})

    def launch(self) -> None:
        self._cl.enqueue_nd_range_kernel(self.queue, self._kernel, self._global, self._local)


class ClblastSession(ClSession):
    """The reference: CLBlast's sgemm, one call per matrix of the batch."""

    def __init__(self, device: ClDevice, kernel: KernelSpec, call: GemmCall) -> None:
        super().__init__(device, kernel, call)
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
