"""The ``mmsuite`` command line: list kernels, run ladders, render reports, draw histories."""

from __future__ import annotations

import argparse
import fnmatch
import sys
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import catalogue, compare, environment, peak, report, results
from .backends import RunOptions
from .catalogue import Kernel
from .measure import DEFAULT_REPEATS, DEFAULT_WARMUP
from .problem import LAYOUTS, PRESET_HELP, PRESETS, Problem, parse_shape, preset
from .sweep import Row, sweep

DEFAULT_SHAPE = "512x512x512"


class UsageError(Exception):
    """A bad argument: reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        raise UsageError(message)


def _int_at_least(minimum: int):
    """An argparse type: an integer >= ``minimum``."""
    what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


_positive_int, _non_negative_int = _int_at_least(1), _int_at_least(0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mmsuite", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p_list = sub.add_parser("list", help="show every kernel and why unavailable ones are")
    p_list.add_argument("--backend", action="append", choices=catalogue.BACKENDS)
    p_list.add_argument("--cl-device", help="OpenCL device: index or name substring")

    p_run = sub.add_parser("run", help="run, verify and time kernels; print the ladder table")
    sel = p_run.add_argument_group("selection")
    sel.add_argument("--backend", action="append", choices=catalogue.BACKENDS,
                     help="only this backend (repeatable)")
    sel.add_argument("--kernel", action="append", metavar="GLOB",
                     help="only kernels whose id matches GLOB, e.g. 'cuda.0*' (repeatable)")
    prob = p_run.add_argument_group("problem")
    prob.add_argument("--shape", metavar="MxNxK", help=f"matrix sizes (default {DEFAULT_SHAPE})")
    prob.add_argument("--batch", type=_positive_int, default=1)
    prob.add_argument("--layout", choices=LAYOUTS, default="row")
    prob.add_argument("--alpha", type=float, default=1.0)
    prob.add_argument("--beta", type=float, default=0.0)
    prob.add_argument("--seed", type=int, default=0)
    prob.add_argument("--preset", choices=list(PRESETS),
                      help="; ".join(f"{k}: {v}" for k, v in PRESET_HELP.items()))
    meas = p_run.add_argument_group("measurement")
    meas.add_argument("--repeats", type=_positive_int, default=DEFAULT_REPEATS)
    meas.add_argument("--warmup", type=_non_negative_int, default=DEFAULT_WARMUP)
    meas.add_argument("--threads", type=_positive_int,
                      help="OpenMP threads for the CPU ladder (default: all cores)")
    meas.add_argument("--cl-device", help="OpenCL device: index or name substring")
    meas.add_argument("--pinned", action="store_true",
                      help="page-locked host buffers for GPU transfers")
    meas.add_argument("--profile", action="store_true",
                      help="add registers, shared memory and spill bytes (CUDA)")
    out = p_run.add_argument_group("output")
    out.add_argument("--json", type=Path, metavar="FILE", help="write the results here")
    out.add_argument("--markdown", type=Path, metavar="FILE", help="write the tables as Markdown")
    out.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots here")

    p_report = sub.add_parser("report", help="render tables and plots from a result file")
    p_report.add_argument("results", type=Path)
    p_report.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p_report.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots here")

    compare.add_parser(sub)

    p_hist = sub.add_parser("history", help="plot kernels' history from asv results")
    p_hist.add_argument("--results-dir", type=Path, default=Path(".asv/results"))
    p_hist.add_argument("--kernel", action="append", metavar="GLOB", default=None)
    p_hist.add_argument("--out", type=Path, default=Path("history.png"))
    return parser


# ------------------------------------------------------------------ commands
def cmd_list(args: argparse.Namespace, console: Console) -> int:
    options = RunOptions(cl_device=args.cl_device)
    from .backends import unavailable_reason

    table = Table(title="mmsuite kernels (ladder order)", title_justify="left")
    for title in ("kernel", "rung", "parent", "seed", "adds", "sizes", "available"):
        table.add_column(title, overflow="fold")
    for kernel in catalogue.kernels():
        if args.backend and kernel.backend not in args.backend:
            continue
        reason = unavailable_reason(kernel, options)
        sizes = "any" if kernel.constraints == catalogue.ANY_SIZE else kernel.constraints
        table.add_row(kernel.id, str(kernel.rung), kernel.parent or "-", kernel.seed,
                      kernel.adds, sizes, "yes" if not reason else f"no: {reason}",
                      style="dim" if reason else None)
    console.print(table)
    console.print("presets: " + "; ".join(f"{k} = {v}" for k, v in PRESET_HELP.items()))
    return 0


def _problems(args: argparse.Namespace) -> list[Problem]:
    if args.preset:
        if args.shape or args.batch != 1:
            raise UsageError("--preset sets the shape and batch; drop --shape/--batch")
        return [Problem(p.m, p.n, p.k, p.batch, args.layout, args.alpha, args.beta, args.seed)
                for p in preset(args.preset)]
    m, n, k = parse_shape(args.shape or DEFAULT_SHAPE)
    return [Problem(m, n, k, args.batch, args.layout, args.alpha, args.beta, args.seed)]


def select_kernels(backends: list[str] | None, globs: list[str] | None) -> list[Kernel]:
    """Catalogue kernels filtered by backend names and id globs; a glob matching nothing is an
    error."""
    chosen = [k for k in catalogue.kernels() if not backends or k.backend in backends]
    if globs:
        for pattern in globs:
            if not any(fnmatch.fnmatchcase(k.id, pattern) for k in chosen):
                raise UsageError(f"--kernel {pattern!r} matches no kernel; see `mmsuite list`")
        chosen = [k for k in chosen if any(fnmatch.fnmatchcase(k.id, g) for g in globs)]
    return chosen


def _collapse_unavailable(rows: list[Row], explicit: set[str]) -> tuple[list[Row], list[str]]:
    """Whole backends that are unavailable for one reason become one note, unless asked for."""
    by_backend: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_backend[row.kernel.backend].append(row)
    keep, notes = [], []
    for backend, backend_rows in by_backend.items():
        reasons = {r.reason for r in backend_rows if r.status == "unavailable"}
        all_unavailable = all(r.status == "unavailable" for r in backend_rows)
        if all_unavailable and len(reasons) == 1 and backend not in explicit:
            count = len({r.kernel.id for r in backend_rows})
            notes.append(f"{backend}: {count} kernels unavailable: {reasons.pop()}")
        else:
            keep.extend(backend_rows)
    return keep, notes


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    problems = _problems(args)
    kernels = select_kernels(args.backend, args.kernel)
    options = RunOptions(threads=args.threads, cl_device=args.cl_device, pinned=args.pinned,
                         profile=args.profile)
    if args.cl_device is not None:
        from .backends import get_backend

        get_backend("opencl", options)  # a selector matching nothing fails here, in one line
    for path in (args.json, args.markdown):
        if path is not None and path.exists() and path.is_dir():
            raise UsageError(f"{path} is a directory")

    total = len(kernels) * len(problems)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=Console(stderr=True), transient=True)
    with progress:
        task = progress.add_task("running", total=total)

        def on_row(row: Row) -> None:
            progress.update(task, advance=1,
                            description=f"{row.kernel.id} @ {row.problem.shape_label}")

        rows = sweep(kernels, problems, repeats=args.repeats, warmup=args.warmup,
                     options=options, on_row=on_row)

    shown, notes = _collapse_unavailable(rows, set(args.backend or []))
    records = [row.to_record() for row in rows]
    shown_records = [row.to_record() for row in shown]
    env = environment.collect(sorted({k.backend for k in kernels}), options)
    peak.annotate(records + shown_records, env)  # % peak; above 100% is a measurement error
    report.render_rich(shown_records, console)
    for note in notes:
        console.print(note, style="dim")
    settings = {"repeats": args.repeats, "warmup": args.warmup, "threads": args.threads,
                "cl_device": args.cl_device, "pinned": args.pinned, "profile": args.profile,
                "problems": [p.to_dict() for p in problems]}
    if args.json:
        results.save(args.json, records, env, settings)
        console.print(f"results written to {args.json}")
    if args.markdown:
        args.markdown.write_text(report.render_markdown(shown_records)
                                 + "".join(f"\n{note}\n" for note in notes))
    if args.plots:
        for path in report.plot(records, args.plots):
            console.print(f"plot written to {path}")
    failed = [r for r in rows if r.status in ("failed", "error")]
    return 1 if failed else 0


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    document = results.load(args.results)
    records = document["results"]
    if args.markdown:
        print(report.render_markdown(records))
    else:
        report.render_rich(records, console)
    if args.plots:
        for path in report.plot(records, args.plots):
            console.print(f"plot written to {path}")
    return 0


def cmd_history(args: argparse.Namespace, console: Console) -> int:
    from . import history

    if not args.results_dir.is_dir():
        raise UsageError(f"no asv results at {args.results_dir}; run `asv run` first")
    series = history.load_history(args.results_dir)
    ids = history.kernel_ids(series)  # ladder order
    if args.kernel:
        ids = [i for i in ids if any(fnmatch.fnmatchcase(i, g) for g in args.kernel)]
    if not ids:
        raise UsageError("no kernel history matches; see the asv results directory")
    history.plot_history(series, ids, args.out)
    console.print(f"history of {len(ids)} kernels written to {args.out}")
    return 0


COMMANDS = {"list": cmd_list, "run": cmd_run, "report": cmd_report, "history": cmd_history,
            "compare": compare.cmd_compare}


def _console() -> Console:
    """The terminal's width on a terminal; wide enough for the ladder table in logs and pipes."""
    # No markup: reasons and device names contain brackets ("mmsuite[cuda]", "[GPU]").
    console = Console(markup=False)
    return console if console.is_terminal else Console(width=240, markup=False)


def main(argv: list[str] | None = None) -> int:
    console = _console()
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args, console)
    except (UsageError, ValueError, KeyError, OSError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"mmsuite: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mmsuite: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
