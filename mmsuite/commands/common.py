"""What the subcommands share: the usage error, argument types and checks of paths and
selectors. Every subcommand lives in a module of its own beside this one."""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import math
import os
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np

from .. import catalogue, results
from ..backend_table import BACKENDS, SELECTED
from ..backends import RunOptions
from ..backends.base import L2_POLICIES
from ..catalogue import Kernel
from ..problem import (
    DEPRECATED_PRESETS,
    DISTRIBUTIONS,
    FLOAT32_MAX,
    LAYOUTS,
    PRESET_HELP,
    PRESETS,
    WIDE_BINADES,
    Problem,
    parse_shape,
    parse_size_range,
    preset,
    preset_deprecation,
)
from ..report import TERMINAL_ROWS

FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # the smallest normal float32


def add_all_rows_argument(group: argparse._ActionsContainer) -> None:
    """``--all-rows``, for the commands that print tables of a whole results file."""
    group.add_argument("--all-rows", action="store_true",
                       help=f"print every table (by default the tables stop after about "
                       f"{TERMINAL_ROWS} rows and the rest are counted)")


def plugin_relpaths(args: argparse.Namespace, command: str, revisions: str) -> list[str]:
    """``--plugin``'s files, which ``command`` reads from each of --repo's ``revisions``:
    paths relative to the repository's root (UsageError for an absolute one)."""
    relpaths = [str(p) for p in args.plugin or ()]
    if any(Path(p).is_absolute() for p in relpaths):
        raise UsageError(f"--plugin with {command} names a file of --repo's {revisions}: "
                         "give its path relative to the repository's root")
    return relpaths


class UsageError(Exception):
    """A bad argument: reported as one line, exit status 2."""


def lock_results(path: Path) -> tuple[results.Lock, Path, int]:
    """--json's lock, taken for the command's life (another writer holding it: one line),
    the journal beside the file, and how many rows that journal holds of a command cut
    short."""
    lock = results.Lock(path)
    try:
        lock.acquire()
    except results.ResultsLocked as exc:
        raise UsageError(str(exc)) from None
    journal = results.journal_path(path)
    return lock, journal, results.unfinished_rows(journal)


def warn(message: str) -> None:
    """``mmsuite: warning: message`` on stderr: on a terminal wrapped between words to its
    width (the terminal itself would cut words), in a log or a pipe one line to grep."""
    text = f"mmsuite: warning: {message}"
    if sys.stderr.isatty():
        text = "\n".join(textwrap.wrap(text, shutil.get_terminal_size().columns,
                                       subsequent_indent="  ", break_long_words=False,
                                       break_on_hyphens=False))
    print(text, file=sys.stderr, flush=True)


def int_at_least(minimum: int):
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


positive_int, non_negative_int = int_at_least(1), int_at_least(0)


def float_above(minimum: float, inclusive: bool):
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


positive_float, non_negative_float = float_above(0, False), float_above(0, True)

# More OpenMP threads than this many per core only measures the scheduler.
THREADS_PER_CORE_CAP = 4


def threads(text: str) -> int:
    """An argparse type: OpenMP threads, at most THREADS_PER_CORE_CAP per core."""
    value = positive_int(text)
    cores = os.cpu_count() or 1
    if value > THREADS_PER_CORE_CAP * cores:
        raise argparse.ArgumentTypeError(
            f"{value} is more than {THREADS_PER_CORE_CAP} threads per core "
            f"({cores} cores here: at most {THREADS_PER_CORE_CAP * cores})")
    return value


def check_omp_env() -> None:
    """OMP_NUM_THREADS obeys --threads' cap: libgomp would start that many threads (and
    abort past what the system allows) before --threads could say otherwise."""
    text = os.environ.get("OMP_NUM_THREADS")
    if text is None or not text.strip():
        return
    first = text.split(",")[0].strip()  # "8,2": nested levels; the outer one counts
    try:
        threads(first)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"OMP_NUM_THREADS={text}: {exc}; set it lower or unset it") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def float32(text: str) -> float:
    """An argparse type: a number that is finite in float32 (the kernels' scalar type) and,
    unless 0, a normal float32. A smaller one (|x| < 1.2e-38) is refused rather than passed
    on: in float32 it is 0 or a subnormal without the precision to verify the kernel
    against, and the float64 reference would blame the kernel for the rounding."""
    value = _number(text)
    if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
        raise argparse.ArgumentTypeError(
            f"expected a number that is finite in float32 (|x| <= 3.4e38), got {text}")
    if value != 0 and abs(value) < FLOAT32_TINY:
        raise argparse.ArgumentTypeError(
            f"{text} is {'0' if float(np.float32(value)) == 0 else 'a subnormal'} in float32; "
            "expected 0 or |x| >= 1.2e-38")
    return value


def output_file(text: str) -> Path:
    """An argparse type: a file to write; a trailing slash names a folder, not a file."""
    if text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(
            f"{text} names a folder; give a file name, e.g. {text}results.json")
    return Path(text)


def device_list(text: str) -> str | list[int]:
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


def fraction(text: str) -> float:
    """An argparse type: a number strictly between 0 and 1."""
    value = _number(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction between 0 and 1, got {value:g}")
    return value


def check_output_folder(option: str, folder: Path | None) -> None:
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


def check_output_file(option: str, path: Path | None) -> None:
    if path is not None:
        try:
            results.check_writable(path, option)
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def check_distinct_outputs(outputs: list[tuple[str, Path | None]]) -> None:
    """Refuse two options that name one file: the second written would replace the first."""
    seen: dict[Path, str] = {}
    for option, path in outputs:
        if path is None:
            continue
        key = path.absolute()
        if key in seen:
            raise UsageError(f"{seen[key]} and {option} name the same file {path}")
        seen[key] = option



def did_you_mean(pattern: str) -> str:
    """"; did you mean cpu.omp_packed?" for a mistyped kernel id or one without its backend,
    else where to find the ids."""
    ids = [k.id for k in catalogue.kernels()]
    close = [i for i in ids if i.partition(".")[2] == pattern or i.startswith(pattern)] or \
        difflib.get_close_matches(pattern, ids, n=3, cutoff=0.6)
    return f"; did you mean {', '.join(close[:3])}?" if close else "; see `mmsuite list`"


def select_kernels(backends: list[str] | None, globs: list[str] | None,
                   with_parents: bool = True) -> list[Kernel]:
    """Catalogue kernels filtered by backend names and id globs; a glob matching nothing is an
    error. A plugin kernel brings its parent along (and the parent's, up to the ladder;
    unless ``with_parents`` is False), so that its ``x parent`` column is measured in the
    same run."""
    chosen = [k for k in catalogue.kernels() if not backends or k.backend in backends]
    if globs:
        for pattern in globs:
            if not any(fnmatch.fnmatchcase(k.id, pattern) for k in chosen):
                raise UsageError(f"--kernel {pattern!r} matches no kernel{did_you_mean(pattern)}")
        chosen = [k for k in chosen if any(fnmatch.fnmatchcase(k.id, g) for g in globs)]
    wanted = {k.id for k in chosen}
    for kernel in list(chosen) if with_parents else []:
        while kernel.plugin and kernel.parent and kernel.parent not in wanted:
            wanted.add(kernel.parent)
            kernel = catalogue.get(kernel.parent)
    return [k for k in catalogue.kernels() if k.id in wanted]



def check_selectors(kernels: list[Kernel], options: RunOptions) -> None:
    """An OpenCL device selector (``--cl-device`` or PYOPENCL_CTX) that matches nothing is
    refused, but only when the run includes OpenCL kernels."""
    selector = options.cl_device if options.cl_device is not None else \
        os.environ.get("PYOPENCL_CTX")
    if selector is None or not any(BACKENDS[k.backend].device == SELECTED for k in kernels):
        return
    try:
        from ..backends.cl_devices import select_device

        select_device(options.cl_device)  # reads PYOPENCL_CTX when there is no --cl-device
    except ValueError as exc:  # matches nothing: the message lists the devices
        raise UsageError(str(exc)) from None
    except (ImportError, LookupError):
        pass  # no pyopencl or no device: the OpenCL rows say why


DEFAULT_SHAPE = "512x512x512"


def deprecated(new: str, action: type[argparse.Action]) -> type[argparse.Action]:
    """An old option kept for one release: it does what ``action`` does, after a warning on
    stderr that names ``new``, the option that replaces it."""

    class Deprecated(action):  # type: ignore[misc,valid-type]
        def __call__(self, parser, namespace, values, option_string=None):
            warn(f"{option_string} is deprecated and goes in the next release; use {new}")
            super().__call__(parser, namespace, values, option_string)

    return Deprecated


def preset_name(text: str) -> str:
    """An argparse type: a preset's name, an old name replaced by its new one after a
    warning on stderr (the choices, and so the help, list the new names only)."""
    if text in DEPRECATED_PRESETS:
        warn(preset_deprecation(text))
        return DEPRECATED_PRESETS[text]
    return text


def shape_list(text: str) -> list[tuple[int, int, int]]:
    """An argparse type: ``MxNxK``, ``S`` (a cube), a range of cubes ``START:STOP[:STEP]``
    (``128:4096:x2``, ``128:1024:128``) or a comma list of them, as (m, n, k) sizes: parsed
    here, once."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError(
            "nothing given; expected MxNxK, S, a range START:STOP[:STEP] or a comma list "
            "(e.g. 512x512x512, 128,256 or 128:4096:x2)")
    shapes: list[tuple[int, int, int]] = []
    for item in items:
        try:
            if ":" in item:
                shapes += [(size, size, size) for size in parse_size_range(item)]
            else:
                shapes.append(parse_shape(item))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return shapes


def add_selection_arguments(p: argparse.ArgumentParser) -> None:
    """--backend and --kernel: which kernels of the catalogue a command takes."""
    sel = p.add_argument_group("selection")
    sel.add_argument("--backend", action="append", choices=BACKENDS,
                     help="only this backend (repeatable)")
    sel.add_argument("--kernel", action="append", metavar="GLOB",
                     help="only kernels whose id matches GLOB, e.g. 'cuda.0*' (repeatable)")


def add_verdict_arguments(group: argparse._ArgumentGroup, threshold: float, confidence: float,
                          max_seconds: float, max_time_help: str) -> None:
    """--threshold, --confidence and --max-time: how a paired verdict is reached (``continuous``
    and ``bisect``, from the gate's ``Settings``)."""
    group.add_argument("--threshold", type=fraction, default=threshold,
                       help="smallest change that counts, as a fraction (default "
                       f"{threshold:g}: {threshold:.0%})".replace("%", "%%"))
    group.add_argument("--confidence", type=fraction, default=confidence,
                       help=f"of each interval on the ratio (default {confidence:g})")
    group.add_argument("--max-time", type=positive_float, default=max_seconds, metavar="S",
                       help=max_time_help + " (default %(default)s)")


def add_device_arguments(group: argparse._ArgumentGroup) -> None:
    """How host kernels run and the cache is treated: the options every measuring command
    takes (``run``, ``continuous``)."""
    group.add_argument("--l2", choices=L2_POLICIES, default="warm",
                       help="warm: inputs stay cached between samples, as in a loop; cold: "
                            "the last-level cache is scrubbed before each sample")
    group.add_argument("--threads", type=threads,
                       help="OpenMP threads for the CPU ladder (default: all cores; at most "
                            f"{THREADS_PER_CORE_CAP} per core)")
    group.add_argument("--cl-device", help="OpenCL device: index or name substring")


def add_problem_arguments(p: argparse.ArgumentParser) -> None:
    """The problem options: shape (or a sweep of shapes, or a preset), batch, layout, scalars
    and the inputs' random seed."""
    prob = p.add_argument_group("problem")
    prob.add_argument("--shape", action="extend", type=shape_list, metavar="MxNxK|S|A:B:STEP[,...]",
                      help="matrix sizes: MxNxK, S for SxSxS, a range of cubes from A to B "
                      "(STEP x2 multiplies, the default; 128 adds), or a comma list of these "
                      f"for a sweep (repeatable; default {DEFAULT_SHAPE})")
    for old in ("--sizes", "--shapes"):  # the sweeps' options before --shape took lists
        prob.add_argument(old, dest="shape", type=shape_list, help=argparse.SUPPRESS,
                          action=deprecated("--shape", argparse._ExtendAction))
    prob.add_argument("--batch", type=positive_int, default=1,
                      help="independent products of the same shape (default 1)")
    prob.add_argument("--layout", choices=LAYOUTS, default="row",
                      help="storage order of A, B and C (default row)")
    prob.add_argument("--alpha", type=float32, default=1.0,
                      help="C = alpha*A*B + beta*C: alpha (default 1)")
    prob.add_argument("--beta", type=float32, default=0.0,
                      help="C = alpha*A*B + beta*C: beta (default 0)")
    prob.add_argument("--seed", type=non_negative_int, default=0,
                      help="random seed of the inputs (default 0)")
    prob.add_argument("--inputs", choices=DISTRIBUTIONS, default="uniform",
                      help="input class: uniform in [-1, 1], standard normal, wide "
                      f"(magnitudes over {WIDE_BINADES} binades, mixed signs), tiny (subnormal "
                      "products), huge (products near 1e34), cancel (sums of large opposite "
                      "terms), scaled (rows and columns scaled by up to 2^+-40), integers "
                      "(exact in FP32), special (a few NaN and Inf); see docs/inputs.md")
    prob.add_argument("--preset", type=preset_name, choices=list(PRESETS),
                      help="; ".join(f"{k}: {v}" for k, v in PRESET_HELP.items()))


def problems_from_args(args: argparse.Namespace) -> list[Problem]:
    """The problems that ``add_problem_arguments``' options name; UsageError for bad ones."""
    if args.preset:
        if args.shape or args.batch != 1:
            raise UsageError("--preset sets the shape and batch; drop --shape/--batch")
        shapes = [(p.m, p.n, p.k, p.batch) for p in preset(args.preset)]
    else:
        shapes = [(*sizes, args.batch) for sizes in args.shape or [parse_shape(DEFAULT_SHAPE)]]
    try:
        return [Problem(m, n, k, batch, args.layout, args.alpha, args.beta, args.seed,
                        getattr(args, "inputs", "uniform")) for m, n, k, batch in shapes]
    except ValueError as exc:  # Problem names the field at fault
        raise UsageError(str(exc)) from None
