"""``mmsuite history``: plot kernels' history from asv results."""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from pathlib import Path

from rich.console import Console

from .common import UsageError, check_output_file


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("history", help="summarise (and plot) kernels' history from asv results",
                       description="One line per kernel, machine and size: commits, first "
                       "and last value, failed commits. --out FILE.png also draws it.")
    p.add_argument("--results-dir", type=Path, default=Path(".asv/results"),
                   help="asv's results folder (default .asv/results)")
    p.add_argument("--kernel", action="append", metavar="GLOB", default=None,
                   help="only kernels whose id matches GLOB, e.g. 'cpu.*' (repeatable)")
    p.add_argument("--metric", default="kernel_ms",
                   help="what to show: kernel_ms (default), h2d_ms or d2h_ms, the suites' "
                   "time_kernel, time_h2d and time_d2h benchmarks")
    p.add_argument("--machine", help="only this asv machine name")
    p.add_argument("--out", type=Path, metavar="FILE.png",
                   help="also draw the history to this PNG (nothing is written without it)")
    return p


def asv_damage(results_dir: Path, machine: str | None = None) -> list[str]:
    """What is wrong with each asv file under ``results_dir`` that asv's reader would skip:
    the file, and the field at fault. Empty when every file is sound."""
    problems = []
    folders = [results_dir / machine] if machine else \
        [p for p in sorted(results_dir.iterdir()) if p.is_dir()]
    files = [results_dir / "benchmarks.json"] + [f for d in folders if d.is_dir()
                                                  for f in sorted(d.glob("*.json"))]
    for path in files:
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text())
        except (ValueError, RecursionError, MemoryError) as exc:  # JSON, UTF-8, nesting
            problems.append(f"{path} is not JSON: " + (
                str(exc) if isinstance(exc, ValueError) else "nested too deeply or too large"))
            continue
        if not isinstance(data, dict):
            problems.append(f"{path}: expected an object")
        elif path.name not in ("benchmarks.json", "machine.json"):
            if not isinstance(data.get("commit_hash"), str):
                problems.append(f"{path}: field 'commit_hash' is missing or not a string")
            elif not isinstance(data.get("results"), dict):
                problems.append(f"{path}: field 'results' is missing or not an object")
            else:
                bad = sorted(name for name, entry in data["results"].items()
                             if not isinstance(entry, list) or not entry
                             or not isinstance(entry[0], (list, type(None), int, float)))
                if bad:
                    problems.append(f"{path}: field 'results.{bad[0]}' is not an asv result"
                                    + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))
    return problems


def run(args: argparse.Namespace, console: Console) -> int:
    from .. import history

    if not args.results_dir.is_dir():
        raise UsageError(f"no asv results at {args.results_dir}; run `asv run` first")
    check_output_file("--out", args.out)
    history.asv_reader()  # without the bench extra: one line naming it, before any work
    if args.machine is not None:
        try:
            history.check_machine_name(args.machine)
        except ValueError as exc:
            raise UsageError(f"--machine: {exc}") from None
    for problem in asv_damage(args.results_dir, args.machine):  # asv would skip them silently
        if problem.startswith(str(args.results_dir / "benchmarks.json")):
            raise UsageError(problem)  # the descriptions of every benchmark: nothing to plot
        print(f"mmsuite: warning: {problem}; skipped", file=sys.stderr)
    try:
        series = history.load_history(args.results_dir, machine=args.machine)
    except (ValueError, OSError) as exc:  # a damaged asv file: name it, do not plot around it
        raise UsageError(f"{args.results_dir}: cannot read the asv results: {exc}") from None
    if args.machine and not series:
        machines = ", ".join(history.machines(args.results_dir)) or "none"
        raise UsageError(f"no asv results for machine {args.machine!r} (machines: {machines})")
    metrics = history.metrics(series)
    if args.metric not in metrics:
        raise UsageError(f"no {args.metric} history; recorded: {', '.join(metrics) or 'none'}")
    ids = history.kernel_ids(series, metric=args.metric)  # ladder order
    if args.kernel:
        ids = [i for i in ids if any(fnmatch.fnmatchcase(i, g) for g in args.kernel)]
    if not ids:
        raise UsageError("no kernel history matches; see the asv results directory")
    console.print(history.summary(series, ids, args.metric), soft_wrap=True)
    if args.out is None:
        console.print("add --out FILE.png to draw it", style="dim")
        return 0
    history.plot_history(series, ids, args.out, metric=args.metric)
    console.print(f"history of {len(ids)} kernels written to {args.out}")
    return 0
