"""``mmsuite compare BASE.json NEW.json``: the verdict of :mod:`mmsuite.compare` on two saved
result files, as a table (and Markdown); exit 1 on a slowdown."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import results
from ..compare import DEFAULT_ALPHA, DEFAULT_THRESHOLD, compare, render_markdown, render_rich
from ..report import TERMINAL_ROWS, row_limit
from ..verdicts import write_junit, write_verdict_json
from .common import (
    UsageError,
    check_distinct_outputs,
    check_output_file,
    deprecated,
    fraction,
    output_file,
)

#: The exit status of a bug (with its traceback): 1 is this command's verdict, "slower".
EXIT_ON_BUG = 3


def add_parser(sub) -> argparse.ArgumentParser:
    """Register ``compare`` on the CLI's subparsers."""
    p = sub.add_parser("compare", help="compare two result files; exit 1 on a slowdown",
                       description="For every kernel x problem in both result files: ratio "
                       "of medians and a Mann-Whitney U test on the samples. Exit 1 when "
                       "something is slower than the threshold or broke, 0 otherwise, 2 for "
                       "bad input.")
    p.add_argument("base", type=Path, metavar="BASE.json",
                   help="results of the run compared against (mmsuite run --json)")
    p.add_argument("new", type=Path, metavar="NEW.json", help="results of the newer run")
    p.add_argument("--threshold", type=fraction, default=DEFAULT_THRESHOLD,
                   help="smallest change that counts, as a fraction (default 0.05: 5%%)")
    p.add_argument("--significance", type=fraction, default=DEFAULT_ALPHA, metavar="LEVEL",
                   help="significance level of the U test (default 0.01)")
    p.add_argument("--alpha", dest="significance", type=fraction, help=argparse.SUPPRESS,
                   action=deprecated("--significance", argparse._StoreAction))
    p.add_argument("--markdown", type=output_file, metavar="FILE",
                   help="also write the comparison as Markdown (for a pull request)")
    p.add_argument("--verdict-json", type=output_file, metavar="FILE",
                   help="also write every verdict as JSON (kernel, problem, verdict, ratio, "
                   "reason; counts, geometric mean, exit status)")
    p.add_argument("--junit", type=output_file, metavar="FILE",
                   help="also write the verdicts as JUnit XML for a CI test report (slower "
                   "and broken fail, unsure is skipped)")
    p.add_argument("--all-rows", action="store_true",
                   help=f"print every row (by default about {TERMINAL_ROWS} are printed, "
                   "findings first, and the rest are counted)")
    return p


def run(args: argparse.Namespace, console) -> int:
    """Print the comparison; 1 if something got slower or broke, else 0."""
    check_distinct_outputs([("--markdown", args.markdown), ("--verdict-json",
                                                            args.verdict_json),
                            ("--junit", args.junit)])
    for option, path in (("--markdown", args.markdown), ("--verdict-json", args.verdict_json),
                         ("--junit", args.junit)):
        check_output_file(option, path)
    try:
        result = compare(args.base, args.new, args.threshold, args.significance)
    except ValueError as exc:  # an unreadable or damaged file, named in the message
        raise UsageError(str(exc)) from None
    render_rich(result, args.threshold, console,
                limit=row_limit(args.all_rows))
    if args.markdown is not None:
        results.write_atomically(args.markdown, render_markdown(result, args.threshold))
        console.print(f"Markdown written to {args.markdown}")
    inputs = {"base": str(args.base), "new": str(args.new), "alpha": args.significance}
    if args.verdict_json is not None:
        write_verdict_json(args.verdict_json, result.verdict_rows(), threshold=args.threshold,
                           extra=inputs)
        console.print(f"verdicts written to {args.verdict_json}")
    if args.junit is not None:
        write_junit(args.junit, result.verdict_rows(), suite="mmsuite compare",
                    threshold=args.threshold)
        console.print(f"JUnit XML written to {args.junit}")
    return result.exit_status
