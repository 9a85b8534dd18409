"""``mmsuite history``: kernels' history from asv results or saved result files: a summary,
a plot, and with ``--regressions`` the commits at which a row stepped (E-Divisive means)."""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from pathlib import Path

from rich.console import Console

from ..changepoints import DEFAULT_ALPHA
from ..regressions import DEFAULT_THRESHOLD
from .common import UsageError, check_output_file, fraction


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
    p.add_argument("--results", type=Path, nargs="+", metavar="RESULTS.json",
                   help="read saved result files (or folders of them) instead of asv's; "
                   "each file's place is its git commit's date in --repo")
    p.add_argument("--repo", type=Path, default=Path("."), metavar="DIR",
                   help="the git repository that orders the commits (default: here; where "
                   "git does not know a commit, asv's date for it or the saved file's "
                   "creation time orders it)")
    found = p.add_argument_group("regressions (change points: E-Divisive means)")
    found.add_argument("--regressions", action="store_true",
                       help="list the commits at which a kernel x problem became slower or "
                       "faster, and mark them on --out's plot")
    found.add_argument("--threshold", type=fraction, default=DEFAULT_THRESHOLD,
                       help="smallest step reported (default 0.05: 5%%)")
    found.add_argument("--alpha", type=fraction, default=DEFAULT_ALPHA,
                       help="the permutation test's level (default 0.05; 199 permutations)")
    found.add_argument("--include-loaded", action="store_true",
                       help="judge rows measured under load or on a throttled GPU too "
                       "(left out by default): for a history measured under the same load "
                       "throughout")
    found.add_argument("--fail-on-regression", action="store_true",
                       help="exit 1 when a regression is found (implies --regressions)")
    return p


def _result_files(paths: list[Path]) -> list[Path]:
    files = []
    for path in paths:
        if path.is_dir():
            inside = sorted(f for f in path.glob("*.json") if f.is_file())
            if not inside:
                raise UsageError(f"--results: no result files (*.json) in {path}")
            files.extend(inside)
        elif path.exists():
            files.append(path)
        else:
            raise UsageError(f"--results: no such file or folder: {path}")
    return files


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

    check_output_file("--out", args.out)
    if args.results:
        series = _saved_history(args)
    else:
        series = _asv_history(args)
    metrics = history.metrics(series)
    if args.metric not in metrics:
        raise UsageError(f"no {args.metric} history; recorded: {', '.join(metrics) or 'none'}")
    ids = history.kernel_ids(series, metric=args.metric)  # ladder order
    if args.kernel:
        ids = [i for i in ids if any(fnmatch.fnmatchcase(i, g) for g in args.kernel)]
    if not ids:
        raise UsageError("no kernel history matches --kernel; the history has: "
                         + ", ".join(history.kernel_ids(series, metric=args.metric)))
    console.print(history.summary(series, ids, args.metric, args.machine), soft_wrap=True)
    status, marks = 0, None
    if args.regressions or args.fail_on_regression:
        from .. import regressions

        finding = regressions.find(series, ids, metric=args.metric,
                                   threshold=args.threshold, alpha=args.alpha,
                                   include_kept_apart=args.include_loaded)
        for line in regressions.report_lines(finding, args.threshold):
            console.print(line, soft_wrap=True)
        marks = regressions.marks(finding)
        status = int(args.fail_on_regression and bool(finding.regressions))
    if args.out is None:
        console.print("add --out FILE.png to draw it", style="dim")
        return status
    history.plot_history(series, ids, args.out, metric=args.metric, machine=args.machine,
                         marks=marks)
    console.print(f"history of {len(ids)} kernels written to {args.out}")
    return status


def _saved_history(args: argparse.Namespace) -> dict:
    from .. import regressions

    series = regressions.load_saved(_result_files(args.results), repo=args.repo)
    if args.machine is not None:
        series = {k: s for k, s in series.items() if k.machine == args.machine}
        if not series:
            raise UsageError(f"no results for machine {args.machine!r}")
    return series


def _asv_history(args: argparse.Namespace) -> dict:
    from .. import history

    if not args.results_dir.is_dir():
        raise UsageError(f"no asv results at {args.results_dir}; run `asv run` first")
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
    from .. import regressions

    regressions.in_git_order(series, args.repo)
    return series
