"""``results.csv`` of a report: one row per kernel x problem x machine, with the figures
the ladder tables derive (throughput, speedups, % of the reference and of the peak)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from .load import others_share
from .report import group_by_problem, table_rows
from .results import write_atomically
from .runs import by_machine

CSV_FIELDS = ["machine", "source", "commit", "kernel", "backend", "rung", "parent", "m", "n",
              "k", "batch", "layout", "alpha", "beta", "status", "reason", "kernel_ms_median",
              "kernel_ms_min", "kernel_ms_max", "noise", "noisy", "samples", "gflops",
              "host_gflops", "h2d_ms", "d2h_ms", "x_base", "x_parent", "pct_ref", "pct_peak",
              "max_rel_err", "err_bound", "err_vs_ref", "l2", "others_share", "contended",
              "achieved_gbs", "intensity", "pct_roof"]


def csv_rows(records: list[dict]) -> list[dict]:
    """One dict per kernel x problem x machine, with the table's derived figures."""
    out = []
    for machine, group in by_machine(records).items():
        for problem_group in group_by_problem(group).values():
            derived = {r["kernel"]: r for r in table_rows(problem_group)}
            for record in problem_group:
                row = derived[record["kernel"]]
                stats = record.get("kernel_ms") or {}
                p = record["problem"]
                out.append({
                    "machine": machine, "source": record.get("source", ""),
                    "commit": record.get("commit", ""), "kernel": record["kernel"],
                    "backend": record["backend"], "rung": record.get("rung"),
                    "parent": record.get("parent") or "", "m": p["m"], "n": p["n"],
                    "k": p["k"], "batch": p["batch"], "layout": p["layout"],
                    "alpha": p["alpha"], "beta": p["beta"], "status": record["status"],
                    "reason": record.get("reason") or "",
                    "kernel_ms_median": row["kernel_ms"],
                    "kernel_ms_min": stats.get("min") if row["kernel_ms"] else None,
                    "kernel_ms_max": stats.get("max") if row["kernel_ms"] else None,
                    "noise": row["noise"], "noisy": row["noisy"],
                    "samples": len(stats.get("samples") or []), "gflops": row["gflops"],
                    "host_gflops": row["host_gflops"], "h2d_ms": row["h2d_ms"],
                    "d2h_ms": row["d2h_ms"], "x_base": row["x_base"],
                    "x_parent": row["x_parent"], "pct_ref": row["pct_ref"],
                    "pct_peak": row["pct_peak"], "max_rel_err": row["max_rel_err"],
                    "err_bound": row["err_bound"], "err_vs_ref": row["err_vs_ref"],
                    "l2": record.get("l2") or "",
                    # Others' share of the CPU in the row's samples; contended: its time and
                    # ratios are distorted (mmsuite.load.contended).
                    "others_share": others_share(record), "contended": row["contended"],
                    **{key: row[key] for key in ("achieved_gbs", "intensity", "pct_roof")},
                })
    return out


def csv_cell(value: object) -> object:
    """A cell a spreadsheet shows as text: one that begins with = + - @ (or a tab or carriage
    return) would be run as a formula, so it gets a leading apostrophe (OWASP's advice).
    Numbers stay numbers; None is empty."""
    if value is None:
        return ""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def write_csv(records: list[dict], path: Path) -> Path:
    """Write the rows through the atomic writer (a symlink at ``path`` is replaced)."""
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for row in csv_rows(records):
        writer.writerow({k: csv_cell(v) for k, v in row.items()})
    write_atomically(path, buffer.getvalue())
    return path
