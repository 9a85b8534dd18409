"""``mmsuite list``: every kernel of the catalogue, and why unavailable ones are."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from .. import catalogue
from ..backends import RunOptions, unavailable_reason
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
