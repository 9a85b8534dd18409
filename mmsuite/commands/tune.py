"""``mmsuite tune``: search rung 22's plan for given problems and store the winners in this
GPU's tuning file; ``--fit-model`` refits the dispatcher's cost model to this GPU."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..tuner import (
    DEFAULT_CANDIDATES,
    DEFAULT_CONFIRM,
    DEFAULT_ROUNDS,
    TUNED_KERNEL,
    TuneError,
)
from .common import UsageError

DEFAULT_FIT_SHAPES = 48
DEFAULT_FIT_SEED = 2311


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``tune`` subcommand's parser (``sub`` is the CLI's subparsers object)."""
    p = sub.add_parser("tune", help="search the dispatching CUDA rung's plan for given "
                       "problems and store it for this GPU, or refit its cost model")
    p.add_argument("kernel", nargs="?", default=TUNED_KERNEL,
                   help=f"the rung to tune (only {TUNED_KERNEL})")
    p.add_argument("--shape", action="append", metavar="MxNxK",
                   help="a problem to tune for (repeatable)")
    p.add_argument("--batch", type=int, default=1,
                   help="independent products of the same shape (default 1)")
    p.add_argument("--layout", choices=("row", "col"), default="row",
                   help="storage order of A, B and C (default row)")
    p.add_argument("--candidates", type=int, default=DEFAULT_CANDIDATES,
                   help="candidates the model ranks best, each verified and timed "
                        f"(default {DEFAULT_CANDIDATES})")
    p.add_argument("--confirm", type=int, default=DEFAULT_CONFIRM,
                   help="fastest candidates re-timed interleaved with the model's choice "
                        f"(default {DEFAULT_CONFIRM})")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                   help=f"rounds of the interleaved re-timing (default {DEFAULT_ROUNDS})")
    p.add_argument("--json", type=Path, metavar="PATH",
                   help="also write each problem's outcome here (the model's plan and time, "
                        "the fastest found and its time)")
    p.add_argument("--fit-model", action="store_true",
                   help="time candidates on a seeded sample of shapes and fit this GPU's "
                        "cost model to them (written beside the tuning files)")
    p.add_argument("--fit-shapes", type=int, default=DEFAULT_FIT_SHAPES, metavar="N",
                   help=f"shapes sampled for --fit-model (default {DEFAULT_FIT_SHAPES}; "
                        "one in five is held back to score the fit)")
    p.add_argument("--seed", type=int, default=DEFAULT_FIT_SEED,
                   help=f"random seed of the --fit-model sample (default {DEFAULT_FIT_SEED})")
    return p


def problems_of(args: argparse.Namespace) -> list:
    """The problems the arguments name; TuneError for bad ones."""
    from ..problem import Problem, parse_shape

    if args.kernel != TUNED_KERNEL:
        raise TuneError(f"{args.kernel!r} cannot be tuned; the tunable rung is {TUNED_KERNEL}")
    if min(args.candidates, args.confirm, args.batch, args.rounds, args.fit_shapes) < 1:
        raise TuneError("--candidates, --confirm, --rounds, --fit-shapes and --batch must be "
                        "positive")
    if not args.shape and not args.fit_model:
        raise TuneError("name a problem (--shape MxNxK) or ask for --fit-model")
    out = []
    for text in args.shape or ():
        try:
            m, n, k = parse_shape(text)
            out.append(Problem(m, n, k, args.batch, args.layout))
        except ValueError as exc:
            raise TuneError(f"--shape {text!r}: {exc}") from None
    return out


def run(args: argparse.Namespace, console) -> int:
    try:
        return _tune(args, console)
    except TuneError as exc:  # bad input to tune (shape, kernel, no GPU)
        raise UsageError(str(exc)) from None


def _tune(args: argparse.Namespace, console) -> int:
    from .. import catalogue

    problems = problems_of(args)
    kernel = catalogue.get(TUNED_KERNEL)
    if kernel.reason:
        raise TuneError(f"{kernel.id} cannot run here: {kernel.reason}")
    status = 0
    if args.fit_model:
        status |= _fit(args, console)
    if problems:
        status |= _search(args, problems, console)
    return status


def _fit(args: argparse.Namespace, console) -> int:
    """Sample, time, fit, score on the held-back shapes, store."""
    from ..tuner import fit_model

    def progress(text: str) -> None:
        console.print(text, markup=False, highlight=False)

    done = fit_model(args.fit_shapes, args.seed, args.candidates, progress)
    held = done["report"].get("held_out", {})
    for which in ("start", "fitted"):
        if which in held:
            a = held[which]
            console.print(f"held-back shapes, {which} parameters: the pick is the fastest on "
                          f"{a['top1']:.0%}, within 3% on {a['within_3pct']:.0%}, worst "
                          f"{a['worst_loss']:.1%} slower; {a['pair_order']:.0%} of pairs "
                          "ordered right")
    console.print(f"model stored in {done['path']}")
    return 0


def _search(args: argparse.Namespace, problems: list, console) -> int:
    """Tune every problem; print a table; 0 when all were searched."""
    from rich.table import Table

    from ..tuner import tune_problem

    table = Table(title=f"mmsuite tune {TUNED_KERNEL}")
    for column in ("problem", "candidates", "skipped", "model's plan", "ms", "fastest",
                   "ms", "ratio per round", "stored"):
        table.add_column(column)
    status, path = 0, None
    outcomes: list[dict] = []
    for index, problem in enumerate(problems, 1):
        label = f"{problem.m}x{problem.n}x{problem.k}" + (
            f" batch {problem.batch}" if problem.batch > 1 else "")

        def progress(text: str, label: str = label, index: int = index) -> None:
            console.print(f"[{index}/{len(problems)}] {label}: {text}", markup=False,
                          highlight=False)

        try:
            done = tune_problem(problem, args.candidates, args.confirm, progress,
                                rounds=args.rounds)
        except RuntimeError as exc:
            progress(f"not tuned: {exc}")
            status = 1
            continue
        path = done["path"]
        skipped = sum(1 for o in done["outcomes"] if o.skipped)
        outcomes.append(outcome_record(problem, done))
        model_plan = done["model"]
        stored = (f"{done['best']}" if done["entry"] else
                  "none: no gain beyond the noise")
        table.add_row(label, str(len(done["outcomes"])), str(skipped),
                      f"{model_plan['config']}/{model_plan['split']}",
                      f"{done['model_ms']:.4f}", done["best"], f"{done['best_ms']:.4f}",
                      f"{done['ratio']:.3f} (p80 {done['ratio'] + done['uncertainty']:.3f})",
                      stored)
    console.print(table)
    if path:
        console.print(f"stored in {path}")
    if args.json:
        from ..results import write_atomically

        write_atomically(args.json, json.dumps({"kernel": TUNED_KERNEL, "tuned": outcomes},
                                               indent=1) + "\n")
    return status


def outcome_record(problem, done: dict) -> dict:
    """One tuned problem for ``--json``: its sizes, the model's plan and its median time in
    the interleaved rounds, the fastest plan of those rounds (the model's own when none
    beat it) and its time, and whether an entry was stored."""
    faster = done["best_ms"] < done["model_ms"]
    model = done["model"]
    return {"problem": {"m": problem.m, "n": problem.n, "k": problem.k,
                        "batch": problem.batch, "layout": problem.layout},
            "key": done["key"], "model": model, "model_ms": done["model_ms"],
            "best": done["best"] if faster else f"{model['config']}/{model['split']}",
            "best_ms": min(done["best_ms"], done["model_ms"]), "ratio_per_round": done["ratio"],
            "stored": done["entry"] is not None,
            "candidates": len(done["outcomes"]),
            "skipped": sum(1 for o in done["outcomes"] if o.skipped)}
