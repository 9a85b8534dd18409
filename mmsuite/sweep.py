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

What a resumed sweep still runs, and the order in which its rows and progress are
reported, is :class:`Ladder`'s to decide; a sweep on a cluster (``mmsuite.cluster``)
uses the same one.
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
class SweepRow:
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


@dataclass(frozen=True)
class PendingRow:
    """A kernel on a problem that a sweep still has to run, at ``index`` in ladder order."""

    index: int
    kernel: Kernel
    problem: Problem


class Ladder:
    """The rows of one sweep, on this host or on a cluster, and the one rule for what it
    still has to run.

    A pair that an earlier run measured (a record of ``resume`` that is ok, failed or
    invalid, or crashed unless ``retry_crashed``: a kernel that crashed its worker would
    crash it again) keeps that record; one for which ``plan``'s ``unavailable`` gives a
    reason is an unavailable row; every other pair is left to run (an error, a lost worker,
    an unavailable row of the earlier run, a missing row). The progress hooks see the same
    sequence on both paths: ``on_row`` each kept and unavailable row, in ladder order, then
    ``on_plan(n)`` with the number of pairs that run, then ``on_start(kernel, problem)`` as
    each starts and ``on_row`` as it finishes.
    """

    def __init__(self, kernels: Iterable[Kernel], problems: Iterable[Problem], *,
                 resume: Iterable[dict] = (), retry_crashed: bool = False,
                 on_row: Callable[[SweepRow], None] | None = None,
                 on_start: Callable[[Kernel, Problem], None] | None = None,
                 on_plan: Callable[[int], None] | None = None) -> None:
        self.kernels, self.problems = list(kernels), list(problems)
        kept = results.MEASURED + (() if retry_crashed else ("crashed",))
        self._earlier = {row_key(r["kernel"], r["problem"]): r for r in resume
                         if r.get("status") in kept}
        self._slots: list[SweepRow | None] = [None] * (len(self.kernels) * len(self.problems))
        self._on_row, self._on_start, self._on_plan = on_row, on_start, on_plan
        self._lock = threading.Lock()  # rows arrive from several device threads

    def plan(self, unavailable: Callable[[Kernel], str]) -> list[PendingRow]:
        """Finish the kept and unavailable rows; the pairs left to run, in ladder order.
        ``unavailable(kernel)``: why its pairs cannot run here, or an empty string."""
        to_run = []
        for p_index, problem in enumerate(self.problems):
            for k_index, kernel in enumerate(self.kernels):
                index = p_index * len(self.kernels) + k_index
                earlier = self._earlier.get(row_key(kernel.id, problem.to_dict()))
                if earlier is not None:
                    self.finish(index, SweepRow(kernel, problem, earlier["status"],
                                                earlier.get("reason", ""), earlier,
                                                earlier.get("device")))
                    continue
                reason = unavailable(kernel)
                if reason:
                    self.finish(index, SweepRow(kernel, problem, "unavailable", reason))
                else:
                    to_run.append(PendingRow(index, kernel, problem))
        if self._on_plan is not None:
            self._on_plan(len(to_run))
        return to_run

    def kernel(self, index: int) -> Kernel:
        """The kernel of the pair at ``index``."""
        return self.kernels[index % len(self.kernels)]

    def start(self, index: int) -> None:
        """The pair at ``index`` starts now."""
        if self._on_start is not None:
            self._on_start(self.kernel(index), self.problems[index // len(self.kernels)])

    def finish(self, index: int, row: SweepRow) -> None:
        """The row of the pair at ``index`` is done."""
        with self._lock:
            self._slots[index] = row
            if self._on_row is not None:
                self._on_row(row)

    def rows(self) -> list[SweepRow]:
        """The finished rows, in ladder order (all of them once the sweep is done)."""
        return [row for row in self._slots if row is not None]


def sweep(kernels: Iterable[Kernel], problems: Iterable[Problem], *, options: RunOptions,
          on_row: Callable[[SweepRow], None] | None = None, resume: Iterable[dict] = (),
          devices: Sequence[int] | None = None, timeout: float | None = None,
          isolated: Collection[str] = ISOLATED, job: workers.JobFn = workers.measure_job,
          on_start: Callable[[Kernel, Problem], None] | None = None,
          on_plan: Callable[[int], None] | None = None, retry_crashed: bool = False,
          in_process: Collection[str] | None = None, **run_kwargs) -> list[SweepRow]:
    """Run every kernel on every problem and return the rows in ladder order.

    ``run_kwargs`` go to ``mmsuite.measure.run`` (``repeats``, ``warmup``, ...).
    ``resume`` and ``retry_crashed`` (what an earlier run's records spare) and the progress
    hooks ``on_row``, ``on_plan`` and ``on_start`` are :class:`Ladder`'s, as on a cluster.
    A pair is unavailable here when its kernel cannot run with ``options``.
    ``devices``: the GPUs the isolated backends' kernels are spread over (default:
    device 0). ``timeout``: seconds per isolated job (default ``workers.default_timeout``).
    ``job`` is the function a job runs (tests plant crashing ones).
    """
    ladder = Ladder(kernels, problems, resume=resume, retry_crashed=retry_crashed,
                    on_row=on_row, on_start=on_start, on_plan=on_plan)
    in_process = IN_PROCESS if in_process is None else in_process
    host_jobs: list[workers.Job] = []  # in this process
    host_worker_jobs: list[workers.Job] = []
    selected_gpu_jobs: list[workers.Job] = []
    device_jobs: list[workers.Job] = []
    on_selected_gpu = {b: _selected_gpu(b, options) for b in {k.backend for k in ladder.kernels}}
    for pair in ladder.plan(lambda kernel: unavailable_reason(kernel, options)):
        item = workers.Job(pair.index, pair.kernel.id, pair.problem)
        if pair.kernel.backend in isolated:
            device_jobs.append(item)
        elif on_selected_gpu[pair.kernel.backend]:
            selected_gpu_jobs.append(item)
        elif pair.kernel.backend in in_process:
            host_jobs.append(item)
        else:
            host_worker_jobs.append(item)

    def started(item: workers.Job, device: int | None = None) -> None:
        ladder.start(item.index)

    def record_result(item: workers.Job, device: int | None, result: workers.Result) -> None:
        status, reason, record = result
        if record is not None and device is not None:
            record["device"] = device
        ladder.finish(item.index, SweepRow(ladder.kernel(item.index), item.problem, status, reason,
                                           record, device))

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
    return ladder.rows()
