"""``mmsuite tune``: search a dispatching CUDA rung's plan for given problems and store the
winners in this GPU's tuning file."""

from __future__ import annotations

import argparse

from .. import dispatch
from ..tune import (
    DEFAULT_CANDIDATES,
    DEFAULT_CONFIRM,
    DEFAULT_STREAMK,
    TUNABLE,
    TuneError,
    _kernel_tuner,
    current_device,
    plan_words,
    tune_problem,
)
from .common import UsageError


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``tune`` subcommand's parser (``sub`` is the CLI's subparsers object)."""
    p = sub.add_parser("tune", help="search a dispatching CUDA rung's tile shape and split-K "
                       "factor for given problems (Kernel Tuner); store them for this GPU")
    p.add_argument("kernel", help=f"the rung to tune: {', '.join(TUNABLE)}")
    p.add_argument("--shape", action="append", required=True, metavar="MxNxK",
                   help="a problem to tune for (repeatable)")
    p.add_argument("--batch", type=int, default=1,
                   help="independent products of the same shape (default 1)")
    p.add_argument("--layout", choices=("row", "col"), default="row",
                   help="storage order of A, B and C (default row)")
    p.add_argument("--candidates", type=int, default=DEFAULT_CANDIDATES,
                   help="candidates Kernel Tuner compiles, verifies and times per problem "
                        f"(default {DEFAULT_CANDIDATES})")
    p.add_argument("--confirm", type=int, default=DEFAULT_CONFIRM,
                   help="best candidates re-measured with the suite's timer "
                        f"(default {DEFAULT_CONFIRM})")
    p.add_argument("--streamk", type=int, default=DEFAULT_STREAMK, metavar="N",
                   help="stream-K variants (rung 23's, best by the model) measured with the "
                        f"suite's timer as well; 0 for none (default {DEFAULT_STREAMK})")
    return p


def problems_of(args: argparse.Namespace) -> list:
    """The problems the arguments name; TuneError for bad ones."""
    from ..problem import Problem, parse_shape

    if args.kernel not in TUNABLE:
        raise TuneError(f"{args.kernel!r} cannot be tuned; tunable rungs: {', '.join(TUNABLE)}")
    if args.candidates < 1 or args.confirm < 1 or args.batch < 1:
        raise TuneError("--candidates, --confirm and --batch must be positive")
    if args.streamk < 0:
        raise TuneError("--streamk must not be negative")
    out = []
    for text in args.shape:
        try:
            m, n, k = parse_shape(text)
            out.append(Problem(m, n, k, args.batch, args.layout))
        except ValueError as exc:
            raise TuneError(f"--shape {text!r}: {exc}") from None
    return out


def run(args: argparse.Namespace, console) -> int:
    try:
        return _tune(args, console)
    except TuneError as exc:  # bad input to tune (shape, kernel, no GPU or Kernel Tuner)
        raise UsageError(str(exc)) from None


def _tune(args: argparse.Namespace, console) -> int:
    """Tune ``args.kernel`` for every ``--shape``; print a table; 0 when all were stored."""
    from rich.table import Table

    from .. import catalogue

    problems = problems_of(args)
    kernel = catalogue.get(args.kernel)
    if kernel.reason:
        raise TuneError(f"{kernel.id} cannot run here: {kernel.reason}")
    _kernel_tuner()
    device = current_device()
    console.print(f"tuning {kernel.id} on {device.name} ({device.sms} SMs); tuning file "
                  f"{dispatch.tuning_path(device.name)}")
    table = Table(title=f"mmsuite tune {kernel.id}")
    for column in ("problem", "candidates", "skipped", "heuristic ms", "tuned", "ms",
                   "TFLOP/s", "vs heuristic"):
        table.add_column(column)
    status = 0
    for index, problem in enumerate(problems, 1):
        label = f"{problem.m}x{problem.n}x{problem.k}" + (
            f" batch {problem.batch}" if problem.batch > 1 else "")

        def progress(text: str, label: str = label, index: int = index) -> None:
            console.print(f"[{index}/{len(problems)}] {label}: {text}", markup=False,
                          highlight=False)

        try:
            done = tune_problem(kernel.id, problem, device, args.candidates, args.confirm,
                                progress, args.streamk)
        except RuntimeError as exc:
            progress(f"not tuned: {exc}")
            status = 1
            continue
        entry = done["entry"]
        for name, why in entry["skipped"].items():
            progress(f"skipped {name}: {why}")
        heuristic_ms = entry["heuristic"]["ms"]
        # No entry stored when the heuristic won: the rung keeps its own plan.
        tuned = (f"none (heuristic kept: {plan_words(entry['heuristic'])})"
                 if entry["kept_heuristic"] else plan_words(entry))
        table.add_row(label, str(entry["candidates"]), str(len(entry["skipped"])),
                      f"{heuristic_ms:.4f}", tuned,
                      f"{entry['confirmed_ms']:.4f}", f"{entry['confirmed_tflops']:.1f}",
                      f"{heuristic_ms / entry['confirmed_ms']:.2f}x")
    console.print(table)
    console.print(f"stored in {dispatch.tuning_path(device.name)}")
    return status


