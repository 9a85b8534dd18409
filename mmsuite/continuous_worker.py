"""The worker of one side of ``mmsuite continuous``, run in that revision's build.

The driver starts it as ``python -c BOOT SITE THIS_FILE IDENTITY LOAD``: SITE (the
revision's install) goes first on the import path, so ``mmsuite`` below is that
revision's, while this file and the two helpers given by path are the driver's, so
that an older revision can be measured the same way. The worker speaks JSON lines:

    {"op": "open", "kernel": ID, "problem": {...}, "options": {...}, "code": {...}}
        -> {"status": "ok", "code": {...}, "max_rel_err": ..., "info": {...},
            "launch_s": seconds of the checked launch, or null}
           or {"status": "missing" | "unavailable" | "failed" | "error", "reason": ...}
           or {"status": "damaged", "reason": ...}: the mmsuite imported is not the
              build's (its ``site`` is damaged); the driver stops, naming it
    {"op": "turn", "seconds": S}
        -> {"samples": [ms, ...], "on_cpu": [share, ...], "host_load": {...}}: samples
           for at least S seconds; with each, the CPU time this process took during it
           over its wall time (1.0 for one thread that was never preempted); and for a
           GPU row {"gpu": {"before": ..., "after": ...}}: NVML's state at both ends of
           the turn
    {"op": "turn", "seconds": S, "window": [FROM, UNTIL]}: both sides at once, in a
           window of ``time.monotonic()`` (one clock for every process on Linux): from
           FROM, the samples that end by UNTIL (at least one), so that every sample kept
           ran while the other side was sampling too
    {"op": "close"} -> {"status": "closed"}

An open's ``code`` is the driver's readers of a code identity for the kernel's backend
(``identity.CodeReaders``), so that both sides hash their code alike. Its stdout carries
the protocol only: whatever kernels or drivers print goes to stderr.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import runpy
import sys
import time
import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the revision's own mmsuite is imported at run time, inside the worker
    from mmsuite.measure import KernelSampler

BOOT = ("import runpy, sys; sys.path.insert(0, sys.argv[1]); "
        "runpy.run_path(sys.argv[2], run_name='__main__')")


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, default=str))


def foreign_import(site: str) -> str:
    """Why the ``mmsuite`` this process imports is not the build's in ``site``, or "".
    A build whose package went missing would otherwise be measured as whatever other
    mmsuite the interpreter finds (the driver's own), under the revision's name."""
    try:
        import mmsuite
    except ImportError as exc:
        return f"mmsuite cannot be imported from {site}: {exc}"
    where = os.path.realpath(getattr(mmsuite, "__file__", None) or "?")
    if not where.startswith(os.path.realpath(site) + os.sep):
        return f"the worker imports mmsuite from {where}, not from the build's {site}"
    return ""


class _Worker:
    def __init__(self, identity: dict, load: dict, damage: str = "") -> None:
        self.identity, self.load = identity, load
        self.damage = damage  # foreign_import's answer: every open refuses with it
        self.sampler: KernelSampler | None = None

    def open(self, request: dict) -> dict:
        if self.damage:
            return {"status": "damaged", "reason": self.damage}
        from mmsuite import catalogue
        from mmsuite.backends import KernelUnavailable, RunOptions
        from mmsuite.measure import KernelSampler, VerificationFailed
        from mmsuite.problem import Problem

        self.close()
        with contextlib.suppress(ImportError):  # a revision from before plugins has none
            from mmsuite import plugins

            plugins.load_configured()
        try:
            kernel = catalogue.get(request["kernel"])
        except KeyError:
            return {"status": "missing", "reason": "not in this revision's catalogue"}
        names = {f.name for f in dataclasses.fields(Problem)}
        problem = Problem(**{k: v for k, v in request["problem"].items() if k in names})
        options = RunOptions(**{k: v for k, v in request["options"].items()
                                if k in {f.name for f in dataclasses.fields(RunOptions)}})
        try:
            sampler = self.sampler = KernelSampler(kernel.id, problem, options)
        except KernelUnavailable as exc:
            return {"status": "unavailable", "reason": str(exc)}
        except VerificationFailed as exc:
            return {"status": "failed", "reason": str(exc)}
        except Exception as exc:  # a kernel that raises is a row, with its traceback kept
            traceback.print_exc()
            return {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
        verdict = getattr(sampler, "verdict", None)
        readers = self.identity["CodeReaders"](**request["code"])  # the driver's, by backend
        own = None
        if getattr(kernel, "plugin", ""):  # a plugin's code is its own, not the build's
            from mmsuite.backends import get_backend

            flags = get_backend(kernel.backend, options).build_flags(kernel)
            own = self.identity["plugin_kernel_hash"](kernel, flags)
        return {"status": "ok",
                "code": self.identity["code_identity"](readers, kernel.source, kernel.reference,
                                                       own,
                                                       dispatch=sampler.info.get("dispatch")),
                "max_rel_err": getattr(verdict, "max_rel_err", None),
                "info": _jsonable(sampler.info),
                # None where the revision's sampler predates it: the driver then judges
                # a row's cost from its first round instead.
                "launch_s": getattr(sampler, "launch_seconds", None)}

    def turn(self, request: dict) -> dict:
        sampler = self.sampler
        if sampler is None:
            raise RuntimeError("a turn was asked for before a kernel was opened")
        # A GPU session's NVML reader, where the revision's has one: the turn's throttling.
        read_gpu = getattr(getattr(sampler, "session", None), "device_state", None)
        gpu_before = read_gpu() if read_gpu is not None else None
        shared = request.get("window")
        if shared is not None:
            time.sleep(max(0.0, shared[0] - time.monotonic()))
        window = self.load["LoadWindow"].start()
        timed = _shared(sampler, shared[1]) if shared is not None else \
            _timed(sampler, request["seconds"])
        answer = {"samples": [ms for ms, _ in timed], "on_cpu": [share for _, share in timed],
                  "host_load": window.finish()}
        if read_gpu is not None:
            answer["gpu"] = _jsonable({"before": gpu_before, "after": read_gpu()})
        return answer

    def close(self, request: dict | None = None) -> dict:
        if self.sampler is not None:
            self.sampler.close()
            self.sampler = None
        return {"status": "closed"}


def _sample(sampler: KernelSampler) -> tuple[float, float]:
    """One sample, ms, and the CPU time this process took during it over its wall time.
    On a shared core the second says how much of the sample the kernel's thread waited
    for another process's time slices."""
    cpu, wall = time.process_time(), time.perf_counter()
    ms = sampler.kernel_ms()
    wall = time.perf_counter() - wall
    return ms, (time.process_time() - cpu) / wall if wall > 0 else 1.0


def _timed(sampler: KernelSampler, seconds: float) -> list[tuple[float, float]]:
    """Samples for at least ``seconds``, the first one counted in them: a kernel slower
    than the turn takes one."""
    started = time.perf_counter()
    samples = [_sample(sampler)]
    while time.perf_counter() - started < seconds:
        samples.append(_sample(sampler))
    return samples


def _shared(sampler: KernelSampler, until: float) -> list[tuple[float, float]]:
    """The samples that end by ``until`` (``time.monotonic()``), or the first one where none
    does. A sample that runs past it is left out: the other side may have stopped by then,
    leaving the machine to this one, which would pull a slower side's times towards the
    faster's."""
    samples = [_sample(sampler)]
    if time.monotonic() > until:
        return samples
    while True:
        sample = _sample(sampler)
        if time.monotonic() > until:
            return samples
        samples.append(sample)


def main() -> None:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # kernels, compilers and drivers may print: keep it off the protocol
    # argv: this file (set by runpy), the build's site folder, then the two helpers.
    identity, load = runpy.run_path(sys.argv[3]), runpy.run_path(sys.argv[4])
    worker = _Worker(identity, load, foreign_import(sys.argv[1]))
    handlers = {"open": worker.open, "turn": worker.turn, "close": worker.close}
    for line in sys.stdin:
        request = json.loads(line)
        protocol.write(json.dumps(handlers[request["op"]](request)) + "\n")


if __name__ == "__main__":
    main()
