"""Where a sweep's jobs run: in this process, or in one worker process per GPU.

A job measures one kernel on one problem and returns ``(status, reason, record)``.

GPU kernels run in spawned worker processes, each a single-process
``concurrent.futures.ProcessPoolExecutor``: CUDA kernels in one per device,
OpenCL kernels on a GPU in one of their own. A CUDA error that
corrupts the context (an illegal address), an abort or a kernel that never
returns then costs one row: a worker that died, timed out or raised is
replaced by a fresh one, and the next job starts clean. Spawn, not fork: CUDA
and libgomp do not survive a fork.

Host kernels (C, OpenMP, OpenCL on a CPU) run in one long-lived worker process
of their own (:func:`run_in_host_worker`), started once per sweep: a segfault in
a C rung costs its row, recorded as ``crashed``, and the next kernel gets a fresh
worker. Ctrl-C is seen at once by the waiting main process, which kills the
worker. :class:`HostLane` runs jobs in this process instead, for tests that patch
functions of this process.

Before any allocation a job checks the problem's host memory against what the
host and its cgroup have available.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import queue
import signal
import sys
import tempfile
import threading
import traceback
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TextIO, TypeVar

from . import catalogue, plugins
from .backends import KernelUnavailable, RunOptions, get_backend, is_kernel_failure
from .launch import LaunchLimit
from .layout import sized_call
from .measure import library_error, reference_for, run
from .problem import Problem

# The default per-job timeout: a floor for start-up (spawn, imports, compilation,
# inputs and reference), plus 20 launches at 10 GFLOP/s, far below any GPU rung.
TIMEOUT_FLOOR_S = 60.0
TIMEOUT_LAUNCHES = 20
TIMEOUT_RATE_FLOPS = 1e10
# How long a fresh worker may take to start (spawn and import).
START_TIMEOUT_S = 120.0
WARM_TIMEOUT_S = 300.0  # a worker's builds ahead of its jobs (``Worker.warm``)
# A plugin's host kernel may take this many times a GPU job's limit (a naive loop is slow).
HOST_PLUGIN_SLACK = 10

Result = tuple[str, str, "dict | None"]  # (status, reason, record)
JobFn = Callable[[str, Problem, RunOptions, dict], Result]
Returned = TypeVar("Returned")  # what a function run in a worker returns


def default_timeout(problem: Problem) -> float:
    """Seconds a GPU job may take before its worker is killed (``--timeout`` overrides)."""
    return TIMEOUT_FLOOR_S + TIMEOUT_LAUNCHES * problem.flops / TIMEOUT_RATE_FLOPS


# ------------------------------------------------------------------ host memory
class HostMemoryError(MemoryError):
    """The problem does not fit in the host memory available now."""


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def cgroup_free_memory(proc_cgroup: Path = Path("/proc/self/cgroup"),
                       fs: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes left under this process's memory cgroup limits (v2 or v1, the tightest of its
    cgroup and every ancestor); None where no limit is set or none can be read."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    free = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            root, limit_file, usage_file = fs, "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            root, limit_file, usage_file = (fs / "memory", "memory.limit_in_bytes",
                                            "memory.usage_in_bytes")
        else:
            continue
        folder = root / path.strip("/")
        while True:
            limit, usage = _read_int(str(folder / limit_file)), _read_int(str(folder / usage_file))
            if limit is not None and usage is not None and limit < 2**60:  # v1 writes ~2**63
                free.append(max(0, limit - usage))
            if folder == root or root not in folder.parents:
                break
            folder = folder.parent
    return min(free) if free else None


def available_host_memory() -> int | None:
    """Bytes this process may still allocate: MemAvailable, capped by the cgroup's free
    room; None when neither can be read."""
    candidates = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                candidates.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    cgroup = cgroup_free_memory()
    if cgroup is not None:
        candidates.append(cgroup)
    return min(candidates) if candidates else None


def check_host_memory(problem: Problem) -> None:
    """Raise HostMemoryError when ``problem`` needs more host memory than is available."""
    available = available_host_memory()
    need = problem.host_bytes
    if available is not None and need > available:
        raise HostMemoryError(
            f"{problem.shape_label} needs about {need / 2**30:.1f} GiB of host memory "
            f"(inputs, float64 reference, output); {available / 2**30:.1f} GiB is available; "
            "use a smaller shape or batch")


# --------------------------------------------------------------------- the job
_CACHE: dict[str, Any] = {}  # the last problem's inputs and reference, per process


def measure_job(kernel_id: str, problem: Problem, options: RunOptions, run_kwargs: dict) -> Result:
    """Measure one kernel on one problem; never raises (a failure is an ``error`` result).

    A kernel's failure (``backends.is_kernel_failure``) is a row with its reason. Any other
    exception is a bug in mmsuite: its row says so, and its traceback goes to standard
    error (a worker's is the parent's), so that it is never taken for the kernel's fault.

    The inputs and their float64 reference are kept for the next kernel on the
    same problem; the reference is computed on the kernel's device in a worker
    and on the host in this process.
    """
    if kernel_id not in catalogue.BY_ID:  # a cluster worker started without the plugin
        return "unavailable", (f"{kernel_id} is not in this worker's catalogue: a plugin's "
                               "kernels need the plugin on every worker (install it there, "
                               "or start `mmsuite worker` with --plugin)"), None
    try:
        kernel = catalogue.get(kernel_id)
        ref_backend = kernel.backend if _IN_WORKER else None
        key = (problem, options, ref_backend)
        if _CACHE.get("key") != key:
            _CACHE.clear()  # drop the previous problem's arrays before allocating
            check_host_memory(problem)
            inputs = problem.inputs()
            _CACHE.update(key=key, inputs=inputs,
                          reference=reference_for(problem, inputs, options, ref_backend))
        libraries = _CACHE.setdefault("library", {})
        if kernel.backend not in libraries:
            libraries[kernel.backend] = library_error(problem, _CACHE["inputs"],
                                                      _CACHE["reference"], options, kernel.backend)
        m = run(kernel_id, problem, options=options, inputs=_CACHE["inputs"],
                reference=_CACHE["reference"], library=libraries[kernel.backend], **run_kwargs)
        record = m.to_record()
        return record["status"], record.get("reason", ""), record
    except KernelUnavailable as exc:  # found only now, e.g. the problem exceeds a device limit
        return "unavailable", str(exc), None
    except Exception as exc:  # neither a broken kernel nor a bug may end the sweep
        what = f"{type(exc).__name__}: {exc}".strip()
        if _is_kernel_failure(exc, kernel_id, options):
            return "error", what, None
        print(f"mmsuite: a bug while measuring {kernel_id} on {problem.shape_label}:",
              file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
        return "error", f"internal error (a bug in mmsuite; traceback on stderr): {what}", None


def warm_job(pairs: list[tuple[str, Problem]], options: RunOptions) -> None:
    """Let each backend build ahead, untimed, what these kernel x problem jobs will launch
    (``Backend.warm``); a build that fails is left to its job's row."""
    by_backend: dict[str, list] = {}
    for kernel_id, problem in pairs:
        kernel = catalogue.get(kernel_id)
        by_backend.setdefault(kernel.backend, []).append(
            (kernel, sized_call(problem, kernel.layout)))
    for backend, jobs in by_backend.items():
        get_backend(backend, options).warm(jobs)


def _is_kernel_failure(exc: Exception, kernel_id: str, options: RunOptions) -> bool:
    """Whether ``exc``, raised measuring ``kernel_id``, is the kernel's failure (its row's
    reason is all there is to say) rather than a bug in mmsuite."""
    if isinstance(exc, LaunchLimit):
        return True
    try:
        runtime_packages = get_backend(catalogue.get(kernel_id).backend, options).runtime_packages
    except Exception:  # no adapter to ask: only the typed failures count
        runtime_packages = ()
    return is_kernel_failure(exc, runtime_packages)


def clear_cache() -> None:
    """Free the arrays ``measure_job`` keeps between kernels of one problem."""
    _CACHE.clear()


# ----------------------------------------------------------------- host lane
class HostLane:
    """Runs jobs in this process on one daemon thread; ``run`` blocks, interruptibly."""

    def __init__(self) -> None:
        self._jobs: queue.Queue = queue.Queue()
        threading.Thread(target=self._serve, name="mmsuite-host", daemon=True).start()

    def _serve(self) -> None:
        # Signals go to the main thread, which is waiting and can act on them at once.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        while True:
            item = self._jobs.get()
            if item is None:
                return
            fn, args, future = item
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to the waiting thread
                future.set_exception(exc)

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        future: Future = Future()
        self._jobs.put((fn, args, future))
        return future.result()

    def close(self) -> None:
        """The thread ends after the job it is running, if any."""
        self._jobs.put(None)


# --------------------------------------------------------------- GPU workers
_IN_WORKER = False
_CRASH_LOG: TextIO | None = None  # keeps faulthandler's file open in a worker


def visible_device(device: int, visible: str | None) -> str:
    """CUDA_VISIBLE_DEVICES for the worker of ``device``, an index into the parent's list."""
    ids = [x.strip() for x in visible.split(",") if x.strip()] if visible else []
    return ids[device] if ids else str(device)


PR_SET_PDEATHSIG = 1  # prctl(2)


def _die_with_parent(parent: int) -> None:
    """A worker whose mmsuite was killed (SIGKILL) must not go on running a kernel, holding
    the cores of the next run and the pipes of whoever waits for mmsuite: on Linux it gets
    SIGKILL when its parent thread ends (each worker lives within the thread that started
    it). Elsewhere it ends when it next reads a job from its dead parent."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


def _init_worker(device: int | None, crash_log: str, parent: int = 0) -> None:
    """Start-up of a worker process: its device, Ctrl-C left to the parent, crash reports."""
    global _IN_WORKER, _CRASH_LOG
    _IN_WORKER = True
    if parent:
        _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent saves rows and retires us
    if device is not None:
        # Set before CUDA starts in this process: the worker sees its GPU as device 0.
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_device(
            device, os.environ.get("CUDA_VISIBLE_DEVICES"))
    _CRASH_LOG = open(crash_log, "w")  # open for the worker's life
    faulthandler.enable(_CRASH_LOG)  # an abort or segfault leaves its cause here
    # The parent's plugins: MMSUITE_PLUGINS (which --plugin extends) and entry points, which
    # the parent has loaded once already, so that none fails here.
    plugins.load_configured()


def _run_in_worker(job: Callable[..., Returned], *args: Any) -> Returned:
    """A job in a worker. faulthandler is enabled again first: libraries loaded since (LLVM
    inside an OpenCL driver, for one) install their own handlers for the fatal signals."""
    faulthandler.disable()  # enable() alone keeps the handlers it installed at start-up
    faulthandler.enable(_CRASH_LOG if _CRASH_LOG is not None else sys.stderr)
    return job(*args)


class Worker:
    """One worker process bound to one device, replaced whenever a job kills or taints it."""

    def __init__(self, device: int | None, job: JobFn = measure_job) -> None:
        self.device, self._job = device, job
        self._pool: ProcessPoolExecutor | None = None
        self._pid = 0
        self._lock = threading.Lock()  # retire() comes from the device thread and from close()
        fd, self._crash_log = tempfile.mkstemp(prefix="mmsuite-worker-", suffix=".log")
        os.close(fd)
        # The log goes with the Worker even when nobody closes it.
        self._remove_log = weakref.finalize(self, Path(self._crash_log).unlink, missing_ok=True)

    def _start(self) -> None:
        self._pid = 0
        self._pool = ProcessPoolExecutor(1, mp_context=get_context("spawn"),
                                         initializer=_init_worker,
                                         initargs=(self.device, self._crash_log, os.getpid()))
        self._pid = self._pool.submit(os.getpid).result(timeout=START_TIMEOUT_S)

    def _crash_cause(self) -> str:
        try:
            text = Path(self._crash_log).read_text().strip()
        except OSError:
            return ""
        return text.splitlines()[0] if text else ""

    def retire(self) -> None:
        """Kill the worker process (if any); the next job starts a fresh one."""
        with self._lock:
            pool, self._pool = self._pool, None
            if pool is None:
                return
            if self._pid > 0:  # never 0: that would signal our own process group
                try:
                    os.kill(self._pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            pool.shutdown(wait=True, cancel_futures=True)

    def run(self, kernel_id: str, problem: Problem, options: RunOptions, run_kwargs: dict,
            timeout: float | None) -> Result:
        """Run one job with a time limit (None: none); a worker that dies, hangs or fails is
        replaced. A worker that died (a segfault, an abort) makes a ``crashed`` row."""
        if self._pool is None:
            try:
                self._start()
            except (FutureTimeout, BrokenProcessPool, OSError) as exc:
                cause = self._crash_cause() or f"{type(exc).__name__}: {exc}"
                self.retire()
                return "error", f"its worker process failed to start: {cause}", None
        pool = self._pool  # close() may clear it from another thread on Ctrl-C
        if pool is None:
            raise RuntimeError("the worker was retired while its job was starting")
        try:
            future = pool.submit(_run_in_worker, self._job, kernel_id, problem, options,
                                 run_kwargs)
            status, reason, record = future.result(timeout=timeout)
        except FutureTimeout:
            self.retire()
            return "error", f"timed out after {timeout:.0f} s; its worker was killed", None
        except BrokenProcessPool:
            cause = self._crash_cause()
            self.retire()
            return "crashed", "its worker process died" + (
                f": {cause}" if cause else " (killed, out of memory, or a native crash)"), None
        if status == "error":
            self.retire()  # a CUDA error may have left the context unusable
        return status, reason, record

    def warm(self, pairs: list[tuple[str, Problem]], options: RunOptions) -> None:
        """Start the worker and let it build ahead what ``pairs`` will launch (``warm_job``).
        Best effort: a worker that fails here is replaced, and its jobs report why."""
        try:
            if self._pool is None:
                self._start()
            pool = self._pool
            if pool is not None:
                pool.submit(_run_in_worker, warm_job, pairs, options).result(
                    timeout=WARM_TIMEOUT_S)
        except (FutureTimeout, BrokenProcessPool, OSError):
            self.retire()

    def close(self) -> None:
        self.retire()
        self._remove_log()


def run_in_host_worker(jobs: Iterable[Job], options: RunOptions, run_kwargs: dict,
                       on_result: Callable[[Job, int | None, Result], None],
                       job: JobFn = measure_job,
                       on_start: Callable[[Job, int | None], None] | None = None) -> None:
    """Run host ``jobs`` one after another in one worker process, started once and kept
    for every job (a fresh one only after a crash or an error).

    No time limit for the ladder: a CPU rung's time is bounded by the stopping rule, and a
    slow one is not a hung GPU. A plugin's kernel, whose code mmsuite has never seen, gets
    ``HOST_PLUGIN_SLACK`` times a GPU job's limit, so that one that hangs costs its row.
    Ctrl-C kills the worker and propagates.
    """
    worker = Worker(None, job)
    try:
        for item in jobs:
            if on_start is not None:
                on_start(item, None)
            limit = HOST_PLUGIN_SLACK * default_timeout(item.problem) \
                if catalogue.get(item.kernel_id).plugin else None
            on_result(item, None, worker.run(item.kernel_id, item.problem, options, run_kwargs,
                                             limit))
    finally:
        worker.close()


@dataclass(frozen=True)
class Job:
    """One kernel on one problem, at ``index`` in ladder order."""

    index: int
    kernel_id: str
    problem: Problem


def run_on_devices(jobs: Iterable[Job], devices: list[int | None], options: RunOptions,
                   run_kwargs: dict, timeout: float | None,
                   on_result: Callable[[Job, int | None, Result], None],
                   job: JobFn = measure_job,
                   on_start: Callable[[Job, int | None], None] | None = None) -> None:
    """Run ``jobs`` on one worker per device; each device takes the next job as it is free.

    ``on_start(job, device)`` and ``on_result(job, device, result)`` are called (from a
    device's thread) as each starts and finishes; ``timeout`` None means
    ``default_timeout`` of each problem.
    Ctrl-C kills every worker and propagates.
    """
    jobs = list(jobs)
    pending: queue.Queue = queue.Queue()
    for item in jobs:
        pending.put(item)
    workers = [Worker(device, job) for device in devices]
    stop = threading.Event()
    failures: list[BaseException] = []

    def serve(worker: Worker, share: list[Job]) -> None:
        # Ctrl-C is the main thread's; a worker started from here inherits the blocked
        # signal, so one starting up when Ctrl-C comes does not die with a traceback.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            if job is measure_job and share:  # planted test jobs build nothing
                worker.warm([(item.kernel_id, item.problem) for item in share], options)
            while not stop.is_set():
                try:
                    item = pending.get_nowait()
                except queue.Empty:
                    return
                limit = timeout if timeout is not None else default_timeout(item.problem)
                if on_start is not None:
                    on_start(item, worker.device)
                result = worker.run(item.kernel_id, item.problem, options, run_kwargs, limit)
                if stop.is_set():
                    return  # interrupted: this result is not reported
                on_result(item, worker.device, result)
        except BaseException as exc:  # a bug here: stop the others and raise it in the caller
            failures.append(exc)
            stop.set()

    # Each worker first builds ahead a share of what the sweep launches, untimed and several
    # builds at once; they land in the compilers' disk caches, which the workers share.
    threads = [threading.Thread(target=serve, args=(w, jobs[i::len(workers)]),
                                name=f"mmsuite-device-{w.device}", daemon=True)
               for i, w in enumerate(workers)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        stop.set()
        for worker in workers:
            worker.close()
    if failures:
        raise failures[0]
