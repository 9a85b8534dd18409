"""The environment table of a report: where each result file was measured (device, clocks,
BLAS and its architecture, commit and date), one column per machine."""

from __future__ import annotations

import re

from .backend_table import BACKENDS
from .host import CPU_MODEL
from .runs import Run

_CURATED = [
    ("created", "date (UTC)"), ("git_commit", "commit"), ("mmsuite", "mmsuite"),
    (CPU_MODEL, "CPU"), ("cpu_cores", "CPU cores"), ("cpu_max_mhz", "CPU max clock (MHz)"),
    ("cpu_clock_source", "CPU clock from"), ("cpu_simd", "CPU vector extension"),
    ("cpu_peak_source", "CPU peak from"),
    ("cpu_peak_table_gflops_per_core", "CPU peak by the table (GFLOP/s a core)"),
    ("platform", "platform"),
    ("python", "Python"), ("numpy", "numpy"),
]


def _scalar(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_scalar(v) for v in value)
    if isinstance(value, dict):  # a setting left unset is no setting: not "max_samples=None"
        return "; ".join(f"{k}={_scalar(v)}" for k, v in value.items() if v is not None)
    return "-" if value is None else str(value)


def _blas(value) -> str:
    """numpy's BLAS: library, version, the kernels' architecture and threads."""
    if not isinstance(value, dict):
        return _scalar(value)
    text = f"{value.get('library', '?')} {value.get('version', '')}".strip()
    details = []
    if value.get("architecture"):
        details.append(f"{value['architecture']} kernels")
    if value.get("threads"):
        details.append(f"{value['threads']} threads")
    if value.get("forced_by"):
        details.append("set by " + _scalar(value["forced_by"]))
    return text + (f" ({', '.join(details)})" if details else "")


def environment_rows(run: Run) -> list[list[str]]:
    """What a reader needs to know about where a file was measured, as (what, value) rows:
    device, clocks, BLAS and its architecture, commit and date; then anything else the
    backends recorded that mentions BLAS or clocks."""
    env = run.environment
    rows = [["file", run.path.name], ["machine", run.machine]]
    rows += [[title, _scalar(env[key])] for key, title in _CURATED if env.get(key) is not None]
    copy = env.get("cpu_copy_probe")
    if isinstance(copy, dict) and isinstance(copy.get("gbs_by_threads"), dict):
        rows.append(["host memory bandwidth (copy probe)", ", ".join(
            f"{_scalar(gbs)} GB/s on {threads} threads"
            for threads, gbs in copy["gbs_by_threads"].items())])
    for name, backend in sorted((env.get("backends") or {}).items()):
        backend = backend or {}
        if backend.get("unavailable"):
            rows.append([f"{name}", f"unavailable: {backend['unavailable']}"])
            continue
        shown = set()
        for key, title in BACKENDS[name].environment if name in BACKENDS else ():
            if backend.get(key) is not None:
                rows.append([title, _blas(backend[key]) if key == "blas" else
                             _scalar(backend[key])])
                shown.add(key)
        copy = backend.get("copy_probe")
        if isinstance(copy, dict):
            rows.append([f"{name}: memory bandwidth (copy probe)",
                         f"{_scalar(copy['gbs'])} GB/s" if copy.get("gbs")
                         else f"not measured: {copy.get('error')}"])
        blas = backend.get("blas")
        if isinstance(blas, dict) and blas.get("warning"):
            rows.append([f"{name}: warning", str(blas["warning"])])
        for key, value in sorted(backend.items()):
            if key not in shown and value is not None and re.search(
                    r"blas|clock|coretype|arch|threads", key, re.IGNORECASE):
                rows.append([f"{name}: {key}", _scalar(value)])
    settings = run.settings
    for key in ("repeats", "warmup", "sampling", "l2", "pinned", "threads"):
        if settings.get(key) is not None:
            rows.append([f"setting: {key}", _scalar(settings[key])])
    return rows


def environment_table(runs: list[Run]) -> list[list[str]]:
    """The environment rows of several files of one machine: a value they share is shown
    once, values that differ are listed per file."""
    per_run = [dict((k, v) for k, v in environment_rows(run)) for run in runs]
    for run, rows in zip(runs, per_run):
        load = _load_range(run.records)
        if load:
            rows["load average (1 min) during the run"] = load
    keys: list[str] = []
    for rows in per_run:
        keys += [k for k in rows if k not in keys]
    out = []
    for key in keys:
        values = [rows.get(key, "-") for rows in per_run]
        if key == "file":
            out.append([key, ", ".join(values)])
        elif len(set(values)) == 1:
            out.append([key, values[0]])
        else:
            out.append([key, "; ".join(f"{run.path.name}: {v}" for run, v in zip(runs, values))])
    return out


def max_load(records: list[dict]) -> float | None:
    """The highest 1-minute load average the records saw, or None."""
    values = [float(load[when][0]) for load in (r.get("load_avg") or {} for r in records)
              for when in ("before", "after") if isinstance(load.get(when), list) and load[when]]
    return max(values) if values else None


def _load_range(records: list[dict]) -> str:
    """The lowest and highest 1-minute load average the records saw, or ""."""
    values = []
    for record in records:
        load = record.get("load_avg") or {}
        for when in ("before", "after"):
            if isinstance(load.get(when), list) and load[when]:
                values.append(float(load[when][0]))
    return f"{min(values):.2f} to {max(values):.2f}" if values else ""
