"""The gate's channel to one revision's worker process (``mmsuite.continuous_worker``): it
starts the worker on that revision's build, with that revision's plugins, and speaks to it
in JSON lines, one request and one answer at a time."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from . import continuous_worker, identity, load, plugins
from .builds import Build


class WorkerLost(RuntimeError):
    """A side's worker died or stopped answering; the message says how."""


class BuildDamaged(RuntimeError):
    """A side's worker does not import its build's mmsuite: nothing it measured would be
    that revision's, so the gate stops; the message names the damage."""


class SideWorker:
    """One revision's worker process, spoken to in JSON lines."""

    def __init__(self, build: Build, log_path: Path) -> None:
        self.build = build
        self._log = open(log_path, "a")
        here = Path(continuous_worker.__file__)
        env = dict(os.environ)
        env.pop("PYTHONSTARTUP", None)
        # One OpenMP thread per CPU, the same in every worker: free threads that wander
        # onto a busy neighbour's CPU doubled the spread of the rounds.
        env.setdefault("OMP_PROC_BIND", "close")
        env.setdefault("OMP_PLACES", "threads")
        if build.plugin_paths:  # a revision of the user's plugins: its files, no other's
            env[plugins.ENV_VAR] = os.pathsep.join(build.plugin_paths)
        self.process = subprocess.Popen(
            [sys.executable, "-c", continuous_worker.BOOT, str(build.site), str(here),
             identity.__file__, load.__file__],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
            cwd=build.root, env=env, start_new_session=True)  # Ctrl-C is the driver's
        # Both pipes exist: Popen was asked for them.
        assert self.process.stdin is not None and self.process.stdout is not None
        self._to_worker, self._from_worker = self.process.stdin, self.process.stdout

    def request(self, message: dict, timeout: float) -> dict:
        self.send(message)
        return self.receive(timeout)

    def send(self, message: dict) -> None:
        try:
            self._to_worker.write(json.dumps(message) + "\n")
            self._to_worker.flush()
        except BrokenPipeError:
            raise WorkerLost(self._death()) from None

    def receive(self, timeout: float) -> dict:
        """The answer to the message sent last."""
        ready, _, _ = select.select([self._from_worker], [], [], timeout)
        if not ready:
            self.kill()
            raise WorkerLost(f"no answer in {timeout:.0f} s (killed)")
        line = self._from_worker.readline()
        if not line:
            raise WorkerLost(self._death())
        return json.loads(line)

    def _death(self) -> str:
        code = self.process.wait()
        if code < 0:
            return f"worker died of {signal.Signals(-code).name} (see {self._log.name})"
        return f"worker exited with status {code} (see {self._log.name})"

    def pin(self, cpus: set[int]) -> None:
        """Run the worker's main thread, where it samples, on ``cpus`` only."""
        try:
            os.sched_setaffinity(self.process.pid, cpus)
        except ProcessLookupError:
            pass  # it died: its next request says how

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self._to_worker.close()
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self._log.close()
