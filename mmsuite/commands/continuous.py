"""``mmsuite continuous BASE HEAD``: build two revisions, measure every selected kernel x
problem in both, alternately, and judge each row from the paired rounds (the CI gate).

Exit status: 1 when a row is slower beyond the threshold or broke (with ``--strict``,
also when one stayed unsure), 0 otherwise, 2 for bad input (an unknown revision, a
revision that fails to build), 130 (143) when Ctrl-C (SIGTERM) ends it: the finished
rows are judged, shown and saved.

With ``--plugin RELPATH`` the revisions are the user's: BASE and HEAD of ``--repo`` (a
repository of plugin files, ``RELPATH`` relative to its root) are exported and measured
with this mmsuite, fixed, so that only the plugin's code differs between the sides.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table

from .. import (
    builds,
    continuous,
    continuous_journal,
    environment,
    plugins,
    results,
    verdicts,
    workers,
)
from ..backends import RunOptions, unavailable_reason
from ..continuous import ORDERS, ContinuousRow, Settings
from ..continuous_plan import BUSY_MODES, TimePool
from .common import (
    UsageError,
    add_device_arguments,
    add_problem_arguments,
    add_selection_arguments,
    add_verdict_arguments,
    check_distinct_outputs,
    check_omp_env,
    check_output_file,
    check_selectors,
    lock_results,
    output_file,
    plugin_relpaths,
    positive_float,
    problems_from_args,
    select_kernels,
)
from .signals import Terminated, deferred_signals, raise_terminated

if TYPE_CHECKING:
    from rich.console import JustifyMethod

    from ..catalogue import Kernel
    from ..problem import Problem

#: ``--plugin`` names files of ``--repo``'s revisions, not of the working directory: the
#: command line leaves them to this command.
READS_PLUGIN_PATHS = True
#: The exit status of a bug (with its traceback): 1 is this command's verdict, "slower".
EXIT_ON_BUG = 3


def add_parser(sub) -> argparse.ArgumentParser:
    defaults = Settings()
    p = sub.add_parser(
        "continuous", help="measure two git revisions side by side; exit 1 on a slowdown",
        description="Build BASE and HEAD (git revisions) once each, measure every selected "
        "kernel x problem in both, in alternating rounds of random order, and judge each "
        "row by the interval of the per-round ratio HEAD/BASE. Exit 1 on a slower or "
        "broken row (--strict: also unsure), 0 otherwise, 2 for bad input.")
    p.add_argument("base", metavar="BASE", help="the revision to compare against, e.g. main")
    p.add_argument("head", metavar="HEAD", help="the revision under test, e.g. HEAD")
    p.add_argument("--repo", type=Path, default=Path("."),
                   help="the git repository the revisions are in (default: here); with "
                   "--plugin, your repository of plugins")
    add_selection_arguments(p)
    add_problem_arguments(p)
    gate = p.add_argument_group("verdict")
    add_verdict_arguments(
        gate, defaults.threshold, defaults.confidence, defaults.max_seconds,
        "seconds of rounds per row, both sides together, pooled: rows of identical code "
        "are settled first, and the changed rows share what they leave")
    gate.add_argument("--round-time", type=positive_float, default=defaults.round_seconds,
                      metavar="S", help="each side's turn in a round, at least one sample "
                      "(default %(default)s)")
    gate.add_argument("--order", choices=ORDERS, default=defaults.order,
                      help="which side goes first in each round: random (default) or abba")
    gate.add_argument("--duet", action="store_true",
                      help="measure rows that run on one thread (sequential CPU rungs, or "
                      "any with --threads 1) on both sides at once, each on a CPU of its own")
    gate.add_argument("--on-busy-machine", choices=BUSY_MODES, default=defaults.busy,
                      metavar="MODE",
                      help="where other processes leave fewer cores free than a C row's "
                      "threads (read when the row starts): turns runs each side on the free "
                      "cores' threads, in turns; at-once, the same with both sides at once; "
                      "as-asked, --threads (or every CPU) in turns, whatever the load "
                      "(default %(default)s)")
    gate.add_argument("--judge-identical", action="store_true",
                      help="judge rows whose code is identical on both sides by their times "
                      "too (by default they are 'same (identical code)')")
    gate.add_argument("--strict", action="store_true",
                      help="fail (exit 1) when a row stays unsure, too")
    meas = p.add_argument_group("measurement")
    add_device_arguments(meas)
    out = p.add_argument_group("output")
    out.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                     help=f"where builds are kept, one per commit (default "
                     f"{builds.default_cache()})")
    out.add_argument("--json", type=output_file, metavar="FILE",
                     help="write HEAD's rows here and BASE's beside it (FILE's name with "
                     ".base before .json); compare and report read both")
    out.add_argument("--verdict-json", type=output_file, metavar="FILE",
                     help="write every verdict as JSON")
    out.add_argument("--junit", type=output_file, metavar="FILE",
                     help="write the verdicts as JUnit XML for a CI test report")
    out.add_argument("--resume", action="store_true",
                     help="finish the gate that a kill or Ctrl-C cut short: keep the rows "
                     "its journal (--json's FILE.jsonl) holds, measure the rest")
    return p


def base_path(path: Path) -> Path:
    """Where BASE's rows go beside ``--json``: ``x.json`` -> ``x.base.json``."""
    return path.with_name(path.stem + ".base" + (path.suffix or ".json"))


def _log(text: str) -> None:
    print(f"mmsuite: {text}", file=sys.stderr, flush=True)


def _plugin_revisions(args: argparse.Namespace, cache: Path) -> dict[str, builds.Build]:
    """BASE and HEAD of the user's plugin repository, exported; HEAD's plugins loaded here,
    where the rows are chosen (each side's worker loads its own)."""
    relpaths = plugin_relpaths(args, "continuous", "revisions")
    exported = {}
    for side, revision in (("BASE", args.base), ("HEAD", args.head)):
        try:
            exported[side] = builds.export_plugins(args.repo, revision, cache, relpaths)
        except builds.RevisionError as exc:
            raise UsageError(f"{side}: {exc}") from None
    plugins.use(exported["HEAD"].plugin_paths)
    plugins.load_configured()
    return exported


def run(args: argparse.Namespace, console: Console) -> int:
    cache = args.cache_dir or builds.default_cache()
    exported = _plugin_revisions(args, cache) if args.plugin else None
    problems = problems_from_args(args)
    kernels = select_kernels(args.backend, args.kernel, with_parents=False)
    options = RunOptions(threads=args.threads, cl_device=args.cl_device, l2=args.l2)
    check_selectors(kernels, options)
    # What `run` checks before it measures: both sides' workers would otherwise fail every
    # row alike and the gate pass, having measured nothing.
    check_omp_env()
    for problem in problems:
        try:
            workers.check_host_memory(problem)
        except workers.HostMemoryError as exc:
            raise UsageError(str(exc)) from None
    for option, path in (("--json", args.json), ("--verdict-json", args.verdict_json),
                         ("--junit", args.junit)):
        check_output_file(option, path)
    if args.json is not None:
        check_output_file("--json's BASE file", base_path(args.json))
        check_output_file("--json's journal", results.journal_path(args.json))
    check_distinct_outputs([
        ("--json", args.json), ("--json's BASE file", base_path(args.json) if args.json
                                else None),
        ("--verdict-json", args.verdict_json), ("--junit", args.junit)])
    runnable = [k for k in kernels if not unavailable_reason(k, options)]
    if not runnable:
        raise UsageError("nothing selected can run here; see `mmsuite list`")
    skipped = len(kernels) - len(runnable)
    settings = Settings(threshold=args.threshold, confidence=args.confidence,
                        max_seconds=args.max_time, round_seconds=args.round_time,
                        order=args.order, judge_identical=args.judge_identical,
                        duet=args.duet, busy=args.on_busy_machine)
    if args.duet and continuous.duet_cpus() is None:
        raise UsageError("--duet needs two CPUs this process may run on")
    lock = _own_journal(args)
    try:
        return _gate(args, console, cache, exported, problems, runnable, skipped, options,
                     settings)
    finally:
        if lock is not None:
            lock.release()


def _own_journal(args: argparse.Namespace) -> results.Lock | None:
    """Take --json's lock for the gate's life; refuse to start over the journal of a gate
    that was cut short unless resuming it (its rows are never wiped), and to resume one
    that is not there."""
    if args.json is None:
        if args.resume:
            raise UsageError("--resume finishes the gate whose journal is beside --json FILE: "
                             "give the --json of the gate that was cut short")
        return None
    lock, journal, left = lock_results(args.json)
    if args.resume and not journal.exists():
        lock.release()
        raise UsageError(f"--resume: no journal at {journal}: no gate writing {args.json} "
                         f"was cut short")
    if left and not args.resume:
        lock.release()
        raise UsageError(f"{journal} holds {left} rows of a gate that was cut short; finish "
                         f"it with --resume, or move {journal} away to start over")
    return lock


def _gate(args: argparse.Namespace, console: Console, cache: Path,
          exported: dict[str, builds.Build] | None, problems: list[Problem],
          runnable: list[Kernel], skipped: int, options: RunOptions, settings: Settings) -> int:
    """Build both revisions, measure the rows (those a resumed journal lacks), show and
    save them; --json's lock is held."""
    built = exported or {}
    for side, revision in (("BASE", args.base), ("HEAD", args.head)):
        try:
            builds.resolve(args.repo, revision)
        except builds.RevisionError as exc:
            raise UsageError(f"{side}: {exc}") from None
    dirty = builds.uncommitted_changes(args.repo)
    if dirty:
        _log(f"warning: {len(dirty)} files with uncommitted changes ({dirty[0]}, ...) are "
             f"not measured: each side is its committed revision")
    for side, revision in (("BASE", args.base), ("HEAD", args.head)):
        if side in built:
            continue
        try:
            built[side] = builds.build(args.repo, revision, cache, log=_log)
        except builds.BuildError as exc:
            raise UsageError(f"{side}: {exc}") from None
    base, head = built["BASE"], built["HEAD"]
    worker_options = {"threads": options.threads, "cl_device": options.cl_device,
                      "l2": options.l2}
    gate = continuous.Gate(base, head, worker_options, settings, logs=head.root)
    todo = [ContinuousRow(k, p) for p in problems for k in runnable]
    identity = continuous_journal.gate_identity(base.commit, head.commit, settings,
                                                worker_options, todo)
    pairs, journal, unspent = _journaled(args, identity)
    # The selection's time, pooled; a resumed gate's rows spent theirs (the journal says
    # how much of their own they left unspent).
    pool = TimePool.for_rows(len(todo), settings.max_seconds)
    pool.spend(len(pairs) * settings.max_seconds - unspent)
    _log(f"BASE {base.revision} = {base.short}, HEAD {head.revision} = {head.short}; "
         f"{len(runnable) * len(problems)} rows ({skipped} unavailable kernels left out), "
         f"{settings.max_seconds:g} s each, pooled: rows of identical code first, the "
         f"changed rows share what they leave")
    if pairs:
        _log(f"resumed: {len(pairs)} of {len(todo)} rows finished before, the rest measured "
             f"now")
    if gate.duet_cpus is not None:
        duets = sum(gate.in_duet(pair.kernel) for pair in todo)
        cpus = " and ".join(map(str, gate.duet_cpus))
        _log(f"duet: {duets} of {len(todo)} rows run on one thread and are measured on both "
             f"sides at once, on CPUs {cpus}; the others in turns")
    interrupted, deferred, saved = 0, [], False
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        try:
            done = {pair.label for pair in pairs}
            rest = [pair for pair in todo if pair.label not in done]
            for index, pair in enumerate(gate.measure_all(rest, pool), len(pairs) + 1):
                pairs.append(pair)
                if journal is not None:  # kept the moment it is judged: a kill spares it
                    unspent = len(pairs) * settings.max_seconds - pool.spent
                    continuous_journal.append(journal, pair, unspent)
                how = pair.how()
                _log(f"[{index}/{len(todo)}] {pair.label}: "
                     f"{_verdict_text(pair)} {continuous.ratio_text(pair)} "
                     f"[{continuous.interval_text(pair)}] ({_spent_text(pair)}"
                     + (f"; {how}" if how else "") + ")")
        except continuous.BuildDamaged as exc:
            raise UsageError(f"{exc}: delete the build's folder, or give --cache-dir") \
                from None
        except (KeyboardInterrupt, Terminated) as exc:
            interrupted = 143 if isinstance(exc, Terminated) else 130
            under_way = gate.current
            if under_way is not None and under_way.base.rounds and \
                    all(pair is not under_way for pair in pairs):
                pairs.append(under_way)  # shown and saved as cut short, never journaled
        # Rows of identical code were measured first: shown and saved in the selection's order
        place = {pair.label: index for index, pair in enumerate(todo)}
        pairs.sort(key=lambda pair: place[pair.label])
        # From the last row on, a Ctrl-C (SIGTERM) waits for the table and the files.
        with deferred_signals() as deferred:
            gate.close()
            render(pairs, settings, console)
            rows = [p.verdict_row() for p in pairs]
            console.print(verdicts.summary_line(rows), highlight=False)
            saved = _save(args, pairs, base, head, settings, options, console)
            if journal is not None:
                journal.close()
                if saved and len(pairs) == len(todo) and \
                        not any(p.interrupted for p in pairs):
                    # The files hold every row: the journal's work is done.
                    results.journal_path(args.json).unlink(missing_ok=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
        gate.close()
        if journal is not None:
            journal.close()
    if not saved:
        return 2
    if deferred and not interrupted:
        _log("interrupted while saving; every row was saved")
        return 130 if deferred[0] == signal.SIGINT else 143
    if interrupted:
        hint = "; run the same command with --resume to finish" if args.json else ""
        _log(f"interrupted after {len(pairs)} of {len(todo)} rows; their finished rounds "
             f"are shown and saved above{hint}")
        return interrupted
    return continuous.exit_status(pairs, args.strict)


def _journaled(args: argparse.Namespace, identity: dict,
               ) -> tuple[list[ContinuousRow], results.Journal | None, float]:
    """The rows a resumed journal holds, the journal this gate appends to (none without
    --json), and the seconds of their own the resumed rows left unspent."""
    if args.json is None:
        return [], None, 0.0
    path = results.journal_path(args.json)
    done: list[tuple[ContinuousRow, float]] = []
    if args.resume:
        try:
            done = continuous_journal.read(path, identity)
        except continuous_journal.JournalError as exc:
            raise UsageError(f"--resume: {exc}") from None
    unspent = done[-1][1] if done else 0.0
    try:
        journal = continuous_journal.open_journal(path, identity, done)
    except OSError as exc:
        raise UsageError(results.write_error(exc)) from None
    return [pair for pair, _ in done], journal, unspent


def _verdict_text(pair: ContinuousRow) -> str:
    if pair.verdict == "same" and pair.reason == "identical code":
        return "same (identical code)"
    return pair.verdict


def _spent_text(pair: ContinuousRow) -> str:
    """``84 rounds in 14.2 s of 14.6``: the row's rounds, their seconds and its budget."""
    return f"{pair.paired_rounds} rounds in {pair.rounds_seconds:.1f} s of {pair.budget:.1f}"


def render(pairs: list[ContinuousRow], settings: Settings, console: Console) -> None:
    """A table per problem (kernel, BASE ms, HEAD ms, ratio, interval, verdict), the reason
    of every row that is not plainly same, and a count of the unsure ones."""
    console.print(f"HEAD / BASE, {settings.confidence:.0%} interval, threshold "
                  f"{settings.threshold:.0%}", highlight=False)
    notes = []
    for problem in dict.fromkeys(pair.problem for pair in pairs):
        # Drawn as run's table is, to fit 80 columns: no frame, the problem as the title,
        # ids and figures whole; only the verdict may wrap, between its words.
        table = Table(title=problem.shape_label, title_justify="left", box=box.SIMPLE_HEAD,
                      show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
                      collapse_padding=True)
        columns: tuple[tuple[str, JustifyMethod], ...] = (
            ("kernel", "left"), ("BASE ms", "right"), ("HEAD ms", "right"),
            ("ratio", "right"), ("interval", "right"), ("verdict", "left"))
        for name, justify in columns:
            table.add_column(name, justify=justify, no_wrap=name != "verdict")
        for pair in (p for p in pairs if p.problem == problem):
            marker = ""
            if pair.verdict != "same" or pair.reason != "identical code" and not \
                    pair.reason.startswith("whole interval within"):
                notes.append(f"{pair.label}: {pair.reason}")
                marker = f" [{len(notes)}]"
            table.add_row(pair.kernel.id, _ms(pair.base.median_ms), _ms(pair.head.median_ms),
                          continuous.ratio_text(pair), continuous.interval_text(pair),
                          _verdict_text(pair) + marker)
        console.print(table)
    for number, note in enumerate(notes, 1):
        console.print(f"[{number}] {note}", highlight=False)
    for line in how_lines(pairs):
        console.print(line, highlight=False)
    unsure = [p for p in pairs if p.verdict == "unsure"]
    if unsure:
        console.print(f"{len(unsure)} of {len(pairs)} rows stayed unsure (see their reasons "
                      f"above); --strict makes that fail the gate", highlight=False)


def how_lines(pairs: list[ContinuousRow]) -> list[str]:
    """How the rows were measured where not as asked in turns (``measured with threads 2 → 1
    (0.9 of 2 cores free): cpu.omp_tiled @ 768x768x768``), and where the time went: rows
    settled first, the rounds and seconds of the others."""
    groups: dict[str, list[str]] = {}
    for pair in pairs:
        how = pair.how()
        if how:
            groups.setdefault(how, []).append(pair.label)
    lines = [f"measured with {how}: {', '.join(rows)}" for how, rows in groups.items()]
    settled = [p for p in pairs if p.settled_first]
    changed = [p for p in pairs if not p.settled_first]
    if settled and changed:
        spent = sum(p.rounds_seconds for p in settled)
        lines.append(f"time: {len(settled)} rows settled first ({spent:.1f} s of rounds); "
                     + ", ".join(f"{p.label} {_spent_text(p)}" for p in changed))
    return lines


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _save(args: argparse.Namespace, pairs: list[ContinuousRow], base: builds.Build,
          head: builds.Build, settings: Settings, options: RunOptions,
          console: Console) -> bool:
    """Write every output asked for; False (with one line naming the path, and the
    journal kept for --resume) where one cannot be written."""
    try:
        _write(args, pairs, base, head, settings, options, console)
    except OSError as exc:
        if exc.filename is None:  # standard output, not a file: the command line's to say
            raise
        _log(f"error: {results.write_error(exc)}")
        if args.json is not None and results.journal_path(args.json).exists():
            _log(f"{results.journal_path(args.json)} keeps the finished rows: once the "
                 f"outputs can be written, run the same command with --resume")
        return False
    return True


def _write(args: argparse.Namespace, pairs: list[ContinuousRow], base: builds.Build,
           head: builds.Build, settings: Settings, options: RunOptions,
           console: Console) -> None:
    if args.json is not None:
        env = environment.collect(sorted({p.kernel.backend for p in pairs}), options)
        common = {"continuous": {"base": base.commit, "head": head.commit,
                                 "threshold": settings.threshold,
                                 "confidence": settings.confidence,
                                 "max_seconds": settings.max_seconds,
                                 "round_seconds": settings.round_seconds,
                                 "order": settings.order, "duet": settings.duet},
                  "problems": [p.to_dict() for p in dict.fromkeys(q.problem for q in pairs)]}
        for path, side, build in ((base_path(args.json), "base", base),
                                  (args.json, "head", head)):
            records = [continuous.side_record(p, side, build) for p in pairs]
            results.save(path, records, env, {**common, "revision": build.revision})
        console.print(f"results written to {args.json} (HEAD) and {base_path(args.json)} "
                      f"(BASE)", highlight=False)
    rows = [p.verdict_row() for p in pairs]
    extra = {"base": base.commit, "head": head.commit, "confidence": settings.confidence}
    if args.verdict_json is not None:
        verdicts.write_verdict_json(args.verdict_json, rows, threshold=settings.threshold,
                                    extra=extra)
        console.print(f"verdicts written to {args.verdict_json}", highlight=False)
    if args.junit is not None:
        verdicts.write_junit(args.junit, rows, suite="mmsuite continuous",
                             threshold=settings.threshold)
        console.print(f"JUnit XML written to {args.junit}", highlight=False)
