"""``mmsuite bisect GOOD BAD --kernel K --shape S``: the first commit that made a row slower,
by ``continuous``'s paired verdicts (:mod:`mmsuite.bisection`).

Exit status: 0 when the commit is found, 1 when the search could not name one (BAD not
slower than GOOD, a step that stayed unsure or broke), 2 for bad input.

With ``--plugin RELPATH`` the commits are the user's, as with ``continuous``: each is
exported from ``--repo`` (a repository of plugin files, ``RELPATH`` relative to its root)
and its kernels measured with this mmsuite, fixed, so that only the plugin's code differs
between the sides.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from .. import bisection, builds, catalogue, continuous, plugins
from ..backends import RunOptions, unavailable_reason
from ..continuous import ContinuousRow, Settings
from .common import (
    UsageError,
    add_device_arguments,
    add_problem_arguments,
    add_verdict_arguments,
    plugin_relpaths,
    problems_from_args,
)

#: ``--plugin`` names files of ``--repo``'s commits, not of the working directory: the
#: command line leaves them to this command.
READS_PLUGIN_PATHS = True


def add_parser(sub) -> argparse.ArgumentParser:
    defaults = Settings()
    p = sub.add_parser(
        "bisect", help="find the commit that made a kernel slower, by paired verdicts",
        description="Halve the first-parent commits from GOOD (excluded) to BAD, measuring "
        "each against the last commit known good as `continuous` does; an unsure step is "
        "measured again for longer. Prints the first slower commit and every verdict. "
        "Exit 0 when found, 1 when no commit could be named, 2 for bad input.")
    p.add_argument("good", metavar="GOOD", help="a revision where the row was fast")
    p.add_argument("bad", metavar="BAD", help="a later revision where it is slow")
    p.add_argument("--repo", type=Path, default=Path("."),
                   help="the git repository the revisions are in (default: here); with "
                   "--plugin, your repository of plugins")
    p.add_argument("--kernel", required=True, metavar="ID", help="the kernel, e.g. cpu.omp_tiled")
    add_problem_arguments(p)
    gate = p.add_argument_group("verdicts")
    add_verdict_arguments(
        gate, defaults.threshold, defaults.confidence, defaults.max_seconds,
        "seconds of rounds of each step's first run; an unsure step runs again with twice, "
        "then four times that")
    meas = p.add_argument_group("measurement")
    add_device_arguments(meas)
    p.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help=f"where builds are kept (default {builds.default_cache()})")
    return p


def _log(text: str) -> None:
    print(f"mmsuite: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace, console: Console) -> int:
    problems = problems_from_args(args)
    if len(problems) != 1:
        raise UsageError("bisect follows one problem: give one --shape")
    relpaths = plugin_relpaths(args, "bisect", "commits")
    cache = args.cache_dir or builds.default_cache()
    if relpaths:  # BAD's plugins name the kernel here; each side's worker loads its own
        try:
            plugins.use(builds.export_plugins(args.repo, args.bad, cache, relpaths).plugin_paths)
        except (builds.RevisionError, builds.BuildError) as exc:
            raise UsageError(f"BAD: {exc}") from None
        plugins.load_configured()
    try:
        kernel = catalogue.get(args.kernel)
    except KeyError as exc:
        raise UsageError(str(exc.args[0] if exc.args else exc)) from None
    options = RunOptions(threads=args.threads, cl_device=args.cl_device, l2=args.l2)
    reason = unavailable_reason(kernel, options)
    if reason:
        raise UsageError(f"{kernel.id} cannot run here: {reason}")
    commits = {}
    for side, revision in (("GOOD", args.good), ("BAD", args.bad)):
        try:
            commits[side] = builds.resolve(args.repo, revision)
        except builds.RevisionError as exc:
            raise UsageError(f"{side}: {exc}") from None
    between = builds.first_parent_line(args.repo, commits["GOOD"], commits["BAD"])
    if between is None:
        raise UsageError(f"GOOD {commits['GOOD'][:10]} is not an ancestor of BAD "
                         f"{commits['BAD'][:10]}")
    settings = Settings(threshold=args.threshold, confidence=args.confidence,
                        max_seconds=args.max_time)
    worker_options = {"threads": options.threads, "cl_device": options.cl_device,
                      "l2": options.l2}
    problem = problems[0]

    def judge(good: str, candidate: str, settings: Settings) -> ContinuousRow:
        built = []
        for commit in (good, candidate):
            try:
                built.append(builds.export_plugins(args.repo, commit, cache, relpaths) if relpaths
                             else builds.build(args.repo, commit, cache, log=_log))
            except (builds.BuildError, builds.RevisionError) as exc:
                raise UsageError(str(exc)) from None
        gate = continuous.Gate(built[0], built[1], worker_options, settings,
                               logs=built[1].root)
        try:
            pair = gate.measure(ContinuousRow(kernel, problem))
        finally:
            gate.close()
        _log(bisection.step_line(bisection.step_of(good, candidate, settings, pair)))
        return pair

    _log(f"{len(between)} commits after GOOD {commits['GOOD'][:10]} up to BAD "
         f"{commits['BAD'][:10]}; {kernel.id} @ {problem.shape_label}")
    outcome = bisection.search(between, commits["GOOD"], judge, settings)
    for number, step in enumerate(outcome.steps, 1):
        console.print(f"{number}. {bisection.step_line(step)}", highlight=False,
                      soft_wrap=True)
    if outcome.first_bad is None:
        console.print(f"no commit named after {outcome.runs} runs: {outcome.why}",
                      highlight=False, soft_wrap=True)
        return 1
    subject = builds.subject(args.repo, outcome.first_bad)
    console.print(f"first slower commit: {outcome.first_bad} {subject} (after "
                  f"{outcome.last_good[:10]}; {outcome.runs} continuous runs)",
                  highlight=False, soft_wrap=True)
    return 0
