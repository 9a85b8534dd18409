"""``mmsuite worker ADDRESS``: offer this host's CPU and GPUs to a Dask scheduler.

It starts one Dask worker (under a nanny, which replaces it if it dies) for the
host CPU, with the resource ``HOST=1``, and one per visible GPU, pinned to it with
``CUDA_VISIBLE_DEVICES`` and offering ``GPU=1``; each runs one job at a time. It
stays in the foreground until Ctrl-C or SIGTERM, which stop every worker it started.

A Dask worker's port runs whatever pickled call reaches it, so the workers listen only
on the address through which this host reaches the scheduler (``--listen-address`` or
``--interface`` choose another), never on every interface; Dask's TLS settings, when
set, apply to them and to the scheduler probe alike.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time

from rich.console import Console

from .. import cluster
from .common import UsageError
from .signals import Terminated, raise_terminated

#: How long the scheduler may take to answer before the command gives up.
PROBE_TIMEOUT_S = cluster.CONNECT_TIMEOUT_S
#: How long the workers may take to close when the command is stopped.
STOP_GRACE_S = 10.0
PR_SET_PDEATHSIG = 1  # prctl(2)


def gpu_selection(text: str) -> str | list[int]:
    """An argparse type: ``all``, ``none`` or indices ``0,1`` into this host's visible GPUs."""
    text = text.strip()
    if text in ("all", "none"):
        return text
    try:
        ids = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected 'all', 'none' or indices like 0,1, got {text!r}") from None
    if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise argparse.ArgumentTypeError(f"expected distinct indices >= 0, got {text!r}")
    return ids


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("worker", help="offer this host's CPU and GPUs to a Dask scheduler "
                                      "(for `run --cluster`)")
    p.add_argument("address", metavar="ADDRESS",
                   help="the scheduler: tcp://HOST:PORT, HOST:PORT or a scheduler file")
    p.add_argument("--gpus", type=gpu_selection, default="all", metavar="all|none|0,1,...",
                   help="which visible GPUs get a worker each (default all)")
    p.add_argument("--no-host", action="store_true",
                   help="offer no HOST slot: this host's CPU runs no C, OpenMP or OpenCL job")
    p.add_argument("--name", metavar="PREFIX", default=socket.gethostname(),
                   help="worker names are PREFIX-host and PREFIX-gpuN (default: the hostname)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--listen-address", metavar="PROTOCOL://HOST",
                       help="where the workers listen (default: this host's address toward "
                       "the scheduler, so a scheduler on 127.0.0.1 keeps them local)")
    where.add_argument("--interface", metavar="NAME",
                       help="listen on this network interface's address instead (eth0, ib0)")
    return p


def _security():
    """Dask's security settings (``distributed.comm.tls``, from its config or environment):
    the probe connects as the workers will."""
    from distributed.security import Security

    return Security()


async def _reachable(address: str) -> None:
    from distributed.comm import connect

    comm = await connect(address, timeout=PROBE_TIMEOUT_S,
                         **_security().get_connection_args("worker"))
    await comm.close()


async def _names_taken(address: str) -> dict[str, str]:
    """The names of the workers connected to the scheduler at ``address``, each with its
    address; empty where the scheduler does not say (Dask then refuses a taken name in
    its own words)."""
    from distributed.core import rpc

    try:
        async with rpc(address, connection_args=_security().get_connection_args("worker")) \
                as scheduler:
            known = await asyncio.wait_for(scheduler.identity(), PROBE_TIMEOUT_S)
        return {str(facts.get("name")): str(worker)
                for worker, facts in (known.get("workers") or {}).items()}
    except (OSError, TimeoutError, AttributeError, KeyError, TypeError):
        return {}


def check_names_free(address: str, plans: list[cluster.WorkerPlan]) -> None:
    """Refuse, in one line, worker names the scheduler already has: Dask's own refusal of a
    second worker of one name is a page of tracebacks from each of its processes."""
    taken = asyncio.run(_names_taken(address))
    for plan in plans:
        if plan.name in taken:
            raise UsageError(f"a worker named {plan.name} is already connected to the "
                             f"scheduler at {address} (from {taken[plan.name]}); give this "
                             f"host's workers another --name")


def listen_host(address: str) -> str:
    """This host's address toward the scheduler at ``address`` (the interface a packet to
    it leaves by): the workers listen there and nowhere else."""
    from distributed.comm import get_address_host
    from distributed.utils import get_ip

    host = get_address_host(address)
    try:
        return get_ip(host)
    except OSError as exc:  # no route: the probe reached it, so this is rare
        raise UsageError(f"cannot tell this host's address toward the scheduler {host}: "
                         f"{exc.strerror or exc}; give --listen-address") from None


def _gpus(selection: str | list[int]) -> list[str]:
    if selection == "none":
        return []
    visible = cluster.visible_gpus()
    if isinstance(selection, str):  # "all"
        return visible
    missing = [i for i in selection if i >= len(visible)]
    if missing:
        raise UsageError(f"--gpus: no GPU {missing[0]}; this host sees {len(visible)}")
    return [visible[i] for i in selection]


def _command(address: str, plan: cluster.WorkerPlan, where: list[str]) -> list[str]:
    """The ``dask worker`` command of one plan; ``where`` is its listening options."""
    resources = ",".join(f"{name}={amount}" for name, amount in plan.resources.items())
    return [sys.executable, "-m", "distributed.cli.dask_worker", address,
            "--nthreads", "1", "--resources", resources, "--name", plan.name, *where,
            # The job checks the problem's host memory itself; the nanny must not kill a
            # worker for holding a large problem's inputs.
            "--memory-limit", "0", "--no-dashboard"]


def listen_options(address: str, listen_address: str | None,
                   interface: str | None) -> list[str]:
    """Where the nanny and its worker listen: the user's choice, else the host's address
    toward the scheduler (Dask's default binds the worker to every interface). The
    worker's HTTP server (health and metrics; it opens even with --no-dashboard) goes to
    the same address."""
    from distributed.comm import get_address_host
    from distributed.utils import get_ip_interface

    if listen_address:
        where, host = ["--listen-address", listen_address], get_address_host(listen_address)
    elif interface:
        try:
            where, host = ["--interface", interface], get_ip_interface(interface)
        except (KeyError, ValueError) as exc:  # no such interface, or one without IPv4
            raise UsageError(f"--interface {interface}: {str(exc).strip(chr(34) + chr(39))}") \
                from None
    else:
        host = listen_host(address)
        where = ["--host", host]
    return [*where, "--dashboard-address", f"[{host}]:0" if ":" in host else f"{host}:0"]


#: Dask settings of the workers, as environment variables: non-daemonic worker processes
#: (each job runs in a job process of its own), and the host's own thread settings: a
#: nanny otherwise sets OMP_NUM_THREADS, MKL_NUM_THREADS and OPENBLAS_NUM_THREADS to 1
#: before it starts its worker, and the CPU ladder and OpenBLAS would time one core.
WORKER_CONFIG = {
    "DASK_DISTRIBUTED__WORKER__DAEMON": "False",
    # A whole dict: Dask lower-cases the keys of nested variables, these are upper-case.
    "DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON": repr(
        dict.fromkeys(cluster.THREAD_VARIABLES)),
}


def run(args: argparse.Namespace, console: Console) -> int:
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise UsageError("mmsuite worker needs Dask distributed: "
                         "pip install 'mmsuite[cluster]'") from None
    try:
        address = cluster.scheduler_address(args.address, role="worker")
    except cluster.ClusterError as exc:
        raise UsageError(str(exc)) from None
    try:
        asyncio.run(_reachable(address))
    except (OSError, TimeoutError) as exc:
        raise UsageError(f"cannot reach the Dask scheduler at {address}: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") \
            from None
    plans = cluster.worker_plans(_gpus(args.gpus), not args.no_host, args.name)
    if not plans:
        raise UsageError("nothing to offer: --no-host and no GPU")
    check_names_free(address, plans)
    where = listen_options(address, args.listen_address, args.interface)
    base = {**os.environ, **WORKER_CONFIG}
    children: list[tuple[cluster.WorkerPlan, subprocess.Popen]] = []
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        for plan in plans:
            # A session of its own: stopping a worker reaches its nanny, the worker and
            # the worker's job processes, whatever state each is in.
            children.append((plan, subprocess.Popen(_command(address, plan, where),
                                                    env={**base, **plan.environ},
                                                    start_new_session=True,
                                                    preexec_fn=_die_with_parent)))
            pinned = plan.environ.get("CUDA_VISIBLE_DEVICES")
            console.print(f"worker {plan.name}: "
                          + ", ".join(f"{k}={v}" for k, v in plan.resources.items())
                          + (f", CUDA_VISIBLE_DEVICES={pinned}" if pinned else "")
                          + f" -> {address}, listening on {where[1]}")
        while True:
            for plan, child in children:
                code = child.poll()
                if code is not None:
                    print(f"mmsuite: worker {plan.name} exited with status {code}; stopping "
                          "the others", file=sys.stderr)
                    return 1
            time.sleep(0.5)
    except (KeyboardInterrupt, Terminated):  # SIGTERM stops the workers like Ctrl-C
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        _stop([child for _, child in children])


def _die_with_parent() -> None:
    """In a worker's nanny, before it starts: SIGTERM when this command dies, even by
    SIGKILL, so that no worker outlives the command that started it (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the command's own stop still applies
        pass


def _signal_group(child: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(child.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(children: list[subprocess.Popen]) -> None:
    """SIGTERM to each worker's process group (the nanny closes its worker), then SIGKILL
    to what is left after STOP_GRACE_S."""
    for child in children:
        _signal_group(child, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for child in children:
        _signal_group(child, signal.SIGKILL)  # also the job processes of a closed worker
        child.wait()
