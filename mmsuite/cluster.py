"""Sweeps on a Dask cluster: every kernel x problem one task, run on the device it times.

Workers advertise two resources (``mmsuite worker`` sets them; a plain ``dask
worker --resources`` with these names works too):

- ``GPU``: one slot per worker process, each process pinned to one GPU with
  ``CUDA_VISIBLE_DEVICES``. A CUDA job takes the slot, so no two timings share a GPU.
- ``HOST``: one slot for the machine's CPU. C, OpenMP and OpenCL jobs take it
  whole, so no two of them share a CPU.

What crosses the network is a job description (:class:`JobSpec`: a kernel id, the
problem, the options, the sampling rule) and what comes back is a result record
(:class:`JobOutcome`). The function a task runs is named, not sent: a worker imports
it from its own mmsuite install. On the worker each job runs in a job process of its
own (``mmsuite.workers.Worker``), so a kernel that crashes or hangs costs one row,
as in a local sweep.

No task is retried. A worker that dies while it runs a job leaves that job
claimed (a Dask ``Variable`` holding the worker's name and host): when the
scheduler hands the task to another worker, the task finds the claim and reports
the row as failed, "worker lost", instead of measuring again. The rest of the
sweep goes on; ``--resume`` reruns only the rows that are missing or errored, by the
rule a sweep on one host follows (``mmsuite.sweep.Ladder``).

Workers are matched by the code they run, not by a version number, which stays the same
across commits: a worker whose measuring modules differ from the client's is refused
when the sweep starts, and one whose code for a job (those modules and the kernel's
source) differs is refused for that job; both name the two sides' code and commits.
Each row carries the commit of the worker that measured it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__, identity, workers
from .backend_table import GPU_BACKENDS
from .backends import RunOptions
from .catalogue import Kernel
from .problem import Problem
from .sweep import NO_HOOKS, Ladder, RunContext, SweepHooks, SweepRow

GPU = "GPU"
HOST = "HOST"
# Jobs of the table's GPU_BACKENDS take a GPU slot; every other backend's take the HOST
# slot (OpenCL included: a HOST worker sees the host's CPU devices).
#: How long connecting to the scheduler may take (Dask retries a refused connection).
CONNECT_TIMEOUT_S = 10.0
#: How long ``connect`` waits for a first worker to join the scheduler.
WORKER_WAIT_S = 10.0
#: How long a resource may be missing from the cluster mid-sweep (a worker being
#: restarted by its nanny) before the jobs that need it are given up.
RESOURCE_GRACE_S = 30.0
#: How often the client looks at which resources the cluster still offers.
RESOURCE_POLL_S = 2.0
CLAIM_PREFIX = "mmsuite-claim"
CLAIM_LOOKUP = "1ms"
START_PREFIX = "mmsuite-start"


class ClusterError(Exception):
    """The cluster cannot take the sweep: one line for the user (exit 2)."""


class SchedulerLost(ClusterError):
    """The connection to the scheduler was lost mid-sweep; ``rows`` are those finished."""

    def __init__(self, message: str, rows: list[SweepRow]) -> None:
        super().__init__(message)
        self.rows = rows


def resource_for(kernel: Kernel) -> str:
    """The slot a kernel's job takes: a GPU for CUDA, the whole host CPU for the rest."""
    return GPU if kernel.backend in GPU_BACKENDS else HOST


NO_WORKER = {
    GPU: "no worker of the cluster offers a GPU (start `mmsuite worker` on a GPU host)",
    HOST: "no worker of the cluster offers its host CPU (start `mmsuite worker` without "
          "--no-host)",
}


# ------------------------------------------------------------ what goes over the wire
@dataclass(frozen=True)
class JobSpec:
    """One kernel on one problem: all a worker is told."""

    index: int
    kernel_id: str
    problem: Problem
    options: RunOptions
    run_kwargs: dict
    timeout: float | None
    claim: str
    start_topic: str  # the event a worker logs as it starts the job (for progress)
    job: workers.JobFn | None = None  # a function the worker's install holds; None: measure
    code: str = ""  # job_code of the client, which the worker's own must equal
    client_commit: str | None = None


@dataclass(frozen=True)
class WorkerFacts:
    """Where a row ran: the host, the Dask worker, and the device it timed."""

    host: str
    worker: str
    address: str
    device_model: str = ""
    device_uuid: str = ""
    commit: str | None = None  # of the worker's own mmsuite (environment.git_commit)

    def stamp(self, record: dict) -> dict:
        """``record`` with the fields that name where it ran, and what it ran."""
        record.update(host=self.host, worker=self.worker, device_model=self.device_model,
                      git_commit=self.commit)
        if self.device_uuid:
            record["device_uuid"] = self.device_uuid
        return record


@dataclass
class JobOutcome:
    """What a worker sends back for one job."""

    status: str
    reason: str
    record: dict | None
    facts: WorkerFacts
    environment: dict | None = None


# ---------------------------------------------------------------- on the worker
# One job process per resource in each Dask worker, with the job function it runs.
_LANES: dict[str, tuple[workers.Worker, workers.JobFn]] = {}
_DEVICES: dict[str, tuple[str, str]] = {}  # resource -> (model, uuid) last read


def _dask_worker() -> Any:
    from distributed import get_worker

    return get_worker()


def _worker_resource() -> str:
    resources = getattr(_dask_worker().state, "total_resources", {}) or {}
    return GPU if resources.get(GPU) else HOST


def gpu_uuid(raw: Any) -> str:
    """The ``GPU-xxxxxxxx-...`` form of a CUDA device UUID (16 bytes from CUDA)."""
    if isinstance(raw, str):
        return raw
    data = bytes(raw)
    if len(data) != 16:
        return data.hex()
    h = data.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _device_facts(backend: str) -> tuple[str, str]:
    """(model, UUID) of the device a job of ``backend`` ran on, read in the job process."""
    from .host import cpu_model

    if backend not in GPU_BACKENDS:
        return cpu_model(), ""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)  # the worker's one visible GPU
    name = props.get("name", b"GPU")
    return (name.decode() if isinstance(name, bytes) else str(name),
            gpu_uuid(props["uuid"]) if props.get("uuid") is not None else "")


_ENVIRONMENT: dict = {}  # this job process's environment, one probe per backend
_WATCHING: list[bool] = []  # whether this job process watches its parent
PARENT_POLL_S = 1.0


def _exit_with_parent() -> None:
    """End this job process when the Dask worker that started it is gone (killed, not
    closed), instead of keeping its slot's CPU or GPU busy for nobody; once per process."""
    if _WATCHING:
        return
    _WATCHING.append(True)
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="mmsuite-parent-watch", daemon=True).start()


def measure_here(kernel_id: str, problem: Problem, options: RunOptions,
                 run_kwargs: dict) -> workers.Result:
    """The job a worker runs by default: ``workers.measure_job``, plus the device it ran on
    and this host's environment (for the row's FP32 peak and the report)."""
    from . import environment

    _exit_with_parent()
    status, reason, record = workers.measure_job(kernel_id, problem, options, run_kwargs)
    if record is not None:
        backend = str(record.get("backend"))
        model, device_uuid = _device_facts(backend)
        record["device_model"] = model
        if device_uuid:
            record["device_uuid"] = device_uuid
        if not _ENVIRONMENT:
            _ENVIRONMENT.update(environment.host_environment(), backends={})
        if backend not in _ENVIRONMENT["backends"]:
            _ENVIRONMENT["backends"].update(
                environment.collect([backend], options).get("backends", {}))
        record["worker_environment"] = _ENVIRONMENT
    return status, reason, record


def job_code(kernel_id: str) -> str:
    """What a job runs, as written: the measuring modules of this install and the kernel's
    source (none for a reference library). The host's compilers and libraries are left
    out: they are the row's environment, and hosts may differ in them."""
    from . import catalogue
    from .sources import read_source

    try:
        kernel = catalogue.get(kernel_id)
    except KeyError:  # not in this install's catalogue (a plugin not loaded here)
        return identity.engine_hash() + "-absent"
    source = ""
    if kernel.source and not kernel.reference:
        try:
            source = read_source(kernel.source)
        except (OSError, ValueError):  # outside the package's folders: its path stands for it
            source = kernel.source
    return identity.engine_hash() + "-" + hashlib.sha256(source.encode()).hexdigest()[:16]


def worker_commit() -> str | None:
    """The commit of this process's mmsuite, read once."""
    if not _COMMIT:
        from .environment import git_commit

        _COMMIT.append(git_commit())
    return _COMMIT[0]


_COMMIT: list[str | None] = []


def _facts(resource: str) -> WorkerFacts:
    worker = _dask_worker()
    model, device_uuid = _DEVICES.get(resource, ("", ""))
    if not model and resource == HOST:
        from .host import cpu_model

        model = cpu_model()
    return WorkerFacts(socket.gethostname(), str(worker.name), str(worker.address), model,
                       device_uuid, worker_commit())


def other_code(who: str, theirs: str, their_commit: str | None, ours: str,
               our_commit: str | None, what: str = "") -> str:
    """Why a worker is refused: the two sides' code (and commits), named."""
    return (f"{who} runs other code{what} ({theirs} at commit {their_commit or 'unknown'}); "
            f"this client runs {ours} at commit {our_commit or 'unknown'}: install the "
            "same commit on every host")


def lost_reason(facts: dict) -> str:
    return (f"worker lost: worker {facts.get('worker')} on host {facts.get('host')} "
            f"({facts.get('address')}) died while running it")


def _claim(name: str, facts: WorkerFacts) -> dict | None:
    """Claim the job for this worker; the earlier claim when one exists (a replay)."""
    from distributed import Variable

    variable = Variable(name)
    try:  # a set variable is returned at once, whatever the timeout
        return variable.get(timeout=CLAIM_LOOKUP)
    except (TimeoutError, asyncio.TimeoutError):
        variable.set({"host": facts.host, "worker": facts.worker, "address": facts.address})
        return None


def run_job(spec: JobSpec) -> JobOutcome:
    """A task: run one job in this worker's job process; never measures a job twice."""
    resource = _worker_resource()
    facts = _facts(resource)
    code = job_code(spec.kernel_id) if spec.code else ""
    if code != spec.code:
        return JobOutcome("error", other_code(f"worker {facts.worker} on host {facts.host}",
                                              code, facts.commit, spec.code, spec.client_commit,
                                              f" for {spec.kernel_id}"), None, facts)
    earlier = _claim(spec.claim, facts)
    if earlier is not None:
        return JobOutcome("error", lost_reason(earlier), None, facts)
    _dask_worker().log_event(spec.start_topic, {"index": spec.index})
    job = spec.job or measure_here
    lane, lane_job = _LANES.get(resource, (None, None))
    if lane is None or repr(lane_job) != repr(job):  # a job process runs one job function
        if lane is not None:
            lane.close()
        # A GPU worker sees its one GPU as device 0 (CUDA_VISIBLE_DEVICES pins it).
        lane = workers.Worker(0 if resource == GPU else None, job)
        _LANES[resource] = (lane, job)
    limit = spec.timeout if spec.timeout is not None else threading.TIMEOUT_MAX
    status, reason, record = lane.run(spec.kernel_id, spec.problem, spec.options,
                                      spec.run_kwargs, limit)
    environment = None
    if record is not None:
        environment = record.pop("worker_environment", None)
        if record.get("device_model"):
            _DEVICES[resource] = (record["device_model"], record.get("device_uuid") or "")
            facts = _facts(resource)
    return JobOutcome(status, reason, record, facts, environment)


#: Thread settings that a Dask nanny sets to 1 in its worker unless told otherwise.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def worker_check() -> dict:
    """What the client checks of each worker before a sweep (run through ``Client.run``)."""
    import multiprocessing

    return {"mmsuite": __version__, "engine": identity.engine_hash(),
            "commit": worker_commit(), "host": socket.gethostname(),
            "daemon": bool(multiprocessing.current_process().daemon),
            "cores": os.cpu_count() or 1,
            "threads": {name: os.environ[name] for name in THREAD_VARIABLES
                        if name in os.environ}}


def thread_warning(name: str, answer: dict, resources: dict) -> str:
    """Why a HOST worker's CPU rows would time fewer cores than its host has; empty if not."""
    if not resources.get(HOST):
        return ""
    limited = {k: v for k, v in answer.get("threads", {}).items()
               if v.isdigit() and int(v) < answer.get("cores", 1)}
    if not limited:
        return ""
    return (f"worker {name} on host {answer['host']} has "
            + ", ".join(f"{k}={v}" for k, v in sorted(limited.items()))
            + f" on {answer['cores']} cores: its CPU rows time that many threads (a Dask "
              "nanny sets them to 1; `mmsuite worker` does not)")


# ---------------------------------------------------------------- on the client
def parse_target(text: str) -> tuple[str | None, Path | None]:
    """(scheduler address, scheduler file): ``tcp://host:port`` or ``host:port``, else a file."""
    text = text.strip()
    if "://" in text:
        return text, None
    host, _, port = text.rpartition(":")
    if host and port.isdigit() and "/" not in text:
        return f"tcp://{text}", None
    path = Path(text)
    if path.is_file():
        return None, path
    raise ClusterError(f"--cluster {text}: not a scheduler address (tcp://HOST:PORT) nor an "
                       "existing scheduler file")


def scheduler_address(target: str, role: str = "client") -> str:
    """The scheduler's address from ``--cluster``/``mmsuite worker``'s ``target`` (an address
    or a scheduler file), checked, with the TLS settings a ``tls://`` address needs for
    ``role`` ("client" or "worker"); ClusterError, in one line, for anything else."""
    address, scheduler_file = parse_target(target)
    where = target
    if scheduler_file is not None:
        address, where = _address_in_file(scheduler_file), f"{scheduler_file}'s address"
    assert address is not None  # parse_target gives an address or a file
    from distributed.comm import parse_address, parse_host_port
    from distributed.comm.registry import backends

    try:
        scheme, location = parse_address(address)
        if scheme not in backends:
            raise ValueError(f"unknown protocol {scheme}:// (Dask knows "
                             f"{', '.join(sorted(backends))})")
        if scheme in ("tcp", "tls"):
            parse_host_port(location, 8786)
    except (ValueError, TypeError) as exc:
        raise ClusterError(f"{where} {address!r} is not a scheduler address: {exc}") from None
    _check_tls(address, role)
    return address


def _address_in_file(path: Path) -> str:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # unreadable, not UTF-8, not JSON, empty
        raise ClusterError(f"{path} is not a Dask scheduler file: "
                           f"{getattr(exc, 'strerror', None) or exc or 'empty'}") from None
    address = document.get("address") if isinstance(document, dict) else None
    if not isinstance(address, str) or not address:
        raise ClusterError(f"{path} is not a Dask scheduler file: no \"address\" text in it")
    return address


def _check_tls(address: str, role: str) -> None:
    """A ``tls://`` address needs Dask's TLS settings for ``role``; without them Dask
    fails deep inside its connection code."""
    if not address.startswith("tls://"):
        return
    from distributed.security import Security

    try:
        context = Security().get_connection_args(role).get("ssl_context")
    except (OSError, ValueError) as exc:  # a certificate or key missing or unreadable
        raise ClusterError(f"Dask's TLS settings cannot be used: {exc}") from None
    if context is None:
        raise ClusterError(f"{address} takes TLS: set Dask's distributed.comm.tls settings "
                           f"(the CA file, and the {role}'s certificate and key; see "
                           "docs/cluster-security.md)")


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise ClusterError("--cluster needs Dask distributed: pip install 'mmsuite[cluster]'") \
            from None
    return distributed


class Cluster:
    """A connection to a Dask scheduler whose workers run mmsuite jobs."""

    def __init__(self, target: str, worker_wait: float = WORKER_WAIT_S) -> None:
        distributed = _import_distributed()
        where = address = scheduler_address(target)
        try:
            self.client = distributed.Client(address, timeout=CONNECT_TIMEOUT_S,
                                             set_as_default=True)
        except (OSError, TimeoutError, ValueError) as exc:
            raise ClusterError(f"cannot reach the Dask scheduler at {where}: "
                               f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                               " (is `dask scheduler` running there?)") from None
        self.target = target
        self.environments: dict[str, dict] = {}  # worker name -> its host's environment
        try:
            self._check_workers(worker_wait)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def worker_info(self) -> dict[str, dict]:
        """What the scheduler knows of each worker, by address."""
        return dict(self.client.scheduler_info(n_workers=-1).get("workers", {}))

    def resources(self) -> set[str]:
        """The resources some worker offers now."""
        return {name for info in self.worker_info().values()
                for name, amount in (info.get("resources") or {}).items() if amount}

    def _check_workers(self, worker_wait: float) -> None:
        """Refuse workers that would fail every job: other measuring code than this
        client's, none at all, or a daemonic process (which cannot start a job process)."""
        try:
            self.client.wait_for_workers(1, timeout=worker_wait)
        except TimeoutError:
            raise ClusterError(f"the scheduler at {self.target} has no workers after "
                               f"{worker_wait:.0f} s: start `mmsuite worker "
                               f"{self.client.scheduler.address}` on each host") from None
        answers = self.client.run(worker_check, on_error="return")
        infos = self.worker_info()
        names = {address: info.get("name", address) for address, info in infos.items()}
        for address, answer in sorted(answers.items()):
            name = names.get(address, address)
            if isinstance(answer, BaseException):
                raise ClusterError(f"worker {name} ({address}) cannot run mmsuite jobs: "
                                   f"{type(answer).__name__}: {answer}")
            if answer.get("engine") != identity.engine_hash():
                raise ClusterError(other_code(
                    f"worker {name} on host {answer['host']}",
                    f"mmsuite {answer['mmsuite']}, engine {answer.get('engine', 'unknown')}",
                    answer.get("commit"), f"mmsuite {__version__}, engine "
                    f"{identity.engine_hash()}", worker_commit()))
            if answer["daemon"]:
                raise ClusterError(f"worker {name} on host {answer['host']} is a daemonic "
                                   "process and cannot start job processes: start it with "
                                   "`mmsuite worker`, or `dask worker --no-nanny`")
            warning = thread_warning(name, answer, infos.get(address, {}).get("resources", {}))
            if warning:
                print(f"mmsuite: warning: {warning}", file=sys.stderr)

    def sweep(self, context: RunContext, *, resume: Iterable[dict] = (),
              hooks: SweepHooks = NO_HOOKS,
              job: workers.JobFn | None = None) -> list[SweepRow]:
        """``mmsuite.sweep.sweep`` of ``context`` on the cluster: the same rows, in ladder
        order.

        ``resume`` (with ``context.retry_crashed``) and ``hooks`` are
        ``mmsuite.sweep.Ladder``'s, as on one host (``on_start`` is called from the client's
        event thread as a worker starts a job). A pair is unavailable when no worker offers
        its resource. ``context.timeout``: seconds per GPU job (default
        ``workers.default_timeout``), as on one host; host jobs have none. ``job``: a
        function of the workers' install to run instead of measuring (tests plant crashing
        or slow ones).
        """
        from distributed import wait

        options, run_kwargs, timeout = context.options, context.run_kwargs, context.timeout
        ladder = Ladder.of(context, resume, hooks)
        sweep_id = uuid.uuid4().hex
        offered = self.resources()
        pending: dict[Any, tuple[JobSpec, Kernel]] = {}
        claims: list[str] = []
        start_topic = f"{START_PREFIX}-{sweep_id}"

        def unavailable(kernel: Kernel) -> str:
            resource = resource_for(kernel)
            return "" if resource in offered else NO_WORKER[resource]

        specs: list[tuple[JobSpec, Kernel, str]] = []
        for pair in ladder.plan(unavailable):
            resource = resource_for(pair.kernel)
            limit = timeout if timeout is not None else (
                workers.default_timeout(pair.problem) if resource == GPU else None)
            specs.append((JobSpec(pair.index, pair.kernel.id, pair.problem, options, run_kwargs,
                                  limit, f"{CLAIM_PREFIX}-{sweep_id}-{pair.index}",
                                  start_topic, job, code=job_code(pair.kernel.id),
                                  client_commit=worker_commit()), pair.kernel, resource))
        if hooks.on_start is not None:
            self.client.subscribe_topic(start_topic,
                                        lambda event: ladder.start(event[1]["index"]))
        for spec, kernel, resource in specs:
            future = self.client.submit(run_job, spec, resources={resource: 1},
                                        key=f"mmsuite-{sweep_id}-{spec.index}", pure=False,
                                        priority=-spec.index, retries=0)
            pending[future] = (spec, kernel)
            claims.append(spec.claim)

        missing_since: dict[str, float] = {}
        last_poll = time.monotonic()
        try:
            while pending:
                try:
                    finished = wait(list(pending), timeout=1.0,
                                    return_when="FIRST_COMPLETED").done
                except TimeoutError:
                    finished = set()
                for future in finished:
                    spec, kernel = pending.pop(future)
                    ladder.finish(spec.index, self._row(future, spec, kernel))
                if time.monotonic() - last_poll >= RESOURCE_POLL_S:
                    last_poll = time.monotonic()
                    self._give_up_without(pending, missing_since, ladder.finish)
        except (CancelledError, OSError) as exc:
            if self.client.status == "running":
                raise  # the scheduler is there: a bug, with its traceback
            # The scheduler is gone (Dask cancels every future, or a call finds the
            # connection closed): the finished rows are kept, the rest is for --resume.
            what = "the connection closed" if isinstance(exc, CancelledError) else \
                (str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            raise SchedulerLost(f"lost the Dask scheduler at {self.target} after "
                                f"{len(specs) - len(pending)} of {len(specs)} jobs: {what}",
                                ladder.rows()) from None
        finally:
            if pending and self.client.status == "running":
                # interrupted: jobs not started are dropped; running ones finish there
                self.client.cancel(list(pending))
            self._forget_claims(claims)
            if hooks.on_start is not None and self.client.status == "running":
                self.client.unsubscribe_topic(start_topic)
        return ladder.rows()

    def _forget_claims(self, names: list[str]) -> None:
        """Drop this sweep's claims from the scheduler (one message each, not awaited)."""
        from distributed import Variable

        if self.client.status == "running":
            for name in names:
                Variable(name, client=self.client).delete()

    def _give_up_without(self, pending: dict, missing_since: dict[str, float],
                         finish: Callable[[int, SweepRow], None]) -> None:
        """Jobs whose resource has been gone from the cluster for RESOURCE_GRACE_S become
        error rows, so that a sweep never waits for a worker that is not coming."""
        offered, now = self.resources(), time.monotonic()
        for resource in (GPU, HOST):
            if resource in offered:
                missing_since.pop(resource, None)
                continue
            since = missing_since.setdefault(resource, now)
            if now - since < RESOURCE_GRACE_S:
                continue
            lost = [f for f, (spec, kernel) in pending.items()
                    if resource_for(kernel) == resource]
            if lost:
                self.client.cancel(lost)
            for future in lost:
                spec, kernel = pending.pop(future)
                # An error, not "unavailable": the fleet had the resource and lost it, and
                # a run whose rows were never measured must not pass (--resume reruns them).
                finish(spec.index, SweepRow(kernel, spec.problem, "error",
                                            f"worker lost: {NO_WORKER[resource]}: the last one "
                                            "left mid-sweep"))

    def _row(self, future: Any, spec: JobSpec, kernel: Kernel) -> SweepRow:
        """The row of a finished task. A bug on the worker raises here, with its traceback."""
        from distributed import KilledWorker

        if future.status == "finished":
            outcome: JobOutcome = future.result()
            if outcome.environment is not None:
                self.environments[outcome.facts.worker] = outcome.environment
            record = outcome.record or SweepRow(kernel, spec.problem, outcome.status,
                                                outcome.reason).to_record()
            return SweepRow(kernel, spec.problem, outcome.status, outcome.reason,
                            outcome.facts.stamp(record))
        exception = future.exception() if future.status == "error" else None
        if future.status == "error" and not isinstance(exception, KilledWorker):
            future.result()  # a bug in mmsuite on the worker: raise it here
        # The scheduler gave up on the task (its workers kept dying) or dropped it.
        earlier = self._claimed(spec.claim)
        reason = lost_reason(earlier) if earlier else (
            f"worker lost before the job started: {exception}" if exception
            else f"the scheduler dropped the job ({future.status})")
        record = SweepRow(kernel, spec.problem, "error", reason).to_record()
        if earlier:
            record.update(host=earlier.get("host"), worker=earlier.get("worker"))
        return SweepRow(kernel, spec.problem, "error", reason, record)

    def _claimed(self, name: str) -> dict | None:
        from distributed import Variable

        try:
            return Variable(name, client=self.client).get(timeout=CLAIM_LOOKUP)
        except (TimeoutError, asyncio.TimeoutError):
            return None


@dataclass
class WorkerPlan:
    """The Dask worker processes ``mmsuite worker`` starts on this host."""

    name: str
    resources: dict[str, int]
    environ: dict[str, str] = field(default_factory=dict)


def visible_gpus() -> list[str]:
    """This host's visible GPUs, as the IDs to pin each worker with (UUIDs where CUDA gives
    them, else indices); empty without CuPy or a GPU."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no CuPy, no driver, no GPU: a host without GPUs
        return []
    ids = []
    for index in range(count):
        props = cupy.cuda.runtime.getDeviceProperties(index)
        raw = props.get("uuid")
        ids.append(gpu_uuid(raw) if raw is not None else
                   workers.visible_device(index, os.environ.get("CUDA_VISIBLE_DEVICES")))
    return ids


def worker_plans(gpus: list[str], host_slot: bool, prefix: str) -> list[WorkerPlan]:
    """One worker for the host CPU (the HOST slot) and one per GPU, pinned to it."""
    plans = [WorkerPlan(f"{prefix}-host", {HOST: 1}, {"CUDA_VISIBLE_DEVICES": ""})] \
        if host_slot else []
    plans += [WorkerPlan(f"{prefix}-gpu{i}", {GPU: 1}, {"CUDA_VISIBLE_DEVICES": gpu})
              for i, gpu in enumerate(gpus)]
    return plans
