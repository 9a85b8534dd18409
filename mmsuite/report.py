"""Reports: the ladder table (terminal and Markdown), from result records.

Everything here works on the JSON records a run writes, so a saved result file
renders the same table as the run that made it.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from .backend_table import BACKENDS, GPU_BACKENDS, HOST_BACKEND, runs_on_host
from .catalogue import BASELINE_ID, kernels, ladder_rank, reference_of
from .load import contended, contention_footnote
from .problem import label_of
from .results import MEASURED
from .stats import robust_noise


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    justify: Literal["left", "right"] = "right"


def _problem_key(record: dict) -> tuple:
    p = record["problem"]
    return (p["m"], p["n"], p["k"], p["batch"], p["layout"], p["alpha"], p["beta"])


def group_by_problem(records: Iterable[dict]) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for record in records:
        groups[_problem_key(record)].append(record)
    rank = ladder_rank()
    for rows in groups.values():
        rows.sort(key=lambda r: rank.get(r["kernel"], len(rank)))
    return dict(groups)


def _median(record: dict, phase: str) -> float | None:
    """Median of a phase; None where the phase was not timed (transfers of host backends)."""
    stats = record.get(phase)
    return stats["median"] if stats and stats.get("samples") else None


def _base_id(rows_by_id: dict[str, dict], record: dict) -> str | None:
    """cpu.seq_naive when measured on this problem, else the backend's rung 1."""
    if BASELINE_ID in rows_by_id:
        return BASELINE_ID
    for kernel in kernels():
        if kernel.backend == record["backend"] and kernel.rung == 1 and kernel.id in rows_by_id:
            return kernel.id
    return None


# Where a backend's own reference did not run (CLBlast is optional), the vendor library of the
# same kind of hardware, measured in the same run, stands in.
_STAND_IN = {"GPU": BACKENDS[GPU_BACKENDS[0]].reference, "CPU": HOST_BACKEND.reference}


def _reference_id(record: dict, ok_rows: dict[str, dict]) -> str | None:
    ref = reference_of(record["backend"])  # the FP32 library: TF32 rows are no yardstick
    own = ref.id if ref is not None else None
    if own in ok_rows:
        return own
    device_type = (record.get("info") or {}).get("device_type")
    stand_in = _STAND_IN.get(device_type) if isinstance(device_type, str) else None
    return stand_in if stand_in in ok_rows else own


def _ratio(numer: float | None, denom: float | None) -> float | None:
    if numer is None or denom is None or denom <= 0 or not math.isfinite(numer):
        return None
    return numer / denom



def phase_noise(stats: dict | None) -> float | None:
    """Relative noise of a phase: the recorded figure, else ``stats.robust_noise`` of its
    samples (older files carry samples only)."""
    if not stats:
        return None
    if stats.get("noise") is not None:
        return float(stats["noise"])
    return robust_noise([s for s in stats.get("samples") or [] if s is not None])


def pct_peak(record: dict) -> float | None:
    """Percent of the device's FP32 peak: recorded, or derived from ``peak_gflops``."""
    if record.get("pct_peak") is not None:
        return float(record["pct_peak"])
    peak, gflops = record.get("peak_gflops"), record.get("gflops")
    if peak and gflops is not None and math.isfinite(gflops):
        return 100.0 * gflops / peak
    return None


def table_rows(records: list[dict]) -> list[dict]:
    """The ladder table for one problem: one dict per kernel with derived columns."""
    ok_rows = {r["kernel"]: r for r in records if r["status"] == "ok"}
    out = []
    for r in records:
        row = {"kernel": r["kernel"], "adds": r["adds"], "status": r["status"],
               "reason": r.get("reason", "")}
        ms = _median(r, "kernel_ms") if r["status"] in MEASURED else None
        # Only a verified, plausible time is a throughput or a speedup; a failed or invalid
        # row keeps its time (and % peak, which says why it is invalid) but no ratio.
        valid = ms and r["status"] == "ok"
        row["kernel_ms"] = ms
        row["gflops"] = r.get("gflops") if valid else None
        row["host_gflops"] = r.get("host_gflops") if valid else None
        # OpenCL on a CPU copies within host memory: microseconds that say nothing of a bus.
        moved = ms and not runs_on_host(r)
        row["h2d_ms"] = _median(r, "h2d_ms") if moved else None
        row["d2h_ms"] = _median(r, "d2h_ms") if moved else None
        row["spread"] = r["kernel_ms"].get("spread") if ms else None
        row["noise"] = phase_noise(r.get("kernel_ms")) if ms else None
        row["noisy"] = bool(r.get("noisy")) if ms else False
        row["pct_peak"] = pct_peak(r) if valid or r["status"] == "invalid" else None
        for key in ("achieved_gbs", "intensity", "pct_roof"):  # the row's roof (mmsuite.roof)
            row[key] = r.get(key) if valid else None
        row["max_rel_err"] = r.get("max_rel_err")
        row["err_bound"] = r.get("err_bound")
        row["err_vs_ref"] = r.get("err_vs_ref") if r["status"] in MEASURED else None
        spent = r.get("energy") if r["status"] == "ok" else None
        row["energy"] = spent is not None
        row["joules"] = (spent or {}).get("joules")
        row["gflop_per_joule"] = (spent or {}).get("gflop_per_joule")
        base = _base_id(ok_rows, r)
        parent, ref = r.get("parent"), _reference_id(r, ok_rows)
        row["base"], row["ref"] = base, ref if ref in ok_rows else None
        speed = ms if valid else None
        row["x_base"] = _ratio(_median(ok_rows[base], "kernel_ms"), speed) if base else None
        row["x_parent"] = (_ratio(_median(ok_rows[parent], "kernel_ms"), speed)
                           if parent in ok_rows else None)
        to_ref = _ratio(_median(ok_rows[ref], "kernel_ms"), speed) if ref in ok_rows else None
        interleaved = _median(r, "reference_ms")
        if interleaved and speed:
            # The reference was sampled alternately with this rung: like against like under load.
            to_ref = _ratio(interleaved, speed)
        row["pct_ref"] = 100 * to_ref if to_ref is not None else None
        row["ref_interleaved"] = bool(interleaved and speed)
        # A time taken while others held the machine is no fact, nor any ratio built on it.
        row["contended"] = bool(ms) and contended(r)
        against = {"x_base": base, "x_parent": parent,
                   "pct_ref": None if row["ref_interleaved"] else ref}
        if r["kernel"] == ref:
            del against["pct_ref"]  # the reference is 100% of itself, whatever the load
        row["unsure"] = {key for key, other in against.items() if row[key] is not None and (
            row["contended"] or (other in ok_rows and contended(ok_rows[other])))}
        if row["contended"]:  # shares of the device's limits, taken of such a time
            row["unsure"].update(key for key in ("pct_peak", "pct_roof") if row[key] is not None)
        profile = (r.get("info") or {}).get("profile") or {}
        row["regs"], row["local"] = profile.get("registers"), profile.get("local_bytes")
        shared = [profile.get(key) for key in ("static_shared_bytes", "dynamic_shared_bytes")]
        row["smem"] = sum(v for v in shared if v) if row["regs"] is not None else None
        out.append(row)
    return out


def flops_scale(best_gflops: float) -> tuple[float, str]:
    """Divisor and unit for FLOP/s: TFLOP/s once the best figure reaches 1000 GFLOP/s."""
    return (1000.0, "TFLOP/s") if best_gflops >= 1000.0 else (1.0, "GFLOP/s")


def _columns(rows: list[dict], wide: bool = True) -> tuple[list[Column], float]:
    """The columns worth showing for these rows, and the FLOP/s unit (1 or 1000 GFLOP/s).

    The compact set (``wide=False``) is what fits 80 columns: times, throughput, noise and
    the three ratios; reasons go to footnotes."""
    scale, unit = flops_scale(max((r["gflops"] or 0.0 for r in rows), default=0.0))
    has_peak = any(r["pct_peak"] is not None for r in rows)
    if not wide:
        cols = [Column("kernel", "kernel", "left"), Column("kernel_ms", "ms"),
                Column("gflops", unit), Column("noise", "noise"),
                Column("x_parent", "x parent"), Column("pct_ref", "% ref"),
                Column("pct_peak", "% peak")]
        if any(r["energy"] for r in rows):
            cols += [Column("joules", "J"), Column("gflop_per_joule", "GFLOP/J")]
        cols.append(Column("status", "status", "left"))
        return cols, scale
    cols = [Column("kernel", "kernel", "left"), Column("adds", "adds", "left"),
            Column("kernel_ms", "kernel ms"), Column("spread", "spread"),
            Column("noise", "noise"), Column("gflops", unit),
            Column("host_gflops", f"h2h {unit}"), Column("x_base", "x base"),
            Column("x_parent", "x parent"), Column("pct_ref", "% ref")]
    if has_peak:
        cols.append(Column("pct_peak", "% peak"))
    if any(r["achieved_gbs"] is not None for r in rows):
        cols += [Column("achieved_gbs", "GB/s"), Column("intensity", "FLOP/B")]
    if any(r["pct_roof"] is not None for r in rows):
        cols.append(Column("pct_roof", "% roof"))
    if any(r["h2d_ms"] for r in rows):
        cols += [Column("h2d_ms", "h2d ms"), Column("d2h_ms", "d2h ms")]
    if any(r["regs"] is not None for r in rows):
        cols += [Column("regs", "regs"), Column("smem", "smem B"), Column("local", "spill B")]
    if any(r["energy"] for r in rows):
        cols += [Column("joules", "J per GEMM"), Column("gflop_per_joule", "GFLOP/J")]
    if any(r["err_bound"] is not None for r in rows):  # files before the field have none
        cols.append(Column("err_bound", "err bound"))
    cols += [Column("max_rel_err", "max rel err"), Column("err_vs_ref", "err/ref"),
             Column("status", "status", "left")]
    return cols, scale


def _fmt(key: str, value, scale: float) -> str:
    if value is None:
        return "-"
    if key in ("gflops", "host_gflops"):
        value = value / scale
        if value < 0.1:  # sequential C in TFLOP/s: two significant digits, not 0.00
            return f"{value:.2g}"
        return f"{value:.2f}" if value < 100 else f"{value:.0f}"
    if key in ("kernel_ms", "h2d_ms", "d2h_ms"):
        return f"{value:.3f}" if value < 100 else f"{value:.1f}"
    if key == "spread":
        return f"{100 * value:.0f}%"
    if key == "noise":
        return f"{100 * value:.1f}%" if value < 0.1 else f"{100 * value:.0f}%"
    if key in ("x_base", "x_parent"):
        if value < 0.1:  # two significant digits, not 0.00x
            return f"{value:.2g}x"
        return f"{value:.2f}x" if value < 100 else f"{value:.0f}x"
    if key in ("pct_ref", "pct_peak", "pct_roof"):
        return f"{value:.0f}%"
    if key in ("achieved_gbs", "intensity"):
        return f"{value:.3g}" if value < 1000 else f"{value:.0f}"
    if key in ("max_rel_err", "err_bound"):
        return f"{value:.1e}" if math.isfinite(value) else "inf"
    if key == "joules":
        return f"{value:.3g}"
    if key == "gflop_per_joule":
        return f"{value:.3g}"
    if key == "err_vs_ref":
        if not math.isfinite(value):
            return "inf"
        return f"{value:.2f}x" if value < 100 else f"{value:.0f}x"
    return str(value)


def fmt(key: str, value: float | None, scale: float = 1.0) -> str:
    """A figure as the tables print it (``key`` as in :func:`table_rows`); "-" for None."""
    return _fmt(key, value, scale)


def _status(row: dict) -> str:
    return row["status"] if not row["reason"] else f"{row['status']}: {row['reason']}"


def _cells(row: dict, cols: list[Column], scale: float,
           notes: dict[str, int] | None = None, short: bool = False) -> list[str]:
    """The row's cells; with ``notes`` the status names a footnote instead of its reason
    (``short``: the footnote starts with the status word, "failed: why")."""
    cells = []
    for c in cols:
        if c.key == "status":
            if notes is None or not row["reason"]:
                cells.append(_status(row))
            elif short:
                note = notes.setdefault(_status(row), len(notes) + 1)
                cells.append(f"{row['status']} [{note}]")
            else:
                cells.append(f"{row['status']} [{notes.setdefault(row['reason'], len(notes) + 1)}]")
        elif c.key == "noise":
            # "!" marks a noisy row: its noise stayed above the sampling target, or most of
            # its samples were disturbed (mmsuite.measure.Sampled.noisy).
            cells.append(_fmt("noise", row["noise"], scale) + ("!" if row["noisy"] else ""))
        elif c.key == "kernel_ms" and row.get("contended"):
            cells.append(_fmt(c.key, row[c.key], scale) + "*")  # others held the machine
        elif c.key in row.get("unsure", ()):
            cells.append(_fmt(c.key, row[c.key], scale) + "?")  # built on such a time
        else:
            cells.append(_fmt(c.key, row[c.key], scale))
    return cells


def _caption(rows: list[dict], wide: bool = True) -> str:
    bases = sorted({r["base"] for r in rows if r["base"]})
    refs = sorted({r["ref"] for r in rows if r["ref"]})
    noise = "noise: 1.4826*MAD/median of the kernel samples, ! where above target or disturbed"
    interleaved = ("; % ref of CPU rungs: against OpenBLAS samples taken alternately with "
                   "the rung's" if any(r.get("ref_interleaved") for r in rows) else "")
    marked = ("; *: measured while other processes held the machine; ?: a ratio built on "
              "such a time" if any(r.get("contended") for r in rows) else "")
    if not wide:
        interleaved = ("; % ref of CPU rungs: against OpenBLAS samples taken in turns with the "
                       "rung's" if any(r.get("ref_interleaved") for r in rows) else "")
        return ("ms: median kernel time; noise: 1.4826*MAD/median, ! above the device's "
                "target or most samples disturbed; x parent: speedup over the parent rung; "
                "% ref: reference ("
                + (", ".join(refs) or "-") + ") time over this kernel's; % peak: of the "
                "device's FP32 peak" + interleaved + marked)
    return ("x base: speedup over " + (", ".join(bases) or "-") + "; x parent: over the parent "
            "rung; % ref: reference kernel time (" + (", ".join(refs) or "-") + ") over this "
            "kernel's; spread: (max-min)/median of the kernel time; " + noise + interleaved
            + ("; err bound: max |C - C64| / (|alpha||A||B| + |beta||C0|), what verification "
               "decides on; err/ref: err bound" if any(r["err_bound"] is not None for r in rows)
               else "; err/ref: max rel err")
            + " over the FP32 reference library's on the same inputs"
            + marked
            + ("; GB/s: A, B and C (twice with beta != 0) and any split workspace over the "
               "kernel time; FLOP/B: FLOPs over those bytes; % roof: of min(FP32 peak, "
               "copy-probe bandwidth x FLOP/B)" if any(r["pct_roof"] is not None
                                                       for r in rows) else "")
            + ("; J: energy per GEMM from NVML's counter over >= 1 s of launches, idle power "
               "taken off" if any(r["energy"] for r in rows) else ""))


_NO_BREAK = "\u00a0"  # textwrap breaks at ASCII whitespace only


def _wrap(text: str, width: int, indent: str = "") -> list[str]:
    """``text`` on lines at most ``width`` wide, broken at spaces only (a no-break space
    holds words together; no word is cut), continuation lines indented by ``indent``."""
    lines = textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=False,
                          break_on_hyphens=False)
    return [line.replace(_NO_BREAK, " ") for line in lines] or [""]


def wrap_legend(caption: str, width: int) -> list[str]:
    """The legend ("term: definition; ...") on lines at most ``width`` wide, broken between
    words but never inside a term ("% ref of CPU rungs") nor between a term and its
    definition's first word, so that each line that opens a definition names its term."""
    clauses = []
    for term, definition in legend_items(caption):
        if definition:
            first, space, rest = definition.partition(" ")
            clauses.append((term + ": " + first).replace(" ", _NO_BREAK) + space + rest)
        else:
            clauses.append(term)
    return _wrap("; ".join(clauses), width)


def legend_items(caption: str) -> list[tuple[str, str]]:
    """The legend's terms and their definitions, in order ("ms", "median kernel time")."""
    items = []
    for clause in caption.split("; "):
        term, _, definition = clause.partition(": ")
        items.append((term, definition))
    return items


def _wrap_hanging(text: str, width: int) -> list[str]:
    """``text`` on lines at most ``width`` wide, broken between words but never inside an id
    or a quoted command (`pip install x`), the lines after the first indented."""
    text = re.sub(r"`[^`]*`", lambda quoted: quoted.group().replace(" ", _NO_BREAK), text)
    return _wrap(text, width, indent="  ")


def unavailable_by_reason(records: Iterable[dict]) -> dict[str, list[dict]]:
    """The records of kernels that could not run, grouped by their reason (first met first)."""
    by_reason: dict[str, list[dict]] = {}
    for record in records:
        if record["status"] == "unavailable":
            by_reason.setdefault(record.get("reason") or "no reason recorded", []).append(record)
    return by_reason


#: A backend whose every kernel shares one reason is named as "cuda.* (32)" once it has more
#: kernels than this; fewer are listed by id.
_LISTED_IDS = 3


def _compact_ids(unavailable: list[dict], records: list[dict]) -> str:
    """The ids of ``unavailable`` (records of one reason) in a few words: "cuda.* (32)" for
    all of a backend's kernels among ``records``, else the ids, with their number when
    several ("cpu.seq_naive, cpu.seq_ikj (2)")."""
    per_backend: dict[str, int] = defaultdict(int)
    for record in records:
        per_backend[record["backend"]] += 1
    mine: dict[str, list[str]] = defaultdict(list)
    for record in unavailable:
        mine[record["backend"]].append(record["kernel"])
    parts, listed = [], 0
    for backend, ids in mine.items():
        if len(ids) == per_backend[backend] and len(ids) > _LISTED_IDS:
            parts.append(f"{backend}.*{_NO_BREAK}({len(ids)})")
        else:
            parts += ids
            listed += len(ids)
    counted = listed > 1 and listed == len(unavailable)
    return ", ".join(parts) + (f"{_NO_BREAK}({listed})" if counted else "")


def _unavailable_lines(records: list[dict]) -> list[str]:
    """One line a reason: which kernels of ``records`` could not run, and why."""
    return [f"{_compact_ids(mine, records)} unavailable: {reason}"
            for reason, mine in unavailable_by_reason(records).items()]


def _column_width(col: Column, cells: list[str]) -> int:
    """The widest cell, or the title's longest word where the title is wider ("x parent"
    over "15.3x" takes two lines; a word is never cut)."""
    widest = max([len(c) for c in cells], default=0)
    return max(widest, max(len(word) for word in col.title.split()))


def _folded_title(title: str, width: int) -> str:
    """The title on as many lines as ``width`` needs, broken between words."""
    lines: list[str] = []
    for word in title.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "\n".join(lines)


def _table_width(cols: list[Column], body: list[list[str]], gap: int) -> int:
    """Width of a compact table: its columns and ``gap`` spaces between them."""
    return sum(_column_width(c, [b[i] for b in body]) for i, c in enumerate(cols)) \
        + gap * (len(cols) - 1)


def _fit(cols: list[Column], body: list[list[str]],
         width: int) -> tuple[list[Column], list[list[str]], int]:
    """The columns and the gap between them for a terminal ``width`` wide: two spaces where
    they fit, else one; narrower still, columns with no figure ("-" in every row) go."""
    for gap in (2, 1):
        if _table_width(cols, body, gap) <= width:
            return cols, body, gap
    keep = [i for i in range(len(cols)) if any(b[i] != "-" for b in body)]
    return [cols[i] for i in keep], [[b[i] for i in keep] for b in body], 1


_STYLE = {"ok": None, "failed": "red", "error": "red", "crashed": "red", "invalid": "red",
          "unavailable": "dim"}


#: Table rows a terminal is shown before the rest of a large file is only counted: a
#: sweep of thousands of problems printed whole is tens of thousands of lines nobody reads
#: in a terminal (``--all-rows`` prints them; the report's Markdown and CSV hold them all).
TERMINAL_ROWS = 200
#: What shows the rows a terminal table leaves out.
ALL_ROWS_HINT = "--all-rows prints every table; report --out DIR writes them all (Markdown, CSV)"


def row_limit(all_rows: bool) -> int | None:
    """The rows a terminal is shown: every one with ``--all-rows``, else ``TERMINAL_ROWS``."""
    return None if all_rows else TERMINAL_ROWS


def within_terminal(groups: list[list[dict]], limit: int | None) -> list[list[dict]]:
    """The groups (tables) a terminal shows: whole tables, in order, until ``limit`` rows
    (the first always); every one where ``limit`` is None."""
    if limit is None:
        return groups
    shown: list[list[dict]] = []
    rows = 0
    for group in groups:
        if shown and rows + len(group) > limit:
            break
        shown.append(group)
        rows += len(group)
    return shown


def left_out_line(groups: list[list[dict]], shown: int) -> str:
    """The line under a terminal's tables that counts what they leave out ("" if none)."""
    rest = groups[shown:]
    if not rest:
        return ""
    rows = sum(len(g) for g in rest)
    return (f"... and {len(rest)} more problems ({rows} rows) not shown, of {len(groups)}: "
            f"{ALL_ROWS_HINT}")


def render_rich(records: list[dict], console=None, wide: bool = False,
                title_suffix: str = "", limit: int | None = TERMINAL_ROWS) -> None:
    """Print one ladder table per problem to the terminal.

    The default table fits 80 columns: kernel ids never wrap, a column title wider than
    its figures takes two lines, statuses are short words whose reasons are footnotes
    under the table, kernels that could not run are one line a reason under it ("cuda.*
    (32) unavailable: ...", once under the last table where every problem shares it), and
    the legend wraps between definitions; ``wide`` prints every column and every kernel
    with reasons inline. Tables are printed whole until ``limit`` rows, then one line
    counts the problems left out (None: every table)."""
    from rich.console import Console

    console = console or Console(markup=False)
    every = list(group_by_problem(records).values())
    groups = within_terminal(every, limit)
    _render_groups(console, groups, wide, title_suffix)
    left_out = left_out_line(every, len(groups))
    if left_out:
        _print_wrapped(console, [left_out], console.width)


def _render_groups(console, groups: list[list[dict]], wide: bool, title_suffix: str) -> None:
    if wide:
        for group in groups:
            rows = table_rows(group)
            cols, scale = _columns(rows, wide)
            body = [_cells(row, cols, scale) for row in rows]
            _print_wide(console, label_of(group[0]["problem"]) + title_suffix,
                        _caption(rows, wide), cols, rows, body)
            contention = contention_footnote(group)
            if contention:
                _print_wrapped(console, [contention], console.width)
        return
    missing = [_unavailable_lines(group) for group in groups]
    everywhere = set.intersection(*map(set, missing)) if len(groups) > 1 else set()
    width = console.width
    for group, lines in zip(groups, missing):
        title = label_of(group[0]["problem"]) + title_suffix
        ran = [r for r in group if r["status"] != "unavailable"]
        if ran:
            rows = table_rows(ran)
            cols, scale = _columns(rows, wide=False)
            notes: dict[str, int] = {}
            body = [_cells(row, cols, scale, notes, short=True) for row in rows]
            width = _print_compact(console, title, _caption(rows, wide=False), cols, rows, body)
        else:
            console.print(title, markup=False)
            console.print("no kernel could run on this problem", style="dim")
            notes, width = {}, console.width
        # Not dim as the legend is: what did not run, and why, is a finding.
        footnotes = [f"[{number}] {reason}" for reason, number in notes.items()]
        contention = contention_footnote(ran)
        if contention:
            footnotes.insert(0, contention)
        _print_wrapped(console, footnotes + [line for line in lines if line not in everywhere],
                       width)
    if everywhere:
        _print_wrapped(console, [line.replace(" unavailable: ", " unavailable on every "
                                              "problem: ", 1)
                                 for line in missing[0] if line in everywhere], width)


def _print_wrapped(console, lines: list[str], width: int) -> None:
    """Each line wrapped between words to ``width``, its continuation indented."""
    for line in lines:
        console.print("\n".join(_wrap_hanging(line, width)), width=width, markup=False,
                      highlight=False)


def _print_legend(console, caption: str, table_width: int) -> int:
    """The legend, dim, as wide as its table (at least 60) or the terminal; that width."""
    width = min(console.width, max(table_width, 60))
    console.print("\n".join(wrap_legend(caption, width)), style="dim", width=width,
                  markup=False, highlight=False)
    return width


def _print_compact(console, title: str, caption: str, cols: list[Column], rows: list[dict],
                   body: list[list[str]]) -> int:
    """The table and its legend; returns the width the legend wraps at."""
    from rich import box
    from rich.table import Table

    cols, body, gap = _fit(cols, body, console.width)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False, padding=(0, gap - 1, 0, 0), collapse_padding=True)
    for i, c in enumerate(cols):
        # Figures and ids are never cut: a column is as wide as its widest cell.
        width = _column_width(c, [cells[i] for cells in body])
        table.add_column(_folded_title(c.title, width), justify=c.justify, no_wrap=True,
                         width=width)
    for row, cells in zip(rows, body):
        table.add_row(*cells, style=_STYLE.get(row["status"]))
    console.print(table)
    # The legend wraps at word boundaries, at the table's width or the terminal's.
    return _print_legend(console, caption, _table_width(cols, body, gap))


def _print_wide(console, title: str, caption: str, cols: list[Column], rows: list[dict],
                body: list[list[str]]) -> None:
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.HEAVY_HEAD)
    for i, c in enumerate(cols):
        # Figures and ids are never cut: columns shrink only down to their widest cell.
        widest = max([len(c.title)] + [len(cells[i]) for cells in body])
        if c.key in ("adds", "status"):
            table.add_column(c.title, justify=c.justify, overflow="fold", max_width=48)
        else:
            table.add_column(c.title, justify=c.justify, no_wrap=True, min_width=widest)
    for row, cells in zip(rows, body):
        table.add_row(*cells, style=_STYLE.get(row["status"]))
    console.print(table)
    # The legend under the table, wrapped between definitions as the compact table's is:
    # rich's caption would split a term from its own.
    _print_legend(console, caption, console.measure(table).maximum)


def ladder_table(records: list[dict], wide: bool = True
                 ) -> tuple[list[str], list[str], list[list[str]], str, list[str]]:
    """One problem's ladder as plain cells (for HTML and Markdown writers): column titles,
    their justification ("left"/"right"), one list of cells per kernel, the caption, and
    the reasons the status cells point to ("[1]" is the first)."""
    rows = table_rows(records)
    cols, scale = _columns(rows, wide)
    notes: dict[str, int] = {}
    cells = [_cells(r, cols, scale, notes) for r in rows]
    return ([c.title for c in cols], [c.justify for c in cols], cells, _caption(rows, wide),
            list(notes))


def _md_escape(text: str) -> str:
    """An asterisk as itself: "1.4826*MAD" or a row's "12.3*" could open emphasis."""
    return text.replace("*", r"\*")


def render_markdown(records: list[dict]) -> str:
    """The same tables as Markdown, for notes and pull requests."""
    parts = []
    for group in group_by_problem(records).values():
        rows = table_rows(group)
        cols, scale = _columns(rows)
        lines = [f"**{label_of(group[0]['problem'])}**", "",
                 "| " + " | ".join(c.title for c in cols) + " |",
                 "|" + "|".join("---" if c.justify == "left" else "---:" for c in cols) + "|"]
        lines += ["| " + " | ".join(_md_escape(c.replace("\n", " ")).replace("|", "\\|")
                                    for c in _cells(r, cols, scale)) + " |" for r in rows]
        # The legend as a list, one term a line: nothing to wrap, no term cut from its words.
        lines += [""] + [f"- **{_md_escape(term)}**: " + _md_escape(definition)
                         for term, definition in legend_items(_caption(rows))] + [""]
        contention = contention_footnote(group)
        if contention:
            lines += [_md_escape(contention), ""]
        parts.append("\n".join(lines))
    return "\n".join(parts)
