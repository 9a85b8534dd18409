"""``mmsuite run``: select kernels and problems, measure and verify them, print the ladder
table and save the results."""

from __future__ import annotations

import argparse
import signal
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console

from .. import cluster, environment, load, peak, report, results, roof, workers
from ..backend_table import BACKENDS, HOST
from ..backends import RunOptions, get_backend, unavailable_reason
from ..catalogue import Kernel
from ..catalogue import kernels as catalogue_kernels
from ..host import allowed_cpus
from ..measure import CLI_SAMPLING, CPU_NOISE_TARGET, DEFAULT_WARMUP, Sampling
from ..problem import Problem
from ..sweep import RunContext, SweepHooks, SweepRow, row_key, sweep
from .common import (
    UsageError,
    add_all_rows_argument,
    add_device_arguments,
    add_problem_arguments,
    add_selection_arguments,
    check_omp_env,
    check_output_file,
    check_output_folder,
    check_selectors,
    device_list,
    lock_results,
    non_negative_float,
    non_negative_int,
    output_file,
    positive_float,
    positive_int,
    problems_from_args,
    select_kernels,
    warn,
)
from .progress import RunProgress
from .signals import Terminated, deferred_signals, raise_terminated


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("run", help="run, verify and time kernels; print the ladder table")
    add_selection_arguments(p)
    add_problem_arguments(p)
    meas = p.add_argument_group("measurement")
    meas.add_argument("--repeats", type=positive_int, metavar="N",
                      help="exactly N samples per kernel, whatever the noise (default: the "
                           "stopping rule below)")
    meas.add_argument("--min-samples", type=positive_int, default=CLI_SAMPLING.min_samples,
                      metavar="N", help="stopping rule: at least N samples (default %(default)s)")
    meas.add_argument("--min-time", type=non_negative_float, default=CLI_SAMPLING.min_seconds,
                      metavar="S", help="stopping rule: at least S seconds of samples "
                                        "(default %(default)s)")
    meas.add_argument("--max-noise", type=non_negative_float, metavar="PCT",
                      help="stopping rule: until the robust noise is below PCT %% on every "
                           f"device (default {100 * CLI_SAMPLING.noise_target:g} on GPUs, "
                           f"{100 * CPU_NOISE_TARGET:g} on CPUs, what a quiet "
                           "machine reaches); rows left above it are marked noisy (!)")
    meas.add_argument("--max-time", type=positive_float, default=CLI_SAMPLING.max_seconds,
                      metavar="S", help="stopping rule: at most S seconds of samples per kernel, "
                                        f"once it has {CLI_SAMPLING.verdict_samples} (what "
                                        "compare needs; default %(default)s; NVBench uses 15)")
    add_device_arguments(meas)
    meas.add_argument("--warmup", type=non_negative_int, default=DEFAULT_WARMUP,
                      help="untimed launches before the samples (default %(default)s)")
    meas.add_argument("--pinned", action="store_true",
                      help="page-locked host buffers for GPU transfers")
    meas.add_argument("--energy", action="store_true",
                      help="energy per GEMM (J, GFLOP/J) from NVML's energy counter: at least "
                      "1 s of launches per row, idle power measured once and taken off")
    meas.add_argument("--profile", action="store_true",
                      help="add registers, shared memory and spill bytes (CUDA)")
    meas.add_argument("--devices", type=device_list, metavar="all|0,1,...",
                      help="GPUs to spread the CUDA kernels over, one worker each (default 0)")
    meas.add_argument("--timeout", type=positive_float, metavar="SECONDS",
                      help="per GPU kernel; its worker is killed past it (default: "
                           f"{workers.TIMEOUT_FLOOR_S:.0f} s plus {workers.TIMEOUT_LAUNCHES} "
                           "launches at 10 GFLOP/s)")
    meas.add_argument("--cluster", metavar="ADDRESS|FILE",
                      help="run each kernel x problem as a task on this Dask scheduler's "
                           "workers (`mmsuite worker`); a scheduler address or file")
    out = p.add_argument_group("output")
    out.add_argument("--json", type=output_file, metavar="FILE",
                     help="write the results here; rows also go to FILE.jsonl as they finish")
    out.add_argument("--resume", type=output_file, metavar="FILE",
                     help="skip what FILE (a results file or its .jsonl) already measured; "
                          "results go to --json, by default FILE, with every row of FILE")
    out.add_argument("--retry-crashed", action="store_true",
                     help="with --resume: run again the kernels that crashed their worker")
    out.add_argument("--markdown", type=output_file, metavar="FILE",
                     help="write the tables as Markdown")
    out.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots here")
    out.add_argument("--report", type=Path, metavar="DIR",
                     help="write the HTML/Markdown/CSV report here (and results.json)")
    out.add_argument("--wide", action="store_true",
                     help="print every column, reasons inline (the default table fits 80 columns)")
    add_all_rows_argument(out)

    return p


def _collapse_unavailable(rows: list[SweepRow],
                          explicit: set[str]) -> tuple[list[SweepRow], list[str]]:
    """Whole backends that are unavailable for one reason become one note, unless asked for."""
    by_backend: dict[str, list[SweepRow]] = defaultdict(list)
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


def _devices(requested: str | list[int] | None, kernels: list[Kernel],
             options: RunOptions) -> list[int]:
    """The GPUs that the kernels of an isolated backend (one worker per device: CUDA's) run
    on; ``--devices`` is checked only when they can run."""
    isolated = sorted({k.backend for k in kernels
                       if BACKENDS[k.backend].isolated and not unavailable_reason(k, options)})
    if requested is None or not isolated:
        return [0]
    count = min(get_backend(name, options).device_count() for name in isolated)
    if isinstance(requested, str):  # "all" (device_list gives no other text)
        return list(range(count))
    missing = [i for i in requested if i >= count]
    if missing:
        raise UsageError(f"--devices: no GPU {missing[0]}; this host has {count} "
                         f"(0 to {count - 1})")
    return list(requested)


def _nothing_can_run(kernels: list[Kernel], options: RunOptions) -> str:
    """Why none of the selected kernels can run here; empty when one can."""
    reasons: dict[str, str] = {}
    for kernel in kernels:
        reason = unavailable_reason(kernel, options)
        if not reason:
            return ""
        reasons.setdefault(reason, kernel.id)
    return "; ".join(f"{kernel}: {reason}" for reason, kernel in reasons.items())


def threads_note(records: list[dict], asked: int | None) -> str | None:
    """One line when threaded host rows ran with another number of threads than ``--threads``
    asked for (or, without it, than this process has CPUs); None when they match."""
    wanted = asked or allowed_cpus()
    threaded = {k.id for k in catalogue_kernels() if k.threaded}
    off: dict[int, list[str]] = defaultdict(list)
    for record in records:
        used = (record.get("info") or {}).get("threads")
        if record.get("kernel") in threaded and isinstance(used, int) and used != wanted:
            off[used].append(record["kernel"])
    if not off:
        return None
    what = f"the {wanted} --threads asked for" if asked else f"the {wanted} CPUs mmsuite may use"
    return "; ".join(f"{', '.join(dict.fromkeys(ids))} ran on {used} thread"
                     f"{'s' if used != 1 else ''}" for used, ids in sorted(off.items())) \
        + f", not {what}"


def _warn_if_cores_are_busy(kernels: list[Kernel], threads: int | None) -> None:
    """Before measuring: say so when other processes leave fewer cores free than the
    threaded host kernels will use. The run goes on: a busy machine still gets its table."""
    if not any(k.threaded and BACKENDS[k.backend].device == HOST for k in kernels):
        return
    cores = allowed_cpus()
    measured = load.free_cores(cores)
    if measured is not None:
        line = load.busy_cores_warning(threads or cores, cores, *measured)
        if line:
            warn(line)


def _check_outputs(context: RunContext) -> None:
    """Every output path is checked before the first kernel runs; folders the user named
    (--plots, --report) are created now, their parents never."""
    check_output_file("--json", context.json)
    if context.json is not None:
        check_output_file("--json's journal", results.journal_path(context.json))
    check_output_file("--markdown", context.markdown)
    check_output_folder("--plots", context.plots)
    check_output_folder("--report", context.report)


def _json_path(args: argparse.Namespace) -> Path | None:
    """--json; with ``--resume FILE`` and no --json, FILE's final results file."""
    if args.resume is not None and not args.resume.exists() \
            and not results.journal_path(args.resume).exists():
        raise UsageError(f"--resume: no such result file: {args.resume}")
    if args.resume is not None and args.json is None:
        name = args.resume.name
        return args.resume.with_name(name[:-1]) if name.endswith(".jsonl") else args.resume
    return args.json


def _own_results(context: RunContext) -> results.Lock | None:
    """Take --json's lock for the run's life, and refuse to start over a journal that an
    interrupted run left unless this run resumes it: its rows are never wiped."""
    if context.json is None:
        return None
    lock, journal, left = lock_results(context.json)
    resumes_it = context.resume is not None and context.resume in (context.json, journal)
    if left and not resumes_it:
        lock.release()
        raise UsageError(f"{journal} holds {left} rows of an interrupted run; finish it with "
                         f"--resume {context.json}, or move {journal} away to start over")
    return lock


def _resumed(context: RunContext) -> list[dict]:
    """The records of ``--resume FILE``, one per kernel and problem (a later row wins), and
    the rows the journal of --json holds beyond them (a resumed run killed in turn)."""
    if context.resume is None or context.json is None:  # --resume always sets --json
        return []
    source = context.resume
    journal = results.journal_path(source)
    if not source.exists() and source.suffix == ".json" and journal.exists():
        source = journal  # killed before the final file was written: its journal has the rows
    try:
        records = results.load_rows(source)
        own = results.journal_path(context.json)
        if own != source and results.unfinished_rows(own):
            records += results.load_rows(own)
    except results.ResultsError as exc:
        raise UsageError(f"--resume: {exc}") from None
    latest = {row_key(r["kernel"], r["problem"]): r for r in records}
    return list(latest.values())


def _check_local(args: argparse.Namespace, kernels: list[Kernel], options: RunOptions,
                 problems: list[Problem]) -> None:
    """What this host must offer before a local sweep starts."""
    check_selectors(kernels, options)
    why_not = _nothing_can_run(kernels, options)
    if why_not:
        raise UsageError(f"nothing requested can run here: {why_not}")
    for problem in problems:
        try:
            workers.check_host_memory(problem)
        except workers.HostMemoryError as exc:
            raise UsageError(str(exc)) from None


def _connect(target: str | None) -> cluster.Cluster | None:
    """The Dask cluster of ``--cluster``, its workers checked; None for a local run."""
    if target is None:
        return None
    try:
        return cluster.Cluster(target)
    except cluster.ClusterError as exc:
        raise UsageError(str(exc)) from None


def run(args: argparse.Namespace, console: Console) -> int:
    context = _context(args)
    _check_outputs(context)
    lock = _own_results(context)
    try:
        session = _connect(context.cluster)
        if session is None:  # every input is checked: the last word before measuring
            _warn_if_cores_are_busy(list(context.kernels), context.options.threads)
        return _measure_and_save(context, console, session)
    finally:
        if lock is not None:
            lock.release()


def _context(args: argparse.Namespace) -> RunContext:
    """What the run is asked for, built once from the arguments, each checked (UsageError
    for a bad one)."""
    problems = problems_from_args(args)
    kernels = select_kernels(args.backend, args.kernel)
    options = RunOptions(threads=args.threads, cl_device=args.cl_device, pinned=args.pinned,
                         profile=args.profile, l2=args.l2, energy=args.energy)
    # --max-noise sets one target for every device; without it, CPUs get their own.
    noise_target, cpu_noise_target = (
        (CLI_SAMPLING.noise_target, CLI_SAMPLING.cpu_noise_target) if args.max_noise is None
        else (args.max_noise / 100, None))
    sampling = None if args.repeats else Sampling(
        min_samples=args.min_samples, min_seconds=args.min_time, max_seconds=args.max_time,
        verdict_samples=min(args.min_samples, CLI_SAMPLING.verdict_samples),
        block_seconds=CLI_SAMPLING.block_seconds, name="cli",
        noise_target=noise_target, cpu_noise_target=cpu_noise_target)
    if sampling is not None and args.min_time > args.max_time:
        raise UsageError(f"--min-time {args.min_time} is above --max-time {args.max_time}")
    if args.cluster is None:  # with --cluster, each worker judges what it can run
        _check_local(args, kernels, options, problems)
    elif args.devices is not None:
        raise UsageError("--devices picks this host's GPUs; with --cluster every GPU worker "
                         "has its own")
    devices = _devices(args.devices, kernels, options) if args.cluster is None else []
    check_omp_env()
    return RunContext(
        tuple(kernels), tuple(problems), options, repeats=args.repeats, sampling=sampling,
        warmup=args.warmup, devices=tuple(devices), timeout=args.timeout,
        retry_crashed=args.retry_crashed, cluster=args.cluster,
        backends=tuple(args.backend or ()), resume=args.resume, json=_json_path(args),
        markdown=args.markdown, plots=args.plots, report=getattr(args, "report", None),
        wide=args.wide, all_rows=args.all_rows)


def _settings(context: RunContext) -> dict:
    """How the rows were measured, as the results file and its journal record it."""
    return {"repeats": context.repeats,
            "sampling": asdict(context.sampling) if context.sampling else None,
            "l2": context.options.l2, "warmup": context.warmup,
            "threads": context.options.threads, "cl_device": context.options.cl_device,
            "pinned": context.options.pinned, "profile": context.options.profile,
            "energy": context.options.energy, "devices": list(context.devices),
            "timeout": context.timeout, "cluster": context.cluster,
            "problems": [p.to_dict() for p in context.problems]}


@dataclass
class _Swept:
    """What a sweep leaves to show and save."""

    rows: list[SweepRow]  # in ladder order
    kept: list[dict]  # rows of --resume's file outside this run's selection, saved after
    settings: dict  # the results file's (``_settings``), and why the sweep stopped short
    interrupted: int = 0  # 130 (SIGINT) or 143 (SIGTERM): the exit status of a stopped run
    lost: str = ""  # why a cluster sweep stopped short (exit 2, with the --resume hint)
    workers: dict | None = None  # each cluster worker's host environment; None on one host


def _measure_and_save(context: RunContext, console: Console,
                      session: cluster.Cluster | None) -> int:
    """The sweep, its table and its outputs, with --json's lock held."""
    kernels, problems = context.kernels, context.problems
    resumed = _resumed(context)
    selected = {row_key(k.id, p.to_dict()) for p in problems for k in kernels}
    # Rows of --resume's file outside this selection stay in the output, after this run's.
    kept = [r for r in resumed if row_key(r["kernel"], r["problem"]) not in selected]
    journaled = {id(r) for r in resumed}

    settings = _settings(context)
    journal = results.Journal(results.journal_path(context.json), settings, resumed) \
        if context.json else None
    finished: list[SweepRow] = []
    with RunProgress(len(problems) * len(kernels)) as progress:

        def on_row(row: SweepRow) -> None:
            finished.append(row)
            if journal is not None and id(row.record) not in journaled:
                journal.append(row.to_record())  # saved as it finishes
            progress.finish(row)

        hooks = SweepHooks(on_row=on_row, on_start=progress.start, on_plan=progress.plan)
        interrupted, lost = 0, ""
        previous = signal.signal(signal.SIGTERM, raise_terminated)
        try:
            if session is None:
                rows = sweep(context, resume=resumed, hooks=hooks)
            else:
                rows = session.sweep(context, resume=resumed, hooks=hooks)
        except (KeyboardInterrupt, Terminated) as exc:
            # Keep every finished row, in ladder order, and save them like a full run.
            interrupted = 143 if isinstance(exc, Terminated) else 130
            position = {(k.id, p): i for i, (p, k) in
                        enumerate((p, k) for p in problems for k in kernels)}
            rows = sorted(finished, key=lambda r: position[(r.kernel.id, r.problem)])
            settings["interrupted"] = "SIGTERM" if interrupted == 143 else "SIGINT"
        except cluster.SchedulerLost as exc:
            # As an interruption: the finished rows are shown and saved, --resume runs the
            # rest; but an error of the cluster's, exit 2.
            rows, lost = exc.rows, str(exc)
            settings["interrupted"] = "scheduler lost"
        finally:
            signal.signal(signal.SIGTERM, previous)
            if session is not None:
                session.close()
    swept = _Swept(rows, kept, settings, interrupted, lost,
                   session.environments if session is not None else None)

    with deferred_signals() as deferred:  # a second Ctrl-C waits for the results file
        try:
            status = _report_and_save(context, console, swept, journal)
        finally:
            if journal is not None:
                journal.close()
    if deferred and not interrupted:
        print("mmsuite: interrupted while saving; every row was saved", file=sys.stderr)
        return 130 if deferred[0] == signal.SIGINT else 143
    return status


def _report_and_save(context: RunContext, console: Console, swept: _Swept,
                     journal: results.Journal | None) -> int:
    """Print the table, write every output; an OSError writing one is one line naming its
    path (exit 2), with the journal kept for --resume. A sweep that a cluster's loss
    stopped short exits 2, with the --resume hint."""
    rows, settings, options = swept.rows, swept.settings, context.options
    # --wide and --markdown: a backend unavailable as a whole is one note, not a row a
    # kernel; the default table puts every unavailable kernel under it, one line a reason.
    shown, notes = _collapse_unavailable(rows, set(context.backends))
    records = [row.to_record() for row in rows] + swept.kept
    shown_records = [row.to_record() for row in shown]
    table_records, table_notes = (shown_records, notes) if context.wide else \
        ([row.to_record() for row in rows], [])
    env = environment.collect(sorted({k.backend for k in context.kernels}), options)
    if swept.workers is not None:  # each worker's host, for its rows' peak and the report
        env["workers"] = swept.workers
    else:  # what each row's device was, for the backends that ran one worker per device
        for name, facts in (env.get("backends") or {}).items():
            if BACKENDS[name].isolated and facts and any(
                    r.kernel.backend == name and r.record for r in rows):
                facts["devices"] = get_backend(name, options).devices_environment(
                    list(context.devices))
    peak.annotate(records + shown_records, env)  # % peak; above 100% is a measurement error
    roof.annotate(records + shown_records, env)  # bytes, GB/s, % of the roofline's roof
    distorted = load.distortion_warning(records)
    if distorted:  # above the table, where the distorted figures are read
        warn(distorted)
    report.render_rich(table_records, console, wide=context.wide,
                       limit=report.row_limit(context.all_rows))
    for note in table_notes:
        console.print(note, style="dim")
    for warning in environment.warnings(env):
        warn(warning)
    threads = threads_note(records, options.threads)
    if threads:
        warn(threads)
    unwritten: list[OSError] = []
    if context.json:
        try:
            results.save(context.json, records, env, settings)
            # The journal only guarded the rows until this file held them; a save that
            # failed leaves it for --resume.
            results.journal_path(context.json).unlink(missing_ok=True)
            console.print(f"results written to {context.json}")
        except OSError as exc:
            unwritten.append(exc)
            if journal is not None and journal.error is not None:
                unwritten.append(journal.error)
    try:
        _write_other_outputs(context, console, records, shown_records, notes, env, settings)
    except OSError as exc:
        unwritten.append(exc)
    for error in unwritten:
        print(f"mmsuite: error: {results.write_error(error)}", file=sys.stderr)
    if unwritten:
        if context.json:
            print(f"mmsuite: {results.journal_path(context.json)} keeps the rows it could "
                  f"write: once {context.json} can be written, run the same command with "
                  f"--resume {context.json}", file=sys.stderr)
        return 2
    resume = f"; run the same command with --resume {context.json} to finish" \
        if context.json else ""
    if swept.lost:
        print(f"mmsuite: error: {swept.lost}{resume}", file=sys.stderr)
        return 2
    if swept.interrupted:
        total = len(context.problems) * len(context.kernels)
        print(f"mmsuite: interrupted after {len(rows)} of {total} rows{resume}",
              file=sys.stderr)
        return swept.interrupted
    if rows and all(r.status == "unavailable" for r in rows):  # found only when they ran
        print("mmsuite: error: nothing requested could run here (see the reasons above)",
              file=sys.stderr)
        return 2
    # peak.annotate marks a figure above the device's peak invalid: a measurement error.
    failed = [r for r in records if r["status"] in ("failed", "error", "crashed", "invalid")]
    return 1 if failed else 0


def _write_other_outputs(context: RunContext, console: Console, records: list[dict],
                         shown_records: list[dict], notes: list[str], env: dict,
                         settings: dict) -> None:
    """--markdown, --plots and --report, each written atomically (OSError propagates)."""
    if context.markdown:
        results.write_atomically(context.markdown, report.render_markdown(shown_records)
                                 + "".join(f"\n{note}\n" for note in notes))
    if context.plots:
        from .. import charts  # matplotlib loads only when plots are asked for

        for path in charts.plot(records, context.plots):
            console.print(f"plot written to {path}")
    if context.report:
        from .. import report_html

        saved = context.json or context.report / "results.json"
        if not context.json:
            context.report.mkdir(parents=True, exist_ok=True)
            results.save(saved, records, env, settings)
        index = report_html.build([saved], context.report)
        console.print(f"report written to {index}")
