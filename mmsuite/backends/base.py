"""The contract every backend adapter implements: ``Backend.prepare`` gives a ``Session``.

The measurement loop (warm-up, resetting C, sampling, the stopping rule, the L2
policy) lives once, in ``mmsuite.measure``. An adapter only gives it primitives:

- ``Backend.prepare(kernel, call)`` compiles or looks up the kernel, allocates,
  and copies the inputs in (untimed). ``call`` is already mapped to the
  kernel's native layout (``mmsuite.layout``).
- ``Session.reset_c()`` enqueues C's reset: NaN when beta == 0 (so an unwritten
  element fails verification), else C0. Never inside a sample.
- ``Session.launch()`` enqueues one launch of the kernel (or the vendor library
  call, or a sequence of kernels), asynchronously where the device allows.
- ``Session.timer()`` gives a device timer: ``start()``, ``stop()`` bracket the
  launches of one sample, ``elapsed_ms()`` waits for them and returns their
  device time. Nothing of the host's may land between start and stop on a
  device that runs asynchronously (see the CUDA adapter's spin kernel).
- ``Session.scrub_l2()`` evicts the inputs from the last-level cache
  (``--l2 cold``), ``synchronize()`` waits for the device, ``output()`` copies C
  out (untimed), ``transfer_ms(pinned)`` times one h2d of A and B and one d2h
  of C, ``close()`` frees everything.

Vendor libraries are sessions like any other, so no adapter branches on "is
this the reference" inside its loop; verification, statistics and reporting
happen elsewhere, once for all backends.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..backend_table import BACKENDS, GPU

if TYPE_CHECKING:
    from .. import verify
    from ..layout import GemmCall
    from ..problem import Problem

L2_POLICIES = ("warm", "cold")


@dataclass(frozen=True)
class RunOptions:
    """Backend settings chosen by the user; hashable so adapters can be cached per option set."""

    threads: int | None = None  # OpenMP threads for the CPU backend (None: all cores)
    cl_device: str | None = None  # OpenCL device: index or name substring
    pinned: bool = False  # page-locked host buffers for GPU transfers
    profile: bool = False  # add registers / shared / spill bytes per kernel
    l2: str = "warm"  # "warm": inputs stay cached between samples; "cold": scrubbed before each
    energy: bool = False  # energy per GEMM from the device's counter (mmsuite.energy)

    def __post_init__(self) -> None:
        if self.l2 not in L2_POLICIES:
            raise ValueError(f"l2 must be one of {', '.join(L2_POLICIES)}, got {self.l2!r}")


class KernelSpec(Protocol):
    """What an adapter reads of a kernel: ``mmsuite.catalogue.Kernel`` is one. The
    adapters never import the catalogue, which asks them whether a kernel can run."""

    @property
    def id(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def source(self) -> str | None: ...
    @property
    def entry(self) -> str | None: ...
    @property
    def layout(self) -> str: ...
    @property
    def reference(self) -> bool: ...
    @property
    def launch(self) -> Any: ...
    @property
    def precision(self) -> str: ...
    @property
    def plugin(self) -> str: ...
    @property
    def function(self) -> Callable[..., object] | None: ...


class KernelUnavailable(RuntimeError):
    """The kernel cannot run here; the message is the reason."""


class KernelFailed(RuntimeError):
    """The kernel failed as kernels fail: its compiler refused it, a launch or its execution
    faulted, its timer could not vouch for a sample. A row of status error, no bug of
    mmsuite's; the message says what happened (Kernel Tuner types its expected failures
    so, and lets everything else through as a bug)."""


def is_kernel_failure(exc: BaseException, runtime_packages: tuple[str, ...]) -> bool:
    """Whether ``exc`` is a kernel's failure rather than a bug in mmsuite: a KernelFailed, a
    memory shortage, or an error raised by the device's own runtime (CuPy, pyopencl)."""
    if isinstance(exc, (KernelFailed, MemoryError)):
        return True
    return type(exc).__module__.split(".", 1)[0] in runtime_packages


class Timer(ABC):
    """Times the launches enqueued between ``start()`` and ``stop()`` with the device's clock.

    ``floor_ms`` is a fixed cost the timer adds to every sample whatever it brackets
    (0: none worth counting); the engine puts several launches into a sample when one
    launch is short beside it.
    """

    floor_ms: float = 0.0

    @abstractmethod
    def start(self) -> None:
        """Mark the start of a sample (enqueued, on an asynchronous device)."""

    @abstractmethod
    def stop(self) -> None:
        """Mark the end of a sample."""

    @abstractmethod
    def elapsed_ms(self) -> float | None:
        """Wait until the sample is done; its duration in milliseconds, or None when the
        timer cannot vouch for it (the engine then takes the sample again)."""

    def disturbed(self) -> bool:
        """Whether the last sample is known to have been disturbed from outside (another
        process took the CPU) although it was kept; the engine counts these."""
        return False


class WallTimer(Timer):
    """A monotonic wall clock, for devices where a launch returns when the work is done."""

    def __init__(self) -> None:
        self._start = self._stop = 0.0

    def start(self) -> None:
        self._start = time.perf_counter()

    def stop(self) -> None:
        self._stop = time.perf_counter()

    def elapsed_ms(self) -> float:
        return (self._stop - self._start) * 1e3


class Session(ABC):
    """One kernel prepared on one call: buffers allocated and filled, ready to launch.

    ``info`` collects facts for the result record (threads, grid, ...).
    ``warmup_floor_s`` is the least time the engine spends warming up when it
    warms up at all (some devices need more than one launch to settle).
    """

    has_transfers: bool = False
    warmup_floor_s: float = 0.0

    def __init__(self, kernel: KernelSpec, call: GemmCall) -> None:
        self.kernel = kernel
        self.call = call
        self.info: dict = {}

    @abstractmethod
    def reset_c(self) -> None:
        """Enqueue C's reset: NaN when beta == 0, else C0."""

    @abstractmethod
    def launch(self) -> None:
        """Enqueue one launch (or the library call, or the sequence of kernels)."""

    @abstractmethod
    def timer(self) -> Timer:
        """A timer for one sample; the engine may reuse it for the next sample."""

    @abstractmethod
    def output(self) -> np.ndarray:
        """C's storage after the last launch, copied to the host (untimed)."""

    @abstractmethod
    def scrub_l2(self) -> None:
        """Enqueue the eviction of the operands from the last-level cache (``--l2 cold``)."""

    def synchronize(self) -> None:
        """Wait until everything enqueued is done (host sessions: nothing is pending)."""
        return None

    def transfer_ms(self, pinned: bool) -> tuple[float, float]:
        """(h2d of A and B, d2h of C) in ms with pageable or pinned host memory.

        Host backends have no transfers and return zeros (``has_transfers`` False).
        """
        return 0.0, 0.0

    def close(self) -> None:
        """Free the session's buffers (host sessions: garbage collection does)."""
        return None

    def energy_reader(self) -> Callable[[], float] | str:
        """A reader of the device's energy counter in joules (``mmsuite.energy``), or why
        there is none."""
        return f"no energy counter for {self.kernel.backend} devices"

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Backend(ABC):
    """One kind of device. Subclasses are thin: they prepare sessions, nothing else."""

    name: str = ""
    # A host backend's rungs share the cores with everything else: the engine then
    # alternates their samples with the backend's reference library (measure.py).
    interleaves_reference: bool = False
    # The packages (driver, compiler, runtime library) whose exceptions report that a
    # kernel failed on this backend's device; any other exception is a bug in mmsuite.
    runtime_packages: tuple[str, ...] = ()

    def __init__(self, options: RunOptions) -> None:
        self.options = options

    @abstractmethod
    def probe(self) -> str:
        """Empty when the backend can run here, else a one-line reason with a way out."""

    def kernel_reason(self, kernel: KernelSpec) -> str:
        """Empty when this kernel can run on the selected device, else why not."""
        return ""

    def build_flags(self, kernel: KernelSpec) -> str:
        """What a plugin kernel's code is built with here, beyond its source, as part of its
        code identity (the C flags of a plugin's C kernel); empty where nothing is."""
        return ""

    def warm(self, jobs: Sequence[tuple[KernelSpec, GemmCall]]) -> None:
        """Build ahead, untimed, what these jobs will launch (``call`` carries sizes only).

        Optional: a backend that compiles nothing, or compiles fast, does nothing here. A job
        whose build fails is not this method's to report; its own row does that."""
        return None

    @abstractmethod
    def prepare(self, kernel: KernelSpec, call: GemmCall) -> Session:
        """Compile or look up ``kernel``, allocate and copy ``call``'s inputs in (untimed)."""

    @property
    def device_type(self) -> str:
        """"CPU" or "GPU": the kind of device this backend's kernels run on here."""
        return "GPU" if BACKENDS[self.name].device == GPU else "CPU"

    def environment(self) -> dict:
        """Facts about where this backend runs (device, driver, versions)."""
        return {}

    def device_count(self) -> int:
        """How many devices of this backend the host has: an isolated backend's kernels run
        in one worker per device, on those ``--devices`` picks."""
        return 1

    def devices_environment(self, indices: Iterable[int]) -> list[dict]:
        """What a result records about each device (by index) that a sweep ran on."""
        return []

    def reference(self, problem: Problem,
                  inputs: tuple[np.ndarray, ...]) -> verify.Reference | None:
        """The float64 reference (``mmsuite.verify.reference``) computed on this backend's
        device, or None to use the host."""
        return None
