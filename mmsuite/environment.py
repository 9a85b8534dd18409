"""Where a result was measured: host, software versions, and each backend's device."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .backends import RunOptions, get_backend

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str | None:
    """The commit measured: ``MMSUITE_GIT_COMMIT`` when set (a copy of the tree without its
    history), else the commit of the source checkout mmsuite runs from, if it runs from one."""
    if os.environ.get("MMSUITE_GIT_COMMIT"):
        return os.environ["MMSUITE_GIT_COMMIT"]
    if not (_PACKAGE_ROOT / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(_PACKAGE_ROOT), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def host_environment() -> dict:
    from . import __version__

    return {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "mmsuite": __version__,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
    }


def collect(backends: list[str], options: RunOptions) -> dict:
    """The host record plus one record per backend used; a failing probe is recorded, not raised."""
    env = host_environment()
    env["backends"] = {}
    for name in backends:
        try:
            backend = get_backend(name, options)
            reason = backend.probe()
            env["backends"][name] = {"unavailable": reason} if reason else backend.environment()
        except Exception as exc:
            env["backends"][name] = {"unavailable": f"{type(exc).__name__}: {exc}"}
    return env
