"""The sweep runner: many kernels over many problems, one row per pair, never stopping early.

A kernel that is unavailable, fails verification, raises, crashes its worker
or times out becomes a row with its reason; the sweep goes on. Rows come back
in ladder order (problem by problem, catalogue order within each), however
many devices ran them; ``on_row`` sees each row as it finishes, so a caller
can save it at once.

Host kernels run first, one after another, in one long-lived worker process
(a segfault costs one ``crashed`` row). OpenCL kernels on a GPU then run in one
worker process, and the kernels of an ``isolated`` backend (CUDA by default)
last, in worker processes, one per device (see ``mmsuite.workers``): a GPU is
never shared by two phases. The float64 reference is computed once per problem
in each process and shared by its kernels.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from . import results, workers
from .backend_table import BACKENDS, SELECTED
from .backends import RunOptions, unavailable_reason
from .catalogue import Kernel
from .problem import Problem

ISOLATED = tuple(name for name, backend in BACKENDS.items() if backend.isolated)
# Backends whose host kernels run in this process instead of the host worker: none by
# default; tests that patch functions of this process list theirs here.
IN_PROCESS: tuple[str, ...] = ()


@dataclass
class Row:
    """One kernel on one problem: status is ok, failed, invalid, unavailable, error or
    crashed (its worker process died)."""

    kernel: Kernel
    problem: Problem
    status: str
    reason: str = ""
    record: dict | None = field(default=None, repr=False)
    device: int | None = None

    def to_record(self) -> dict:
        if self.record is not None:
            return self.record
        record = {"kernel": self.kernel.id, "backend": self.kernel.backend,
                  "rung": self.kernel.rung, "parent": self.kernel.parent,
                  "adds": self.kernel.adds, "origin": self.kernel.origin,
                  "precision": self.kernel.precision, "problem": self.problem.to_dict(),
                  "flops": self.problem.flops,
                  "status": self.status, "reason": self.reason}
        if self.device is not None:
            record["device"] = self.device
        return record


def _selected_gpu(backend: str, options: RunOptions) -> bool:
    """Whether a backend that runs on the device the user selects has a GPU selected (whose
    kernels can hang or crash it)."""
    from .backends import get_backend

    if BACKENDS[backend].device != SELECTED:
        return False
    try:
        return get_backend(backend, options).device_type == "GPU"
    except Exception:  # no runtime or no device: its rows are unavailable anyway
        return False


def row_key(kernel_id: str, problem: dict) -> tuple:
    """What identifies a row across runs: the kernel and every field of its problem."""
    return (kernel_id, tuple(sorted(problem.items())))


def sweep(kernels: Iterable[Kernel], problems: Iterable[Problem], *, options: RunOptions,
          on_row: Callable[[Row], None] | None = None, resume: Iterable[dict] = (),
          devices: Sequence[int] | None = None, timeout: float | None = None,
          isolated: Collection[str] = ISOLATED, job: workers.JobFn = workers.measure_job,
          on_start: Callable[[Kernel, Problem], None] | None = None,
          on_plan: Callable[[int], None] | None = None, retry_crashed: bool = False,
          in_process: Collection[str] | None = None, **run_kwargs) -> list[Row]:
    """Run every kernel on every problem and return the rows in ladder order.

    ``run_kwargs`` go to ``mmsuite.measure.run`` (``repeats``, ``warmup``, ...).
    ``resume``: records of an earlier run; a pair measured there (ok, failed or
    invalid, and crashed unless ``retry_crashed``) is taken from it instead of run
    again: a kernel that crashed its worker would crash it again. ``devices``: the GPUs the
    isolated backends' kernels are spread over (default: device 0). ``timeout``:
    seconds per isolated job (default ``workers.default_timeout``). ``job`` is
    the function a job runs (tests plant crashing ones). For a progress display:
    ``on_plan(n)`` is called once with the number of pairs that will run (neither
    unavailable nor resumed), before any starts, and ``on_start(kernel, problem)`` as
    each of them starts.
    """
    kernels, problems = list(kernels), list(problems)
    kept = results.MEASURED + (() if retry_crashed else ("crashed",))
    done = {row_key(r["kernel"], r["problem"]): r for r in resume if r.get("status") in kept}
    in_process = IN_PROCESS if in_process is None else in_process
    slots: list[Row | None] = [None] * (len(kernels) * len(problems))
    lock = threading.Lock()  # rows arrive from several device threads

    def finish(index: int, row: Row) -> None:
        with lock:
            slots[index] = row
            if on_row is not None:
                on_row(row)

    host_jobs: list[workers.Job] = []  # in this process
    host_worker_jobs: list[workers.Job] = []
    selected_gpu_jobs: list[workers.Job] = []
    device_jobs: list[workers.Job] = []
    on_selected_gpu = {b: _selected_gpu(b, options) for b in {k.backend for k in kernels}}
    for p_index, problem in enumerate(problems):
        for k_index, kernel in enumerate(kernels):
            index = p_index * len(kernels) + k_index
            previous = done.get(row_key(kernel.id, problem.to_dict()))
            reason = unavailable_reason(kernel, options)
            if previous is not None:
                finish(index, Row(kernel, problem, previous["status"],
                                  previous.get("reason", ""), previous, previous.get("device")))
            elif reason:
                finish(index, Row(kernel, problem, "unavailable", reason))
            else:
                item = workers.Job(index, kernel.id, problem)
                if kernel.backend in isolated:
                    device_jobs.append(item)
                elif on_selected_gpu[kernel.backend]:
                    selected_gpu_jobs.append(item)
                elif kernel.backend in in_process:
                    host_jobs.append(item)
                else:
                    host_worker_jobs.append(item)

    if on_plan is not None:
        on_plan(len(host_jobs) + len(host_worker_jobs) + len(selected_gpu_jobs)
                + len(device_jobs))

    def started(item: workers.Job, device: int | None = None) -> None:
        if on_start is not None:
            on_start(kernels[item.index % len(kernels)], item.problem)

    def record_result(item: workers.Job, device: int | None, result: workers.Result) -> None:
        status, reason, record = result
        kernel = kernels[item.index % len(kernels)]
        if record is not None and device is not None:
            record["device"] = device
        finish(item.index, Row(kernel, item.problem, status, reason, record, device))

    if host_jobs:
        lane = workers.HostLane()
        try:
            for item in host_jobs:
                started(item)
                result = lane.run(job, item.kernel_id, item.problem, options, run_kwargs)
                record_result(item, None, result)
        finally:
            lane.close()
            workers.clear_cache()
    if host_worker_jobs:
        workers.run_in_host_worker(host_worker_jobs, options, run_kwargs, record_result, job=job,
                                   on_start=started)
    if selected_gpu_jobs:  # one worker, no device binding: the user selected the GPU
        workers.run_on_devices(selected_gpu_jobs, [None], options, run_kwargs, timeout,
                               record_result, job=job, on_start=started)
    if device_jobs:
        workers.run_on_devices(device_jobs, list(devices) if devices else [0], options,
                               run_kwargs, timeout, record_result, job=job, on_start=started)
    return [row for row in slots if row is not None]
