"""``mmsuite list``: every kernel of the catalogue, and why unavailable ones are."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from .. import catalogue, peak
from ..backends import RunOptions, get_backend, unavailable_reason
from ..problem import PRESET_HELP
from .common import check_selectors


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("list", help="show every kernel and why unavailable ones are")
    p.add_argument("--backend", action="append", choices=catalogue.BACKENDS)
    p.add_argument("--cl-device", help="OpenCL device: index or name substring")

    return p


def run(args: argparse.Namespace, console: Console) -> int:
    options = RunOptions(cl_device=args.cl_device)
    if args.cl_device is not None:  # PYOPENCL_CTX alone only decides the listed reasons
        check_selectors([k for k in catalogue.kernels()
                          if not args.backend or k.backend in args.backend], options)

    table = Table(title="mmsuite kernels (ladder order)", title_justify="left")
    for title in ("kernel", "rung", "parent", "seed", "precision", "adds", "sizes",
                  "available"):
        # Kernel ids stay whole, so that they can be copied and searched for; the
        # prose columns fold around them.
        table.add_column(title, overflow="fold", no_wrap=title == "kernel")
    for kernel in catalogue.kernels():
        if args.backend and kernel.backend not in args.backend:
            continue
        reason = unavailable_reason(kernel, options)
        sizes = "any" if kernel.constraints == catalogue.ANY_SIZE else kernel.constraints
        table.add_row(kernel.id, str(kernel.rung), kernel.parent or "-", kernel.seed,
                      kernel.precision, kernel.adds, sizes,
                      "yes" if not reason else f"no: {reason}",
                      style="dim" if reason else None)
    console.print(table)
    if not args.backend or "cuda" in args.backend:
        console.print(gpu_peaks_line())
    console.print("presets: " + "; ".join(f"{k} = {v}" for k, v in PRESET_HELP.items()))
    return 0


def gpu_peaks_line() -> str:
    """The peaks `% peak` is measured against: this machine's GPU's FP32 SIMT and dense TF32
    tensor peaks when a CUDA device is present, else the per-SM table they come from."""
    env = {} if unavailable_reason(catalogue.get("cuda.cublas"), RunOptions()) else \
        get_backend("cuda").environment()
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
