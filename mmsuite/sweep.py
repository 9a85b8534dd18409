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
uses the same one. What a run is asked for is one :class:`RunContext`, built once from
the command line and handed to the sweep, its table and its files.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from . import results, workers
from .backend_table import BACKENDS, SELECTED
from .backends import RunOptions, unavailable_reason
from .catalogue import Kernel
from .measure import DEFAULT_WARMUP, Sampling
from .problem import Problem

ISOLATED = tuple(name for name, backend in BACKENDS.items() if backend.isolated)
# Backends whose host kernels run in this process instead of the host worker: none by
# default; tests that patch functions of this process list theirs here.
IN_PROCESS: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunContext:
    """What one run of the ladder is asked for, built once from the command line and
    handed to what measures it, shows it and saves it.

    ``kernels`` on ``problems``, each kernel with ``options`` (threads, OpenCL device,
    pinned buffers, profile, L2, energy); ``repeats`` fixed samples, else ``sampling``'s
    stopping rule (None: the engine's own), after ``warmup`` launches. ``devices``: the
    GPUs the kernels of an isolated backend spread over (empty: device 0); ``timeout``:
    seconds per GPU job (None: ``workers.default_timeout``); ``retry_crashed``: run again
    the rows of ``resume`` that crashed their worker; ``cluster``: the Dask scheduler that
    runs the jobs (None: this host). ``backends``: the backends named by ``--backend``
    (one that cannot run is a note of its own). The outputs: ``json`` (with its journal),
    ``markdown``, ``plots`` and ``report``, and ``wide`` for the table with every column,
    ``all_rows`` for every table of a large sweep.
    """

    kernels: tuple[Kernel, ...]
    problems: tuple[Problem, ...]
    options: RunOptions = field(default_factory=RunOptions)
    repeats: int | None = None
    sampling: Sampling | None = None
    warmup: int = DEFAULT_WARMUP
    devices: tuple[int, ...] = ()
    timeout: float | None = None
    retry_crashed: bool = False
    cluster: str | None = None
    backends: tuple[str, ...] = ()
    resume: Path | None = None
    json: Path | None = None
    markdown: Path | None = None
    plots: Path | None = None
    report: Path | None = None
    wide: bool = False
    all_rows: bool = False

    def __post_init__(self) -> None:  # any iterable in, tuples kept: the context is frozen
        for name in ("kernels", "problems", "devices", "backends"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def run_kwargs(self) -> dict:
        """What each job hands ``mmsuite.measure.run``."""
        return {"repeats": self.repeats, "sampling": self.sampling, "warmup": self.warmup}


@dataclass(frozen=True)
class SweepHooks:
    """What a sweep tells its caller as it goes (:class:`Ladder` says in which order):
    ``on_row(row)`` as each row is done, ``on_plan(jobs)`` once it knows how many pairs
    run, ``on_start(kernel, problem)`` as each starts."""

    on_row: Callable[[SweepRow], None] | None = None
    on_start: Callable[[Kernel, Problem], None] | None = None
    on_plan: Callable[[int], None] | None = None


#: A sweep that tells its caller nothing as it goes: the default, here and on a cluster.
NO_HOOKS = SweepHooks()


@dataclass(frozen=True)
class Lanes:
    """Where a sweep's jobs run and what they run: the kernels of the ``isolated`` backends
    in one worker process per device, those of ``in_process`` (None: ``IN_PROCESS``) in
    this process, and ``job`` as each job's function (tests plant crashing ones)."""

    isolated: Collection[str] = ISOLATED
    in_process: Collection[str] | None = None
    job: workers.JobFn = workers.measure_job


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

    @classmethod
    def of(cls, context: RunContext, resume: Iterable[dict] = (),
           hooks: SweepHooks = NO_HOOKS) -> Ladder:
        """The ladder of ``context``'s kernels and problems, sparing what ``resume`` holds
        (with ``context.retry_crashed``) and telling ``hooks``."""
        return cls(context.kernels, context.problems, resume=resume,
                   retry_crashed=context.retry_crashed, on_row=hooks.on_row,
                   on_start=hooks.on_start, on_plan=hooks.on_plan)

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


def sweep(context: RunContext, *, resume: Iterable[dict] = (),
          hooks: SweepHooks = NO_HOOKS, lanes: Lanes = Lanes()) -> list[SweepRow]:
    """Run every kernel of ``context`` on every problem and return the rows in ladder order.

    ``resume`` (the records of an earlier run, and ``context.retry_crashed``: what they
    spare) and ``hooks`` are :class:`Ladder`'s, as on a cluster. A pair is unavailable here
    when its kernel cannot run with ``context.options``; ``lanes`` says where each runs.
    """
    options, run_kwargs, timeout = context.options, context.run_kwargs, context.timeout
    ladder = Ladder.of(context, resume, hooks)
    isolated, job = lanes.isolated, lanes.job
    in_process = IN_PROCESS if lanes.in_process is None else lanes.in_process
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
        workers.run_on_devices(device_jobs, list(context.devices) or [0], options,
                               run_kwargs, timeout, record_result, job=job, on_start=started)
    return ladder.rows()
