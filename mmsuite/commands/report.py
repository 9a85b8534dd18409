"""``mmsuite report``: tables, and an HTML/Markdown/CSV report with figures, from result
files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from .. import load, report, results
from .common import UsageError, add_all_rows_argument, check_output_folder, deprecated, warn


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("report", help="tables, and an HTML/Markdown/CSV report with "
                              "figures, from result files")
    p.add_argument("results", type=Path, nargs="+", metavar="RESULTS.json",
                          help="result files; several machines, sizes and commits merge")
    p.add_argument("--out", type=Path, metavar="DIR",
                          help="write index.html, report.md, results.csv and figures here")
    p.add_argument("--baseline", type=Path, metavar="BASE.json",
                          help="compare with this earlier result file")
    p.add_argument("--asv", type=Path, metavar="DIR",
                          help="add each kernel's history from this asv results directory")
    p.add_argument("--wide", action="store_true", help="print every column")
    add_all_rows_argument(p)
    p.add_argument("--print-markdown", action="store_true",
                   help="print the tables as Markdown (run's --markdown FILE writes them)")
    p.add_argument("--markdown", dest="print_markdown", help=argparse.SUPPRESS,
                   action=deprecated("--print-markdown", argparse._StoreTrueAction))
    p.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots here")

    return p


def run(args: argparse.Namespace, console: Console) -> int:
    for option in ("--baseline", "--asv"):  # they go into the report, which --out writes
        if getattr(args, option[2:]) is not None and args.out is None:
            raise UsageError(f"{option} goes into the report: give --out DIR too")
    check_output_folder("--plots", args.plots)
    check_output_folder("--out", args.out)
    # Read once for what needs the records here; the report and the terminal's tables read
    # the files themselves (a file of 10,000 rows takes seconds to check).
    records = [r for path in args.results for r in results.load(path)["results"]] \
        if args.print_markdown or args.plots else []
    if args.baseline is not None:
        results.load(args.baseline)  # a bad baseline fails here, in one line
    if args.asv is not None:
        from .. import history
        from .history import asv_damage

        history.asv_reader()  # without the bench extra: one line naming it, before any work
        if not args.asv.is_dir():
            raise UsageError(f"no asv results at {args.asv}")
        for problem in asv_damage(args.asv):  # as `history` does: asv would skip them
            if problem.startswith(str(args.asv / "benchmarks.json")):
                raise UsageError(problem)  # every benchmark's description: no history
            print(f"mmsuite: warning: {problem}; skipped", file=sys.stderr)
    distorted = load.distortion_warning(records)
    if distorted:  # as `run` said when it measured them
        warn(distorted)
    if args.print_markdown:
        print(report.render_markdown(records))
    elif not args.out:
        from .. import report_html

        report_html.render_terminal(args.results, console, wide=args.wide,
                                    limit=report.row_limit(args.all_rows))
    if args.plots:
        from .. import charts  # matplotlib loads only when plots are asked for

        for path in charts.plot(records, args.plots):
            console.print(f"plot written to {path}")
    if args.out:
        from .. import report_html

        index = report_html.build(args.results, args.out, baseline=args.baseline,
                                  asv_dir=args.asv)
        console.print(f"report written to {index}")
    return 0
