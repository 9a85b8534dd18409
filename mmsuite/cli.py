"""The ``mmsuite`` command line: list kernels, run ladders, render reports, draw histories."""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import math
import os
import signal
import sys
import traceback
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import __version__, catalogue, compare, environment, peak, report, results, workers
from .backends import RunOptions, unavailable_reason
from .backends.base import L2_POLICIES
from .catalogue import Kernel
from .measure import CLI_SAMPLING, DEFAULT_WARMUP, Sampling
from .problem import FLOAT32_MAX, LAYOUTS, PRESET_HELP, PRESETS, Problem, parse_shape, preset
from .sweep import Row, sweep
from .tune import TuneError, cmd_tune
from .tune import add_parser as add_tune_parser

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


def _float_above(minimum: float, inclusive: bool):
    """An argparse type: a finite number > ``minimum`` (>= when ``inclusive``)."""
    what = f"a number {'>=' if inclusive else '>'} {minimum:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value

    return parse


_positive_float, _non_negative_float = _float_above(0, False), _float_above(0, True)

# More OpenMP threads than this many per core only measures the scheduler.
THREADS_PER_CORE_CAP = 4


def _threads(text: str) -> int:
    """An argparse type: OpenMP threads, at most THREADS_PER_CORE_CAP per core."""
    value = _positive_int(text)
    cores = os.cpu_count() or 1
    if value > THREADS_PER_CORE_CAP * cores:
        raise argparse.ArgumentTypeError(
            f"{value} is more than {THREADS_PER_CORE_CAP} threads per core "
            f"({cores} cores here: at most {THREADS_PER_CORE_CAP * cores})")
    return value


def _float32(text: str) -> float:
    """An argparse type: a number that is finite in float32 (the kernels' scalar type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
        raise argparse.ArgumentTypeError(
            f"expected a number that is finite in float32 (|x| <= 3.4e38), got {text}")
    return value


def _device_list(text: str) -> str | list[int]:
    """An argparse type: ``all`` or GPU indices ``0,1,...`` (checked against the GPUs later)."""
    if text.strip() == "all":
        return "all"
    try:
        ids = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'all' or indices like 0,1, got {text!r}") \
            from None
    if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise argparse.ArgumentTypeError(f"expected distinct indices >= 0, got {text!r}")
    return ids


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mmsuite", description=__doc__)
    parser.add_argument("--version", action="version", version=f"mmsuite {__version__}")
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
    prob.add_argument("--sizes", metavar="N,N,...",
                      help="a size sweep of square problems, e.g. 128,256,512")
    prob.add_argument("--shapes", metavar="MxNxK,...",
                      help="a sweep of (non-square) shapes, e.g. 4096x128x4096,128x128x65536")
    prob.add_argument("--batch", type=_positive_int, default=1)
    prob.add_argument("--layout", choices=LAYOUTS, default="row")
    prob.add_argument("--alpha", type=_float32, default=1.0)
    prob.add_argument("--beta", type=_float32, default=0.0)
    prob.add_argument("--seed", type=_non_negative_int, default=0)
    prob.add_argument("--preset", choices=list(PRESETS),
                      help="; ".join(f"{k}: {v}" for k, v in PRESET_HELP.items()))
    meas = p_run.add_argument_group("measurement")
    meas.add_argument("--repeats", type=_positive_int, metavar="N",
                      help="exactly N samples per kernel, whatever the noise (default: the "
                           "stopping rule below)")
    meas.add_argument("--min-samples", type=_positive_int, default=CLI_SAMPLING.min_samples,
                      metavar="N", help="stopping rule: at least N samples (default %(default)s)")
    meas.add_argument("--min-time", type=_non_negative_float, default=CLI_SAMPLING.min_seconds,
                      metavar="S", help="stopping rule: at least S seconds of samples "
                                        "(default %(default)s)")
    meas.add_argument("--max-noise", type=_non_negative_float,
                      default=100 * CLI_SAMPLING.noise_target, metavar="PCT",
                      help="stopping rule: until the robust noise is below PCT %% "
                           "(default %(default)s); rows left above it are marked noisy")
    meas.add_argument("--max-time", type=_positive_float, default=CLI_SAMPLING.max_seconds,
                      metavar="S", help="stopping rule: at most S seconds of samples per kernel "
                                        "(default %(default)s; NVBench uses 15)")
    meas.add_argument("--l2", choices=L2_POLICIES, default="warm",
                      help="warm: inputs stay cached between samples, as in a loop; cold: "
                           "the last-level cache is scrubbed before each sample")
    meas.add_argument("--warmup", type=_non_negative_int, default=DEFAULT_WARMUP)
    meas.add_argument("--threads", type=_threads,
                      help="OpenMP threads for the CPU ladder (default: all cores; at most "
                           f"{THREADS_PER_CORE_CAP} per core)")
    meas.add_argument("--cl-device", help="OpenCL device: index or name substring")
    meas.add_argument("--pinned", action="store_true",
                      help="page-locked host buffers for GPU transfers")
    meas.add_argument("--profile", action="store_true",
                      help="add registers, shared memory and spill bytes (CUDA)")
    meas.add_argument("--devices", type=_device_list, metavar="all|0,1,...",
                      help="GPUs to spread the CUDA kernels over, one worker each (default 0)")
    meas.add_argument("--timeout", type=_positive_float, metavar="SECONDS",
                      help="per GPU kernel; its worker is killed past it (default: "
                           f"{workers.TIMEOUT_FLOOR_S:.0f} s plus {workers.TIMEOUT_LAUNCHES} "
                           "launches at 10 GFLOP/s)")
    out = p_run.add_argument_group("output")
    out.add_argument("--json", type=Path, metavar="FILE",
                     help="write the results here; rows also go to FILE.jsonl as they finish")
    out.add_argument("--resume", type=Path, metavar="FILE",
                     help="skip what FILE (a results file or its .jsonl) already measured; "
                          "results go to --json, by default FILE")
    out.add_argument("--markdown", type=Path, metavar="FILE", help="write the tables as Markdown")
    out.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots here")
    out.add_argument("--report", type=Path, metavar="DIR",
                     help="write the HTML/Markdown/CSV report here (and results.json)")
    out.add_argument("--wide", action="store_true",
                     help="print every column (the default table fits 100 columns)")

    p_report = sub.add_parser("report", help="tables, and an HTML/Markdown/CSV report with "
                              "figures, from result files")
    p_report.add_argument("results", type=Path, nargs="+", metavar="RESULTS.json",
                          help="result files; several machines, sizes and commits merge")
    p_report.add_argument("--out", type=Path, metavar="DIR",
                          help="write index.html, report.md, results.csv and figures here")
    p_report.add_argument("--baseline", type=Path, metavar="BASE.json",
                          help="compare with this earlier result file")
    p_report.add_argument("--asv", type=Path, metavar="DIR",
                          help="add each kernel's history from this asv results directory")
    p_report.add_argument("--wide", action="store_true", help="print every column")
    p_report.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p_report.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots here")

    compare.add_parser(sub)
    add_tune_parser(sub)

    p_hist = sub.add_parser("history", help="plot kernels' history from asv results")
    p_hist.add_argument("--results-dir", type=Path, default=Path(".asv/results"))
    p_hist.add_argument("--kernel", action="append", metavar="GLOB", default=None)
    p_hist.add_argument("--metric", default="kernel_ms",
                        help="what to draw: kernel_ms (default), h2d_ms, d2h_ms, gflops, ...")
    p_hist.add_argument("--machine", help="only this asv machine name")
    p_hist.add_argument("--out", type=Path, default=Path("history.png"))
    return parser


# ------------------------------------------------------------------ commands
def cmd_list(args: argparse.Namespace, console: Console) -> int:
    options = RunOptions(cl_device=args.cl_device)
    if args.cl_device is not None:  # PYOPENCL_CTX alone only decides the listed reasons
        _check_selectors([k for k in catalogue.kernels()
                          if not args.backend or k.backend in args.backend], options)

    table = Table(title="mmsuite kernels (ladder order)", title_justify="left")
    for title in ("kernel", "rung", "parent", "seed", "adds", "sizes", "available"):
        # Kernel ids stay whole, so that they can be copied and searched for; the
        # prose columns fold around them.
        table.add_column(title, overflow="fold", no_wrap=title == "kernel")
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
    if args.sizes or args.shapes:
        if args.shape or (args.sizes and args.shapes):
            raise UsageError("give one of --shape, --sizes and --shapes")
        items = [t.strip() for t in (args.sizes or args.shapes).split(",") if t.strip()]
        if not items:
            raise UsageError("--sizes/--shapes needs at least one size")
        if args.sizes and any("x" in t.lower() for t in items):
            raise UsageError("--sizes takes square sizes (128,256); use --shapes for MxNxK")
        return [Problem(*parse_shape(t), args.batch, args.layout, args.alpha, args.beta,
                        args.seed) for t in items]
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


class Terminated(BaseException):
    """SIGTERM: ends a run like Ctrl-C, with the finished rows saved (exit 143)."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def _check_selectors(kernels: list[Kernel], options: RunOptions) -> None:
    """An OpenCL device selector (``--cl-device`` or PYOPENCL_CTX) that matches nothing is
    refused, but only when the run includes OpenCL kernels."""
    selector = options.cl_device if options.cl_device is not None else \
        os.environ.get("PYOPENCL_CTX")
    if selector is None or not any(k.backend == "opencl" for k in kernels):
        return
    try:
        from .backends.cl_devices import select_device

        select_device(options.cl_device)  # reads PYOPENCL_CTX when there is no --cl-device
    except ValueError as exc:  # matches nothing: the message lists the devices
        raise UsageError(str(exc)) from None
    except (ImportError, LookupError):
        pass  # no pyopencl or no device: the OpenCL rows say why


def _devices(requested: str | list[int] | None, kernels: list[Kernel],
             options: RunOptions) -> list[int]:
    """The GPUs the CUDA kernels run on; ``--devices`` is checked only when they can run."""
    if requested is None or not any(k.backend == "cuda" and not unavailable_reason(k, options)
                                    for k in kernels):
        return [0]
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    if requested == "all":
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


def _check_output_folder(option: str, folder: Path | None) -> None:
    """A folder the user named for output: created now if missing, its parents never."""
    if folder is None:
        return
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{option} {folder} is not a directory")
    where = folder if folder.is_dir() else folder.parent
    if not where.is_dir():
        raise UsageError(f"{option} {folder}: folder {where} does not exist")
    if not os.access(where, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {folder}: folder {where} is not writable")
    folder.mkdir(exist_ok=True)


def _check_output_file(option: str, path: Path | None) -> None:
    if path is not None:
        try:
            results.check_writable(path, option)
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def _check_outputs(args: argparse.Namespace) -> None:
    """Every output path is checked before the first kernel runs; folders the user named
    (--plots, --report) are created now, their parents never."""
    _check_output_file("--json", args.json)
    if args.json is not None:
        _check_output_file("--json's journal", results.journal_path(args.json))
    _check_output_file("--markdown", args.markdown)
    _check_output_folder("--plots", args.plots)
    _check_output_folder("--report", getattr(args, "report", None))


def _resumed(args: argparse.Namespace) -> list[dict]:
    """The records of ``--resume FILE``; --json defaults to FILE's final results file."""
    if args.resume is None:
        return []
    source = args.resume
    journal = results.journal_path(source)
    if not source.exists() and source.suffix == ".json" and journal.exists():
        source = journal  # killed before the final file was written: its journal has the rows
    try:
        records = results.load_rows(source)
    except results.ResultsError as exc:
        raise UsageError(f"--resume: {exc}") from None
    if args.json is None:
        name = args.resume.name
        args.json = args.resume.with_name(name[:-1]) if name.endswith(".jsonl") else args.resume
    return records


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    for option in ("shape", "sizes", "shapes"):  # an empty value is not the default
        value = getattr(args, option, None)
        if value is not None and not value.replace(",", "").strip():
            raise UsageError(f"--{option} is empty; expected e.g. "
                             + ("512x512x512" if option == "shape" else "128,256,512"
                                if option == "sizes" else "4096x128x4096,128x128x65536"))
    try:
        problems = _problems(args)
    except ValueError as exc:  # parse_shape and Problem name the field at fault
        raise UsageError(str(exc)) from None
    kernels = select_kernels(args.backend, args.kernel)
    options = RunOptions(threads=args.threads, cl_device=args.cl_device, pinned=args.pinned,
                         profile=args.profile, l2=args.l2)
    sampling = None if args.repeats else Sampling(
        min_samples=args.min_samples, min_seconds=args.min_time,
        noise_target=args.max_noise / 100, max_seconds=args.max_time, name="cli")
    if sampling is not None and args.min_time > args.max_time:
        raise UsageError(f"--min-time {args.min_time} is above --max-time {args.max_time}")
    _check_selectors(kernels, options)
    why_not = _nothing_can_run(kernels, options)
    if why_not:
        raise UsageError(f"nothing requested can run here: {why_not}")
    devices = _devices(args.devices, kernels, options)
    for problem in problems:
        try:
            workers.check_host_memory(problem)
        except workers.HostMemoryError as exc:
            raise UsageError(str(exc)) from None
    resumed = _resumed(args)
    _check_outputs(args)

    order = [f"{k.id} @ {p.shape_label}" for p in problems for k in kernels]
    total, done = len(order), 0
    settings = {"repeats": args.repeats, "sampling": asdict(sampling) if sampling else None,
                "l2": args.l2, "warmup": args.warmup, "threads": args.threads,
                "cl_device": args.cl_device, "pinned": args.pinned, "profile": args.profile,
                "devices": devices, "timeout": args.timeout,
                "problems": [p.to_dict() for p in problems]}
    journal = results.Journal(results.journal_path(args.json), settings) if args.json else None
    finished: list[Row] = []
    err = Console(stderr=True, markup=False)
    progress = (Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                         TimeElapsedColumn(), console=err, transient=True)
                if err.is_terminal else None)
    with progress or contextlib.nullcontext():
        task = progress.add_task(order[0] if order else "", total=total) if progress else None

        def on_row(row: Row) -> None:
            nonlocal done
            finished.append(row)
            if journal is not None:
                journal.append(row.to_record())  # saved as it finishes
            done += 1
            if progress is not None:  # rows finish out of order: show the last one
                progress.update(task, advance=1,
                                description=f"{row.kernel.id} @ {row.problem.shape_label}")
                return
            # Logs get one line per kernel, as it finishes.
            median = (row.to_record().get("kernel_ms") or {}).get("median")
            timing = f" {median:.3f} ms" if isinstance(median, float) else ""
            print(f"[{done}/{total}] {row.kernel.id} @ {row.problem.shape_label}: "
                  f"{row.status}{timing}", file=sys.stderr, flush=True)

        interrupted = 0
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            rows = sweep(kernels, problems, repeats=args.repeats, sampling=sampling,
                         warmup=args.warmup,
                         options=options, on_row=on_row, resume=resumed, devices=devices,
                         timeout=args.timeout)
        except (KeyboardInterrupt, Terminated) as exc:
            # Keep every finished row, in ladder order, and save them like a full run.
            interrupted = 143 if isinstance(exc, Terminated) else 130
            position = {(k.id, p): i for i, (p, k) in
                        enumerate((p, k) for p in problems for k in kernels)}
            rows = sorted(finished, key=lambda r: position[(r.kernel.id, r.problem)])
            settings["interrupted"] = "SIGTERM" if interrupted == 143 else "SIGINT"
        finally:
            signal.signal(signal.SIGTERM, previous)
            if journal is not None:
                journal.close()

    shown, notes = _collapse_unavailable(rows, set(args.backend or []))
    records = [row.to_record() for row in rows]
    shown_records = [row.to_record() for row in shown]
    env = environment.collect(sorted({k.backend for k in kernels}), options)
    cuda_env = (env.get("backends") or {}).get("cuda")
    if cuda_env and any(r.kernel.backend == "cuda" and r.record for r in rows):
        cuda_env["devices"] = workers.cuda_device_facts(devices)  # what each row's device was
    peak.annotate(records + shown_records, env)  # % peak; above 100% is a measurement error
    report.render_rich(shown_records, console, wide=args.wide)
    for note in notes:
        console.print(note, style="dim")
    for warning in environment.warnings(env):
        print(f"mmsuite: warning: {warning}", file=sys.stderr)
    if args.json:
        results.save(args.json, records, env, settings)
        console.print(f"results written to {args.json}")
    if args.markdown:
        args.markdown.write_text(report.render_markdown(shown_records)
                                 + "".join(f"\n{note}\n" for note in notes))
    if args.plots:
        from . import charts  # matplotlib loads only when plots are asked for

        for path in charts.plot(records, args.plots):
            console.print(f"plot written to {path}")
    if args.report:
        from . import report_html

        saved = args.json or args.report / "results.json"
        if not args.json:
            args.report.mkdir(parents=True, exist_ok=True)
            results.save(saved, records, env, settings)
        index = report_html.build([saved], args.report)
        console.print(f"report written to {index}")
    if interrupted:
        resume = f"; run the same command with --resume {args.json} to finish" if args.json \
            else ""
        print(f"mmsuite: interrupted after {len(rows)} of {total} rows{resume}",
              file=sys.stderr)
        return interrupted
    if rows and all(r.status == "unavailable" for r in rows):  # found only when they ran
        print("mmsuite: error: nothing requested could run here (see the reasons above)",
              file=sys.stderr)
        return 2
    # peak.annotate marks a figure above the device's peak invalid: a measurement error.
    failed = [r for r in records if r["status"] in ("failed", "error", "invalid")]
    return 1 if failed else 0


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    _check_output_folder("--plots", args.plots)
    _check_output_folder("--out", args.out)
    records = [r for path in args.results for r in results.load(path)["results"]]
    if args.baseline is not None:
        results.load(args.baseline)  # a bad baseline fails here, in one line
    if args.asv is not None and not args.asv.is_dir():
        raise UsageError(f"no asv results at {args.asv}")
    if args.markdown:
        print(report.render_markdown(records))
    elif not args.out:
        from . import report_html

        report_html.render_terminal(args.results, console, wide=args.wide)
    if args.plots:
        from . import charts  # matplotlib loads only when plots are asked for

        for path in charts.plot(records, args.plots):
            console.print(f"plot written to {path}")
    if args.out:
        from . import report_html

        index = report_html.build(args.results, args.out, baseline=args.baseline,
                                  asv_dir=args.asv)
        console.print(f"report written to {index}")
    return 0


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
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            problems.append(f"{path} is not JSON: {exc}")
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


def cmd_history(args: argparse.Namespace, console: Console) -> int:
    from . import history

    if not args.results_dir.is_dir():
        raise UsageError(f"no asv results at {args.results_dir}; run `asv run` first")
    _check_output_file("--out", args.out)
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
    history.plot_history(series, ids, args.out, metric=args.metric)
    console.print(f"history of {len(ids)} kernels written to {args.out}")
    return 0


COMMANDS = {"list": cmd_list, "run": cmd_run, "report": cmd_report, "history": cmd_history,
            "compare": compare.cmd_compare}


def _console() -> Console:
    """The terminal's width on a terminal; in logs and pipes COLUMNS, else 100 characters."""
    # No markup: reasons and device names contain brackets ("mmsuite[cuda]", "[GPU]").
    console = Console(markup=False)
    if console.is_terminal:
        return console
    columns = os.environ.get("COLUMNS", "")
    return Console(width=int(columns) if columns.isdigit() and int(columns) > 0 else 100,
                   markup=False)


def _attach_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``--shape -3x4x4`` as ``--shape=-3x4x4``: argparse would take a value that starts with
    '-' (and is not a plain negative number) for an option and say "expected one argument"."""
    takes_value, flags = set(), set()
    stack = [parser]
    while stack:
        p = stack.pop()
        for action in p._actions:
            flags.update(action.option_strings)
            if action.option_strings and action.nargs is None:
                takes_value.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        following = argv[i + 1] if i + 1 < len(argv) else None
        if token in takes_value and following is not None and following.startswith("-") \
                and following.split("=", 1)[0] not in flags and following != "--":
            out.append(f"{token}={following}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


def _input_errors_as_usage(command):
    """For commands that report bad input files as ValueError naming the file (compare)."""
    def run(args: argparse.Namespace, console: Console) -> int:
        try:
            return command(args, console)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    return run


COMMANDS["compare"] = _input_errors_as_usage(COMMANDS["compare"])


def _cmd_tune(args: argparse.Namespace, console: Console) -> int:
    try:
        return cmd_tune(args, console)
    except TuneError as exc:  # bad input to tune (shape, kernel, no GPU or Kernel Tuner)
        raise UsageError(str(exc)) from None


COMMANDS["tune"] = _cmd_tune


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 ok, 1 a kernel failed (or a bug: with its traceback), 2 bad input,
    130/143 interrupted by Ctrl-C/SIGTERM (finished rows saved)."""
    console = _console()
    try:
        parser = build_parser()
        args = parser.parse_args(_attach_values(parser, sys.argv[1:] if argv is None else argv))
        return COMMANDS[args.command](args, console)
    except (UsageError, results.ResultsError) as exc:
        print(f"mmsuite: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mmsuite: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if isinstance(exc, OSError) and exc.filename is not None:
            # A file the user named cannot be read or written (missing, permissions, disk full).
            print(f"mmsuite: error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        traceback.print_exc()
        print("mmsuite: internal error: this is a bug; please report it with the traceback above",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
