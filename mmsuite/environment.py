"""Where a result was measured: host, software versions, and each backend's device."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from . import cpu_probe
from .backends import RunOptions, get_backend
from .host import CPU_MODEL, cpu_flags, cpu_model
from .peak import cpu_figures, cross_check

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def git_commit(cwd: Path | None = None) -> str | None:
    """The commit measured: ``MMSUITE_GIT_COMMIT`` when set (a copy of the tree without its
    history), else the commit of the source checkout mmsuite runs from (an editable install),
    else that of the git repository around the working directory (a wheel installed from a
    clone and run inside it), else None."""
    if os.environ.get("MMSUITE_GIT_COMMIT"):
        return os.environ["MMSUITE_GIT_COMMIT"]
    places = [_PACKAGE_ROOT] if (_PACKAGE_ROOT / ".git").exists() else []
    for where in [*places, cwd or Path.cwd()]:
        commit = _rev_parse(where)
        if commit:
            return commit
    return None


def _rev_parse(where: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"],
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
        CPU_MODEL: cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpu_avx512": "avx512f" in cpu_flags(),
        **cpu_figures(),  # max clock and vector extension: the CPU's FP32 peak (mmsuite.peak)
        "cpu_copy_probe": cpu_probe.copy_figures(),  # host memory bandwidth (mmsuite.roof)
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


def warnings(env: dict) -> list[str]:
    """What a reader of this environment's results must know: a reference running below
    what the hardware offers, a CPU peak table that disagrees with the measured peak."""
    notes = [line] if (line := cross_check(env)) else []
    for name, facts in sorted(env.get("backends", {}).items()):
        blas = facts.get("blas") if isinstance(facts, dict) else None
        if isinstance(blas, dict) and blas.get("warning"):
            notes.append(f"{name}: {blas['warning']}")
    return notes
