"""``mmsuite list``: every kernel of the catalogue, and why unavailable ones are."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .. import catalogue, peak
from ..backend_table import BACKENDS, GPU_BACKENDS, GPU_PEAK
from ..backends import RunOptions, get_backend, unavailable_reason
from ..problem import PRESET_HELP
from .common import check_selectors


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("list", help="show every kernel and why unavailable ones are",
                       description="One line a kernel: id, rung and what it adds over its "
                       "parent; kernels that cannot run here are grouped under their reason.")
    p.add_argument("--backend", action="append", choices=BACKENDS,
                   help="only this backend (repeatable)")
    p.add_argument("--cl-device", help="OpenCL device whose availability is shown: index or "
                   "name substring (default: PYOPENCL_CTX, else the first device)")
    p.add_argument("--long", action="store_true",
                   help="every field of every kernel: parent, the document it comes from, "
                   "source file, precision, sizes, and each reason in full")
    return p


def run(args: argparse.Namespace, console: Console) -> int:
    options = RunOptions(cl_device=args.cl_device)
    if args.cl_device is not None:  # PYOPENCL_CTX alone only decides the listed reasons
        check_selectors([k for k in catalogue.kernels()
                          if not args.backend or k.backend in args.backend], options)
    chosen = [(k, unavailable_reason(k, options)) for k in catalogue.kernels()
              if not args.backend or k.backend in args.backend]
    if args.long:
        _print_long(console, chosen)
    else:
        _print_compact(console, chosen)
    if any(BACKENDS[b].peak == GPU_PEAK for b in args.backend or BACKENDS):
        console.print(gpu_peaks_line())
    console.print("presets: " + "; ".join(f"{k} = {v}" for k, v in PRESET_HELP.items()))
    return 0


def _print_compact(console: Console, chosen: list[tuple[catalogue.Kernel, str]]) -> None:
    """One line a kernel, ids whole and "adds" cut to the line; the kernels that cannot run
    here come after, grouped under their reason, printed once."""
    id_width = max(len(k.id) for k, _ in chosen)
    groups: dict[str, list[catalogue.Kernel]] = {}
    for kernel, reason in chosen:
        groups.setdefault(reason, []).append(kernel)
    console.print("mmsuite kernels, ladder order (--long for every field)")
    for reason, kernels in sorted(groups.items(), key=lambda item: item[0] != ""):
        heading = "available here:" if not reason else \
            f"unavailable here ({len(kernels)}): {reason}"
        table = Table(title=heading, title_justify="left", box=None, show_header=False,
                      pad_edge=False, padding=(0, 2, 0, 0),
                      title_style="bold" if not reason else "dim", expand=True)
        table.add_column("kernel", no_wrap=True, min_width=id_width, max_width=id_width)
        table.add_column("rung", no_wrap=True, justify="right", min_width=2, max_width=2)
        table.add_column("adds", no_wrap=True, overflow="ellipsis", ratio=1)
        for kernel in kernels:
            adds = f"[{_plugin_name(kernel.plugin)}] {kernel.adds}" if kernel.plugin else \
                kernel.adds
            table.add_row(kernel.id, str(kernel.rung), adds, style="dim" if reason else None)
        console.print(table)


def _plugin_name(label: str) -> str:
    """A plugin as the compact list names it: its entry point, or its file's name."""
    if label.startswith("entry point "):
        return label.split(" (")[0]
    file = Path(label)
    return f"plugin {file.parent.name if file.name == '__init__.py' else file.name}"


#: What a kernel's origin says, for the legend of ``list --long``.
ORIGIN_LEGEND = ("origin: 000 to 004 are the published SGEMM ladders whose rungs mmsuite "
                 "implements again, beyond: mmsuite's own rungs past them, reference: the "
                 "vendor library a backend is measured against, plugin: declared outside "
                 "mmsuite")


def _origin(kernel: catalogue.Kernel) -> str:
    return f"plugin {kernel.plugin}" if kernel.plugin else kernel.origin


def _print_long(console: Console, chosen: list[tuple[catalogue.Kernel, str]]) -> None:
    """Every field of every kernel, a few lines each, wrapped between words at the
    terminal's width (ids and file names are never cut); each reason a kernel cannot run
    is printed once, under the list, and the kernels point to it ("[1]")."""
    width = max(console.width, 40)
    reasons: dict[str, int] = {}
    lines = ["mmsuite kernels, ladder order", _fill(ORIGIN_LEGEND, width)]
    backend = None
    for kernel, reason in chosen:
        if kernel.backend != backend:
            backend = kernel.backend
            lines += ["", f"{backend} ({sum(k.backend == backend for k, _ in chosen)} kernels)"]
        where = "available" if not reason else \
            f"unavailable [{reasons.setdefault(reason, len(reasons) + 1)}]"
        after = f", after {kernel.parent}" if kernel.parent else ""
        sizes = "any" if kernel.constraints == catalogue.ANY_SIZE else kernel.constraints
        lines.append(f"{kernel.id}  rung {kernel.rung}{after}; {where}")
        for text in (f"adds: {kernel.adds}",
                     f"origin: {_origin(kernel)}; precision: {kernel.precision}; sizes: "
                     f"{sizes}; file: {kernel.source or '-'}"):
            lines.append(_fill(text, width, indent="    "))
    if reasons:
        lines += ["", "why some cannot run here:"]
        lines += [_fill(f"[{number}] {reason}", width, indent="    ")
                  for reason, number in reasons.items()]
    console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


def _fill(text: str, width: int, indent: str = "") -> str:
    """``text`` broken between words at ``width``: never inside a word, an id or a path."""
    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False)


def gpu_peaks_line() -> str:
    """The peaks `% peak` is measured against: this machine's GPU's FP32 SIMT and dense TF32
    tensor peaks when a GPU backend's device is present, else the per-SM table they come
    from."""
    env: dict = {}
    for name in GPU_BACKENDS:
        if not unavailable_reason(catalogue.get(BACKENDS[name].reference), RunOptions()):
            env = get_backend(name).environment()
            break
    if env.get("sm_count") and env.get("sm_clock_mhz"):
        peaks = peak.device_peaks(env["sm_count"], env["sm_clock_mhz"],
                                  peak.parse_compute_capability(env.get("compute_capability")),
                                  env.get("gpu") or "GPU")
        shown = [f"{kind} {p.gflops / 1e3:.1f} TFLOP/s ({p.how})" if p else f"{kind} unknown"
                 for kind, p in peaks.items()]
        return f"% peak on {env.get('gpu')}: " + "; ".join(shown)
    per_sm = ", ".join(
        f"sm_{''.join(map(str, cc))}: FP32 {2 * (peak.gpu_lanes_per_sm(cc) or 0)}, TF32 "
        f"{tf32}" for cc, tf32 in peak.GPU_TF32_FLOPS_PER_SM.items())
    return ("% peak on GPUs: FP32 rungs against SMs x FP32 lanes x 2 x clock, tensor-core rungs "
            f"against SMs x dense TF32 FLOP/cycle x clock (FLOP/cycle/SM {per_sm})")
